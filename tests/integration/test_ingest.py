"""Ingest under hostile input (issue 44) on a real PostgreSQL and a real mosquitto: a message the database
refuses is rejected and counted and never stops the rest; an outage is retried, logged once and loses
nothing; a report from the future is refused; a fuzz pass over telemetry fields stores every good report
and rejects every bad one."""

from __future__ import annotations

import itertools
import json
import logging
import random
import re
import string
import time
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edge.telemetry.link import BrokerConfig
from edge.telemetry.schema import MessageKind, Telemetry
from fleet import FleetStore, Monitor, MonitorConfig, StoreUnavailable, open_store
from fleet.ingest import commit_messages
from fleet.records import Incoming, WriteResult
from tests import fuzz_strategies as fs
from testsupport.broker import Broker
from testsupport.postgres import Postgres, wait_until

pytestmark = pytest.mark.integration
#: Fuzz cases per store, and through the broker (each case: 1-6 reports).
FUZZ_CASES = 150
BROKER_CASES = 12


def fast(port: int) -> BrokerConfig:
    return BrokerConfig("127.0.0.1", port, reconnect_min_s=0.2, reconnect_max_s=1.0, keepalive_s=5)


def body(device: str, seq: int, ts: float, **fields) -> dict:
    """A telemetry report's JSON body (schema version 3), with ``fields`` added or replaced."""
    return {"type": "telemetry", "device_id": device, "seq": seq, "timestamp": ts, "schema_version": 3,
            "latency_p50_ms": 1.0, "latency_p90_ms": 2.0, "fps": 3.0, **fields}  # fmt: skip


def wire(value: dict) -> bytes:
    return json.dumps(value, ensure_ascii=False).encode()


def publish(port: int, messages: list[tuple[str, bytes]]) -> None:
    import paho.mqtt.publish as mqtt_publish

    mqtt_publish.multiple([{"topic": t, "payload": p, "qos": 1} for t, p in messages], hostname="127.0.0.1", port=port)


def commit(store: FleetStore, reports: list[dict], received: float) -> WriteResult:
    """The monitor's path (``commit_messages``) for telemetry reports received at ``received``."""
    items = [(f"edge-deploy/{r['device_id']}/telemetry", wire(r), received, False) for r in reports]
    return commit_messages(store, "edge-deploy", items)


def letters(n: int, seed: int = 0) -> str:
    """``n`` random ASCII letters (incompressible enough that PostgreSQL can't shrink them into an index row)."""
    return "".join(random.Random(seed).choices(string.ascii_letters, k=n))


def wide(n: int, seed: int) -> str:
    """``n`` random 4-byte characters: the longest UTF-8 and, unlike one character repeated, incompressible."""
    rng = random.Random(seed)
    return "".join(chr(rng.randrange(0x10000, 0x10FFFE)) for _ in range(n))


#: Every string field of a telemetry report at its bound, in 4-byte characters (the widest key in bytes).
WIDEST = {"model": wide(255, 0), "precision": wide(32, 1), **{k: wide(64, i) for i, k in enumerate(("model_version",
          "model_sha256", "bundle_id", "profile", "runtime", "int8_kernels"), 2)}}  # fmt: skip


def refuse_device(url: str, device: str, sqlstate: str) -> None:
    """Make PostgreSQL refuse every report of ``device`` with ``sqlstate`` (a trigger on ``messages``)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            f"IF NEW.device_id = '{device}' THEN RAISE EXCEPTION 'refused by the test' USING ERRCODE = '{sqlstate}'; "
            "END IF; RETURN NEW; END $$; "
            "CREATE TRIGGER refuse BEFORE INSERT ON messages FOR EACH ROW EXECUTE FUNCTION refuse()"
        )


def drop_refusal(url: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP TRIGGER refuse ON messages")


MIXED = [("pi-1", 1), ("pi-bad", 1), ("pi-1", 2), ("pi-2", 1), ("pi-bad", 2), ("pi-2", 2), ("pi-1", 3)]


def test_a_report_postgres_refused_no_longer_stops_ingest(
    tmp_path: Path, pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Finding 1: an 8,000-character model stopped every PostgreSQL write for good, silently."""
    caplog.set_level(logging.WARNING, logger="fleet.ingest")
    now = time.time()
    good = [("pi-1", 1), ("pi-1", 3), ("pi-2", 1)]
    with Broker(tmp_path / "broker") as broker:
        config = MonitorConfig(fast(broker.port), pg_url, client_id="m")
        with Monitor(config) as monitor:
            assert monitor.start(timeout=10)
            publish(broker.port, [
                ("edge-deploy/pi-1/telemetry", wire(body("pi-1", 1, now))),
                ("edge-deploy/pi-1/telemetry", wire(body("pi-1", 2, now, model=letters(8000)))),
                ("edge-deploy/pi-1/telemetry", wire(body("pi-1", 3, now))),
                ("edge-deploy/pi-1/telemetry", wire(body("pi-1", 4, now + 3600))),  # from the future
                ("edge-deploy/pi-2/telemetry", wire(body("pi-2", 1, now))),
            ])  # fmt: skip
            store = monitor.store
            wait_until(lambda: (store.count(), store.rejected) == (3, 2), 30, "3 reports stored and 2 rejected")
            assert {(d, s) for d in ("pi-1", "pi-2") for s in store.seqs(d)} == set(good)
            publish(broker.port, [("edge-deploy/pi-1/telemetry", wire(body("pi-1", 5, time.time())))])
            assert monitor.wait_for("pi-1", 3, timeout=10)  # ingest goes on
        with Monitor(config) as again:  # the same session: nothing left unacknowledged, nothing redelivered
            assert again.start(timeout=10)
            time.sleep(1.0)
            assert (again.store.count(), again.store.rejected) == (4, 2)
    logged = [r.getMessage() for r in caplog.records if "rejected" in r.getMessage()]
    assert len(logged) == 1, logged  # the first rejection at once, the next within the minute folded into it
    assert re.match(r"monitor: [12] message\(s\) rejected \(the last: topic edge-deploy/pi-1/telemetry: ", logged[0])


def test_a_store_outage_is_retried_logged_once_and_loses_nothing(
    tmp_path: Path, pg: Postgres, pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="fleet.ingest")
    with Broker(tmp_path / "broker") as broker, Monitor(MonitorConfig(fast(broker.port), pg_url)) as monitor:
        assert monitor.start(timeout=10)
        pg.stop()
        try:
            now = time.time()
            publish(broker.port, [("edge-deploy/pi-1/telemetry", wire(body("pi-1", s, now))) for s in range(1, 6)])
            wait_until(lambda: monitor.store_error is not None, 10, "the monitor to notice the outage")
            time.sleep(4.0)  # several retries with backoff
        finally:
            pg.start()
        assert monitor.wait_for("pi-1", 5, timeout=30)
        assert (monitor.store.count(), monitor.store.rejected) == (5, 0)
    lines = [r.getMessage() for r in caplog.records if r.name == "fleet.ingest"]
    waiting = [line for line in lines if "fleet store unavailable" in line]
    assert len(waiting) == 1, lines
    assert waiting[0].startswith("monitor: fleet store unavailable (fleet store postgresql://127.0.0.1:")
    assert waiting[0].endswith("); 5 message(s) wait unacknowledged, retrying with backoff")
    assert any(line.startswith("monitor: fleet store back after ") for line in lines), lines


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_report_from_the_future_is_rejected(backend: str, tmp_path: Path, request) -> None:
    """Finding 5: reports stamped in the future stayed in the dashboard's window for ever."""
    target = tmp_path / "fleet.db" if backend == "sqlite" else request.getfixturevalue("pg_url")
    topic = "edge-deploy/pi-1/telemetry"
    with open_store(target) as store:
        assert store.handle(topic, wire(body("pi-1", 1, 1300.0)), received=1000.0) == "stored"  # within the skew
        assert store.handle(topic, wire(body("pi-1", 2, 1300.5)), received=1000.0) == "rejected"
        assert store.last_rejection == (
            f"topic {topic}: timestamp 1300.5 is 300.5 s ahead of the monitor's clock; expected at most 300 s "
            "(is the device's clock set?)"
        )
        assert (store.seqs("pi-1"), store.rejected) == ([1], 1)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_every_string_at_its_bound_is_stored_and_one_more_character_is_rejected(
    backend: str, tmp_path: Path, request
) -> None:
    """No key is built from unbounded fields: the widest report fits PostgreSQL's index row limit."""
    target = tmp_path / "fleet.db" if backend == "sqlite" else request.getfixturevalue("pg_url")
    device = "d" * 64
    longer = {**WIDEST, "model": WIDEST["model"] + "x"}
    with open_store(target) as store:
        result = commit(store, [body(device, 1, 100.0, **WIDEST), body(device, 2, 100.0, **longer)], 100.0)
        assert (result.stored, result.rejected, store.seqs(device)) == (1, 1, [1])
        assert store.running()[0].model == WIDEST["model"]
        assert store.last_rejection == (
            f"topic edge-deploy/{device}/telemetry: field 'model' = {WIDEST['model'][:24]!r}... (256 characters); "
            "expected at most 255"
        )


@pytest.mark.parametrize("sqlstate", ["22001", "22003", "23514", "54000", "54001"])
def test_a_refusal_of_the_data_rejects_only_the_refused_messages(pg_url: str, sqlstate: str) -> None:
    """Classes 22 (data exception), 23 (integrity) and 54 (program limit) refuse a row: resending can't help."""
    with open_store(pg_url) as store:
        refuse_device(pg_url, "pi-bad", sqlstate)
        result = commit(store, [body(d, s, 100.0) for d, s in MIXED], 100.0)
        assert (result.stored, result.rejected, store.count(), store.rejected) == (5, 2, 5, 2)
        assert (store.seqs("pi-1"), store.seqs("pi-2"), store.seqs("pi-bad")) == ([1, 2, 3], [1, 2], [])
        assert store.last_rejection == (
            f"topic edge-deploy/pi-bad/telemetry: fleet store {store.location}: refuses the message "
            f"(SQLSTATE {sqlstate}: refused by the test)"
        )


@pytest.mark.parametrize("sqlstate", ["08006", "40001", "53100", "57014", "57P01", "42501", "XX000"])
def test_any_other_error_is_an_outage_retried_without_rejecting(pg_url: str, sqlstate: str) -> None:
    """Connection (08), rollback (40), resources (53), operator (57), privilege (42), internal (XX): retry."""
    reports = [body(d, s, 100.0) for d, s in MIXED]
    with open_store(pg_url) as store:
        refuse_device(pg_url, "pi-bad", sqlstate)
        with pytest.raises(StoreUnavailable) as info:
            commit(store, reports, 100.0)
        assert (
            str(info.value)
            == f"fleet store {store.location}: cannot write now (SQLSTATE {sqlstate}: refused by the test)"
        )
        assert (store.count(), store.rejected) == (0, 0)
        drop_refusal(pg_url)
        result = commit(store, reports, 100.0)  # the retry stores all of it
        assert (result.stored, result.rejected, store.count(), store.rejected) == (7, 0, 7, 0)


def test_a_row_too_large_for_the_key_is_isolated_and_rejected(pg_url: str) -> None:
    """Finding 1's refusal itself (SQLSTATE 54000 on ``running_pkey``), met past the schema's bounds."""

    def report(seq: int, model: str) -> Incoming:
        message = Telemetry(device_id="pi-1", seq=seq, timestamp=100.0, latency_p50_ms=1.0, latency_p90_ms=2.0,
                            fps=3.0, model=model)  # fmt: skip
        return Incoming(
            "pi-1", MessageKind.TELEMETRY, message, wire(body("pi-1", seq, 100.0, model=model)).decode(), 100.0
        )

    batch = [report(1, "m"), report(2, letters(8000)), report(3, "m"), report(4, "n")]
    with open_store(pg_url) as store:
        result = store.commit(batch)
        assert (result.stored, result.rejected, store.seqs("pi-1"), store.rejected) == (3, 1, [1, 3, 4], 1)
        assert store.last_rejection.startswith(
            f"topic edge-deploy/pi-1/telemetry: fleet store {store.location}: refuses the message (SQLSTATE 54000: "
            "index row size "
        )
        assert store.last_rejection.endswith(' exceeds btree version 4 maximum 2704 for index "running_pkey")')


# --- the fuzz pass over telemetry fields (lengths, control characters, types, timestamps) ------------------

DEVICE = "pi-f"
RECEIVED = 1_700_000_000.0
#: The documented bounds (docs/fleet.md, "What ingest refuses"); every other string field: 64 characters.
BOUNDS = {"model": 255, "precision": 32}


def acceptable(report: dict, received: float) -> bool:
    """Whether ingest must store ``report`` (topic ``edge-deploy/pi-f/telemetry``), stated apart from the code."""
    for name in fs.TELEMETRY_TEXT_FIELDS:
        value = report.get(name, "")
        if not isinstance(value, str) or len(value) > BOUNDS.get(name, 64):
            return False
        if any(unicodedata.category(c) == "Cc" for c in value):
            return False
    for name in fs.TELEMETRY_NUMBER_FIELDS:
        value = report.get(name, 0.0)
        if value is None and name == "temperature_c":
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        if isinstance(value, int) and abs(value) > 2**53 - 1:  # JSON integers beyond that are refused
            return False
    return report["device_id"] == DEVICE and report["timestamp"] - received <= 300.0


def reports_of(cases: list[tuple[dict, float]], seqs: Iterator[int], received: float) -> list[dict]:
    return [body(DEVICE, next(seqs), received + ahead, **fields) for fields, ahead in cases]


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_fuzzed_telemetry_fields_every_good_report_stored_every_bad_one_rejected(
    backend: str, tmp_path: Path, request
) -> None:
    target = tmp_path / "fleet.db" if backend == "sqlite" else request.getfixturevalue("pg_url")
    seqs = itertools.count(1)
    seen = {"good": 0, "bad": 0}
    with open_store(target) as store:

        @settings(max_examples=FUZZ_CASES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(st.lists(fs.telemetry_overrides(), min_size=1, max_size=6))
        def prop(cases: list[tuple[dict, float]]) -> None:
            reports = reports_of(cases, seqs, RECEIVED)
            good = [r["seq"] for r in reports if acceptable(r, RECEIVED)]
            bad = len(reports) - len(good)
            before = store.rejected
            items = [(f"edge-deploy/{DEVICE}/telemetry", wire(r), RECEIVED, False) for r in reports]
            result = commit_messages(store, "edge-deploy", items)  # the monitor's path: decode, then commit
            stored = set(store.seqs(DEVICE))
            assert [r["seq"] for r in reports if r["seq"] in stored] == good, store.last_rejection
            assert (result.stored, result.rejected, store.rejected - before) == (len(good), bad, bad)
            seen["good"] += len(good)
            seen["bad"] += bad

        prop()
    print(f"\n{backend}: {seen['good']} reports stored, {seen['bad']} rejected")


def test_fuzzed_telemetry_through_the_broker_leaves_the_monitor_alive(tmp_path: Path, pg_url: str) -> None:
    seqs = itertools.count(1)
    expected = {"good": 0, "bad": 0}
    with Broker(tmp_path / "broker") as broker, Monitor(MonitorConfig(fast(broker.port), pg_url)) as monitor:
        assert monitor.start(timeout=10)
        store = monitor.store

        @settings(max_examples=BROKER_CASES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(st.lists(fs.telemetry_overrides(skew_edges=False), min_size=1, max_size=5))
        def prop(cases: list[tuple[dict, float]]) -> None:
            now = time.time()
            reports = reports_of(cases, seqs, now)
            good = sum(acceptable(r, now) for r in reports)
            expected["good"] += good
            expected["bad"] += len(reports) - good
            publish(broker.port, [(f"edge-deploy/{DEVICE}/telemetry", wire(r)) for r in reports])
            want = (expected["good"], expected["bad"])
            wait_until(lambda: (store.count(), store.rejected) == want, 20, f"(stored, rejected) = {want}")
            assert monitor.connected and monitor.store_error is None

        prop()
    print(f"\nthrough the broker: {expected['good']} reports stored, {expected['bad']} rejected")
