"""Telemetry against a real mosquitto: nothing lost, nothing twice, clear errors, TLS.

Every broker here is our own mosquitto on a free loopback port (testsupport/broker.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest

from edge.errors import TelemetryError
from edge.telemetry.link import BrokerConfig
from edge.telemetry.mqtt import TelemetryClient, TelemetryConfig
from edge.telemetry.schema import Telemetry
from fleet import Monitor, MonitorConfig
from testsupport.broker import Broker, TlsFiles, make_tls_files

pytestmark = pytest.mark.integration

PUBLISHER = Path(__file__).with_name("telemetry_publisher.py")
REPO = Path(__file__).resolve().parents[2]


def fast(port: int, **kw) -> BrokerConfig:
    """Broker settings with short backoff so tests don't wait long after a restart."""
    return BrokerConfig("127.0.0.1", port, reconnect_min_s=0.2, reconnect_max_s=1.0, keepalive_s=5, **kw)


def report(client: TelemetryClient, i: int) -> int:
    return client.report(Telemetry(latency_p50_ms=10.0 + i % 7, latency_p90_ms=20.0, fps=25.0)).seq


@pytest.fixture()
def broker(tmp_path: Path):
    with Broker(tmp_path / "broker") as b:
        yield b


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("tls"))


#: The outage: 10 s is 10 reconnect periods at ``fast``'s 1 s backoff ceiling (reached after 0.2 + 0.4 + 0.8 s)
#: and two keepalive periods; a longer one only repeats the same failed reconnects while the outbox holds the
#: 300 reports made during it.
OUTAGE_S = 10.0


def test_broker_down_10s_in_the_middle_of_1000_reports(broker: Broker, tmp_path: Path) -> None:
    monitor = Monitor(MonitorConfig(fast(broker.port), tmp_path / "monitor.db"))
    assert monitor.start(timeout=10)
    client = TelemetryClient(TelemetryConfig(device_id="pi-a", outbox_path=tmp_path / "a.db", broker=fast(broker.port)))
    assert client.connect(timeout=10)
    for i in range(400):
        report(client, i)
    broker.stop()  # reports 1..400 partly in flight, partly unsent
    outage_start = time.monotonic()
    for i in range(400, 700):  # the runner keeps working, 300 reports over OUTAGE_S without a broker
        report(client, i)
        time.sleep(max(outage_start + (i - 399) * OUTAGE_S / 300 - time.monotonic(), 0))
    health = client.health()
    assert not health.connected
    assert health.pending >= 300
    assert time.monotonic() - outage_start >= OUTAGE_S
    broker.start()
    for i in range(700, 1000):
        report(client, i)
    assert client.close(timeout=60) == 0
    after = client.health()
    assert after.pending == 0
    assert after.attempts >= 2
    assert monitor.wait_for("pi-a", 1000, timeout=60), f"monitor has {monitor.store.count('pi-a')} of 1000"
    assert monitor.store.seqs("pi-a") == list(range(1, 1001))
    assert monitor.store.count() == 1000
    print(
        f"\nbroker outage: pending at restart {health.pending}, connection attempts {after.attempts}, "
        f"duplicate deliveries dropped by the monitor {monitor.store.duplicates}"
    )
    monitor.close()


def _wait_line(proc: subprocess.Popen, prefix: str, until: int, timeout: float) -> int:
    """Read ``reported N`` lines until N >= until; return the last N."""
    deadline = time.monotonic() + timeout
    last = 0
    while last < until:
        assert time.monotonic() < deadline, f"publisher reached only {last} of {until}"
        line = proc.stdout.readline()
        assert line, f"publisher exited early with {proc.poll()}: {proc.stderr.read()}"
        if line.startswith(prefix):
            last = int(line.split()[1])
    return last


def _start_publisher(port: int, outbox: Path, total: int) -> subprocess.Popen:
    cmd = [sys.executable, str(PUBLISHER), "--port", str(port), "--outbox", str(outbox), "--device", "pi-k"]
    return subprocess.Popen(
        [*cmd, "--total", str(total)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO
    )


def _wait_state(monitor: Monitor, device: str, online: bool, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = {r.device_id: r for r in monitor.store.devices()}
        if device in rows and rows[device].online is online:
            return True
        time.sleep(0.05)
    return False


def test_publisher_sigkilled_mid_run_then_restarted_loses_nothing(broker: Broker, tmp_path: Path) -> None:
    total = 600
    monitor = Monitor(MonitorConfig(fast(broker.port), tmp_path / "monitor.db"))
    assert monitor.start(timeout=10)
    outbox = tmp_path / "k.db"
    proc = _start_publisher(broker.port, outbox, total)
    try:
        killed_at = _wait_line(proc, "reported", 250, timeout=60)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    seen_at_kill = monitor.store.count("pi-k")
    assert killed_at < total
    assert _wait_state(monitor, "pi-k", online=False, timeout=15), "the last will (offline) never arrived"
    proc = _start_publisher(broker.port, outbox, total)
    try:
        out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert out.strip().splitlines()[-1] == "closed 0"
    assert monitor.wait_for("pi-k", total, timeout=30), f"monitor has {monitor.store.count('pi-k')} of {total}"
    assert monitor.store.seqs("pi-k") == list(range(1, total + 1))
    assert _wait_state(monitor, "pi-k", online=False, timeout=5)  # clean close said offline
    print(
        f"\nSIGKILL after seq {killed_at} (monitor had {seen_at_kill}); after restart the monitor has "
        f"{total} distinct, dropped {monitor.store.duplicates} duplicate deliveries"
    )
    monitor.close()


def test_bad_password_is_a_clear_error_not_a_retry_loop(tmp_path: Path) -> None:
    with Broker(tmp_path / "broker", users={"edge": "right-password"}) as b:
        good = TelemetryClient(
            TelemetryConfig(
                device_id="pi-p",
                outbox_path=tmp_path / "good.db",
                broker=fast(b.port, username="edge", password="right-password"),
            )
        )
        assert good.connect(timeout=10)
        good.close(5)
        config = TelemetryConfig(
            device_id="pi-p", outbox_path=tmp_path / "p.db", broker=fast(b.port, username="edge", password="wrong")
        )
        client = TelemetryClient(config)
        expected = f"broker 127.0.0.1:{b.port} refused the connection: not authorised (check username/password)"
        with pytest.raises(TelemetryError) as info:
            client.connect(timeout=10)
        assert str(info.value) == expected
        time.sleep(1.5)  # several backoff periods: a retrying client would have tried again by now
        assert client.health().attempts == 1
        assert client.health().fatal_error == expected
        report(client, 0)  # the runner keeps working: the report waits in the outbox
        assert client.health().pending == 1
        with pytest.raises(TelemetryError) as info:
            client.close(5)
        assert str(info.value) == expected
        monitor = Monitor(MonitorConfig(fast(b.port, username="edge", password="wrong"), tmp_path / "m.db"))
        with pytest.raises(TelemetryError) as info:
            monitor.start(timeout=10)
        assert str(info.value) == expected
        monitor.store.close()


def _tls_roundtrip(b: Broker, tmp_path: Path, broker_config: BrokerConfig, n: int) -> Monitor:
    monitor = Monitor(MonitorConfig(broker_config, tmp_path / "tls-monitor.db"))
    assert monitor.start(timeout=10)
    client = TelemetryClient(TelemetryConfig(device_id="pi-t", outbox_path=tmp_path / "t.db", broker=broker_config))
    assert client.connect(timeout=10)
    for i in range(n):
        report(client, i)
    assert client.close(timeout=10) == 0
    assert monitor.wait_for("pi-t", n, timeout=10)
    assert monitor.store.seqs("pi-t") == list(range(1, n + 1))
    return monitor


def test_tls_with_self_signed_ca_and_password(tls_files: TlsFiles, tmp_path: Path) -> None:
    with Broker(tmp_path / "broker", users={"edge": "pw"}, tls=tls_files) as b:
        config = fast(b.port, username="edge", password="pw", tls_ca=tls_files.ca)
        _tls_roundtrip(b, tmp_path, config, 50).close()
        # A trust anchor that did not sign the broker's certificate is a clear, final error.
        wrong = TelemetryClient(
            TelemetryConfig(
                device_id="pi-w", outbox_path=tmp_path / "w.db", broker=fast(b.port, tls_ca=tls_files.server_cert)
            )
        )
        with pytest.raises(TelemetryError) as info:
            wrong.connect(timeout=10)
        assert str(info.value) == (
            f"broker 127.0.0.1:{b.port}: TLS certificate check failed (self-signed certificate in certificate chain); "
            "check tls_ca and that the broker's certificate names 127.0.0.1"
        )
        wrong._outbox.close()


def test_tls_with_client_certificate(tls_files: TlsFiles, tmp_path: Path) -> None:
    with Broker(tmp_path / "broker", tls=tls_files, require_client_cert=True) as b:
        config = fast(b.port, tls_ca=tls_files.ca, tls_cert=tls_files.client_cert, tls_key=tls_files.client_key)
        _tls_roundtrip(b, tmp_path, config, 20).close()
        # Without a client certificate this broker lets nobody in: the client keeps retrying, nothing sent.
        anon = TelemetryClient(
            TelemetryConfig(device_id="pi-n", outbox_path=tmp_path / "n.db", broker=fast(b.port, tls_ca=tls_files.ca))
        )
        assert anon.connect(timeout=2) is False
        assert anon.close(timeout=1) == 0


def test_no_broker_then_unreachable_broker_outbox_keeps_reports_and_delivers_later(tmp_path: Path) -> None:
    b = Broker(tmp_path / "broker")
    monitor = Monitor(MonitorConfig(fast(b.port), tmp_path / "m.db"))
    try:
        b.start()
        assert monitor.start(timeout=10)  # the monitor's persistent session exists before the device comes
        b.stop()  # from here on the broker is unreachable; the monitor keeps retrying
        outbox = tmp_path / "o.db"
        offline = TelemetryClient(TelemetryConfig(device_id="pi-o", outbox_path=outbox))  # no broker configured
        assert offline.connect(timeout=1) is False
        for i in range(30):
            report(offline, i)
        assert offline.close(timeout=1) == 30
        client = TelemetryClient(TelemetryConfig(device_id="pi-o", outbox_path=outbox, broker=fast(b.port)))
        assert client.connect(timeout=1) is False
        for i in range(30, 50):
            assert report(client, i) == i + 1
        health = client.health()
        assert health.pending == 50
        assert health.last_error.startswith(f"cannot connect to broker 127.0.0.1:{b.port}: ")
        b.start()
        assert client.wait_drained(timeout=30)
        assert client.close(timeout=10) == 0
        assert monitor.wait_for("pi-o", 50, timeout=30), f"monitor has {monitor.store.count('pi-o')} of 50"
        assert monitor.store.seqs("pi-o") == list(range(1, 51))
    finally:
        monitor.close()
        b.stop()


def test_home_assistant_discovery_is_retained(broker: Broker, tmp_path: Path) -> None:
    config = TelemetryConfig(
        device_id="pi-h", outbox_path=tmp_path / "h.db", broker=fast(broker.port), ha_discovery=True
    )
    client = TelemetryClient(config)
    assert client.connect(timeout=10)
    assert client.close(timeout=5) == 0
    got: dict[str, dict] = {}
    done = threading.Event()

    def on_message(c, userdata, msg) -> None:
        got[msg.topic] = json.loads(msg.payload)
        if len(got) == 4:
            done.set()

    sub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="ha-check")
    sub.on_message = on_message
    sub.connect("127.0.0.1", broker.port)
    sub.subscribe("homeassistant/#", qos=1)
    sub.loop_start()
    try:
        assert done.wait(10), f"got only {sorted(got)}"
    finally:
        sub.loop_stop()
        sub.disconnect()
    node = "homeassistant/sensor/edge_deploy_pi-h"
    assert sorted(got) == [f"{node}/{k}/config" for k in ("fps", "latency_p50", "latency_p90", "temperature")]
    assert got[f"{node}/latency_p90/config"]["value_template"] == "{{ value_json.latency_p90_ms }}"
    assert got[f"{node}/temperature/config"]["state_topic"] == "edge-deploy/pi-h/telemetry"
