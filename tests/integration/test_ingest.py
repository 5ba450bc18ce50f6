"""Ingest under hostile input (issue 44) on a real PostgreSQL and a real mosquitto: a message the database
refuses is rejected and counted and never stops the rest; an outage is retried, logged once and loses
nothing; a report from the future is refused; a fuzz pass over telemetry fields stores every good report
and rejects every bad one."""

from __future__ import annotations

import json
import logging
import time
import uuid
from pathlib import Path

import pytest

from edge.telemetry.link import BrokerConfig
from fleet import Monitor, MonitorConfig, open_store
from tests.integration.broker import Broker
from tests.integration.postgres import Postgres, postgres_missing, wait_until

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def pg():
    why = postgres_missing()
    if why:
        pytest.fail(why)
    server = Postgres().start()
    yield server
    server.close()


def new_database(pg: Postgres) -> str:
    """A fresh database on the module's cluster, so tests don't see each other's rows."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    pg.psql(f"CREATE DATABASE {name}")
    return pg.url.rsplit("/", 1)[0] + f"/{name}"


@pytest.fixture()
def pg_url(pg: Postgres) -> str:
    return new_database(pg)


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


def test_a_report_postgres_refused_no_longer_stops_ingest(tmp_path: Path, pg_url: str) -> None:
    """Finding 1: an 8,000-character model stopped every PostgreSQL write for good, silently."""
    now = time.time()
    good = [("pi-1", 1), ("pi-1", 3), ("pi-2", 1)]
    with Broker(tmp_path / "broker") as broker:
        config = MonitorConfig(fast(broker.port), pg_url, client_id="m")
        with Monitor(config) as monitor:
            assert monitor.start(timeout=10)
            publish(broker.port, [
                ("edge-deploy/pi-1/telemetry", wire(body("pi-1", 1, now))),
                ("edge-deploy/pi-1/telemetry", wire(body("pi-1", 2, now, model="x" * 8000))),
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
