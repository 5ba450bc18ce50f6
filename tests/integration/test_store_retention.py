"""Retention (issue 43) on a real PostgreSQL and a SQLite file: old reports go (whole daily partitions in
PostgreSQL, batches in SQLite), recent ones stay, the per-device counts follow, a report is still stored once
while retention runs beside ingest and through the monitor, an older unpartitioned PostgreSQL table keeps
working, and a bad ``retention_days`` is refused by name."""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path

import pytest

from edge.errors import TelemetryError
from edge.telemetry.link import BrokerConfig
from edge.telemetry.schema import MessageKind
from edge_deploy.cli import main
from fleet import FleetStore, Monitor, MonitorConfig, open_store
from fleet.ingest import commit_messages
from fleet.store import DAY_S, RETENTION_BATCH
from testsupport.broker import Broker
from testsupport.postgres import wait_until

pytestmark = pytest.mark.integration

NOW = time.time()
#: (device, seq, days before NOW) of the reports each test starts with.
REPORTS = [("pi-1", 1, 20), ("pi-1", 2, 10), ("pi-1", 3, 5), ("pi-1", 4, 1), ("pi-1", 5, 0), ("pi-2", 1, 10)]


def wire(device: str, seq: int, ts: float) -> bytes:
    return json.dumps({"type": "telemetry", "device_id": device, "seq": seq, "timestamp": ts, "schema_version": 3,
                       "latency_p50_ms": 1.0, "latency_p90_ms": 2.0, "fps": float(seq)}).encode()  # fmt: skip


def commit(store: FleetStore, reports: list[tuple[str, int, float]]):
    """The monitor's path for reports (device, seq, days before NOW)."""
    items = [(f"edge-deploy/{d}/telemetry", wire(d, s, NOW - days * DAY_S), NOW, False) for d, s, days in reports]
    return commit_messages(store, "edge-deploy", items)


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request, tmp_path: Path):
    target = str(tmp_path / "m.db") if request.param == "sqlite" else request.getfixturevalue("pg_url")
    with open_store(target) as opened:
        opened.maintain(None, now=NOW - 12 * DAY_S)  # PostgreSQL: daily partitions from 12 days ago on
        yield opened


def test_old_reports_go_recent_stay_and_counts_follow(store: FleetStore) -> None:
    assert commit(store, REPORTS).stored == 6
    assert store.maintain(3, now=NOW) == 4
    assert (store.seqs("pi-1"), store.seqs("pi-2"), store.count()) == ([4, 5], [], 2)
    assert {r.device_id: r.reports for r in store.devices()} == {"pi-1": 2, "pi-2": 0}
    assert store.latest(MessageKind.TELEMETRY) == {"pi-1": [json.loads(wire("pi-1", 5, NOW))]}
    assert store.maintain(3, now=NOW) == 0
    assert store.maintain(None, now=NOW + 100 * DAY_S) == 0  # no retention: nothing goes
    assert store.count() == 2


def test_postgres_drops_whole_partitions_and_deletes_the_default_in_batches(pg_url: str) -> None:
    import psycopg

    with open_store(pg_url) as store:
        store.maintain(None, now=NOW - 12 * DAY_S)
        many = [("pi-3", seq, 30) for seq in range(1, RETENTION_BATCH + 2)]  # before every partition: the default
        assert commit(store, REPORTS + many).stored == 6 + RETENTION_BATCH + 1
        with psycopg.connect(pg_url, autocommit=True) as conn:  # a transaction left open would hold off the drop
            where = "SELECT tableoid::regclass::text FROM messages WHERE device_id = %s AND seq = %s"
            assert conn.execute(where, ("pi-1", 1)).fetchone() == ("messages_default",)
            ten_days_ago = conn.execute(where, ("pi-1", 2)).fetchone()[0]
            assert ten_days_ago.startswith("messages_2")
            assert store.maintain(3, now=NOW) == 4 + RETENTION_BATCH + 1
            gone = conn.execute("SELECT to_regclass(%s)", (ten_days_ago,)).fetchone()
            assert gone == (None,)
            assert conn.execute("SELECT count(*) FROM messages_default").fetchone() == (1,)  # 1 day ago
        assert store.count() == 2


def test_a_report_is_stored_once_while_retention_runs_beside_ingest(store: FleetStore) -> None:
    stop = threading.Event()
    runs: list[int | Exception] = []

    def retain() -> None:
        while not stop.is_set():
            try:
                runs.append(store.maintain(3, now=NOW))
            except Exception as exc:  # noqa: BLE001 - kept for the assertion below
                runs.append(exc)

    worker = threading.Thread(target=retain)
    worker.start()
    try:  # each batch: 20 new reports (the odd seqs past the retention) and the 5 recent ones before redelivered
        for first in range(1, 400, 20):
            batch = [("pi-9", s, 10 if s % 2 else 0) for s in range(first, first + 20)]
            again = [("pi-9", s, 0) for s in range(max(first - 10, 1), first) if s % 2 == 0]
            before = len(runs)
            commit(store, batch + again)
            wait_until(lambda: len(runs) > before + 1, 30, "a retention run after the commit")  # noqa: B023
    finally:
        stop.set()
        worker.join(30)
    assert not [r for r in runs if isinstance(r, Exception)]
    store.maintain(3, now=NOW)
    assert store.seqs("pi-9") == list(range(2, 401, 2))
    assert (store.devices()[0].reports, store.duplicates) == (200, 95)
    assert commit(store, [("pi-9", 2, 0), ("pi-9", 402, 0)]).stored == 1


def test_the_monitor_runs_retention_and_ingest_stays_exactly_once(tmp_path: Path, pg_url: str) -> None:
    import paho.mqtt.publish as mqtt_publish

    with open_store(pg_url) as store:
        commit(store, REPORTS)
    with Broker(tmp_path / "broker") as broker:
        fast = BrokerConfig("127.0.0.1", broker.port, reconnect_min_s=0.2, reconnect_max_s=1.0, keepalive_s=5)
        with Monitor(MonitorConfig(fast, pg_url, retention_days=3, maintain_every_s=0.2)) as monitor:
            assert monitor.start(timeout=10)
            wait_until(lambda: monitor.store.seqs("pi-1") == [4, 5], 20, "retention to remove the old reports")
            now = time.time()
            new = {s: wire("pi-1", s, now - (s % 2) * 10 * DAY_S) for s in range(6, 60)}
            again = [wire(d, s, NOW - days * DAY_S) for d, s, days in REPORTS[3:5]] + [new[6], new[8]]
            mqtt_publish.multiple(
                [{"topic": "edge-deploy/pi-1/telemetry", "payload": p, "qos": 1} for p in [*new.values(), *again]],
                hostname="127.0.0.1",
                port=broker.port,
            )
            want = [4, 5, *range(6, 60, 2)]
            wait_until(lambda: monitor.store.seqs("pi-1") == want, 20, f"seqs {want}")
            wait_until(lambda: monitor.store.duplicates == 4, 20, "4 duplicates: 4, 5, 6 and 8 again")


def test_an_unpartitioned_postgres_table_keeps_working(pg_url: str, caplog: pytest.LogCaptureFixture) -> None:
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:  # the schema edge-deploy made before partitions
        conn.execute(
            "CREATE TABLE messages (device_id text NOT NULL, seq bigint NOT NULL, kind text NOT NULL, "
            "timestamp double precision NOT NULL, received double precision NOT NULL, stored double precision "
            "NOT NULL DEFAULT 0, payload text NOT NULL, PRIMARY KEY (device_id, seq)); "
            "CREATE TABLE latest (device_id text NOT NULL, kind text NOT NULL, seq bigint NOT NULL, "
            "payload text NOT NULL, PRIMARY KEY (device_id, kind))"
        )
        for device, seq, days in REPORTS[:3]:
            conn.execute(
                "INSERT INTO messages VALUES (%s, %s, 'telemetry', %s, %s, 0, %s)",
                (device, seq, NOW - days * DAY_S, NOW, wire(device, seq, NOW - days * DAY_S).decode()),
            )
    with open_store(pg_url) as store, caplog.at_level(logging.WARNING):
        assert not store.partitioned
        assert commit(store, REPORTS).stored == 3
        assert {r.device_id: r.reports for r in store.devices()} == {"pi-1": 5, "pi-2": 1}
        assert store.maintain(3, now=NOW) == 4
        assert store.seqs("pi-1") == [4, 5]
        assert "table messages is not partitioned" in caplog.text


@pytest.mark.parametrize("value", [0, -1, 2.5, "7", True, 36501])
def test_a_bad_retention_is_refused_by_name(value, tmp_path: Path) -> None:
    with pytest.raises(TelemetryError) as info:
        MonitorConfig(BrokerConfig("127.0.0.1", 1883), tmp_path / "m.db", retention_days=value)
    assert str(info.value) == (
        f"monitor retention_days = {value!r}; expected a whole number of days in 1..36500 (or none: keep all)"
    )


def test_the_monitor_command_names_a_bad_retention(tmp_path: Path, capsys) -> None:
    argv = ["monitor", "--broker", "127.0.0.1:1", "--retention-days", "0", "--output", str(tmp_path)]
    assert main(argv) != 0
    assert "monitor retention_days = 0; expected a whole number of days in 1..36500" in capsys.readouterr().err
