"""Per-device credentials (issue 16) against a real mosquitto: require_certificate, use_identity_as_username,
the ACL and CRL written by ``edge-deploy fleet provision`` / ``revoke``.

Device pi-a cannot publish as pi-b nor read pi-b's commands; a monitor reads everything; an operator commands
any device; a certificate from another CA, no certificate, and a revoked certificate are refused. The
device's own telemetry client (the daemon's) reports through the same broker with its certificate.
"""

from __future__ import annotations

import contextlib
import queue
import ssl
import time
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest

from edge.telemetry.link import BrokerConfig
from edge.telemetry.mqtt import TelemetryClient, TelemetryConfig
from edge.telemetry.schema import Telemetry
from edge_deploy.cli import main
from tests.integration.broker import Broker, TlsFiles, make_tls_files

pytestmark = pytest.mark.integration
PREFIX = "edge-deploy"


class Client:
    """A paho MQTT v5 client over TLS with a client certificate; records what it receives and the acks."""

    def __init__(self, broker: Broker, server_ca: Path, cert: Path | None, key: Path | None, name: str) -> None:
        self.messages: queue.Queue[tuple[str, bytes]] = queue.Queue()
        self.acks: queue.Queue[tuple[str, int, list[str]]] = queue.Queue()
        self.connected: queue.Queue[bool] = queue.Queue()
        c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=name, protocol=mqtt.MQTTv5)
        c.tls_set(ca_certs=str(server_ca), certfile=str(cert) if cert else None, keyfile=str(key) if key else None)
        c.on_connect = lambda _c, _u, _f, rc, _p: self.connected.put(not rc.is_failure)
        c.on_message = lambda _c, _u, m: self.messages.put((m.topic, bytes(m.payload)))
        c.on_publish = lambda _c, _u, mid, rc, _p: self.acks.put(("pub", mid, [str(rc)]))
        c.on_subscribe = lambda _c, _u, mid, rcs, _p: self.acks.put(("sub", mid, [str(r) for r in rcs]))
        self.client = c
        self.ok = False
        try:
            c.connect("127.0.0.1", broker.port, keepalive=10)
        except (ssl.SSLError, OSError):
            return
        c.loop_start()
        try:
            self.ok = self.connected.get(timeout=5)
        except queue.Empty:
            self.ok = False

    def publish(self, topic: str, payload: bytes = b"x") -> str:
        mid = self.client.publish(topic, payload, qos=1).mid
        return self._ack("pub", mid)

    def subscribe(self, topic: str) -> str:
        mid = self.client.subscribe(topic, qos=1)[1]
        return self._ack("sub", mid)

    def _ack(self, kind: str, mid: int) -> str:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            got = self.acks.get(timeout=10)
            if got[:2] == (kind, mid):
                return got[2][0]
        raise AssertionError(f"no {kind} ack for {mid}")

    def received(self, wait: float = 1.0) -> list[tuple[str, bytes]]:
        out, deadline = [], time.monotonic() + wait
        while time.monotonic() < deadline:
            with contextlib.suppress(queue.Empty):
                out.append(self.messages.get(timeout=0.05))
        return out

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


@pytest.fixture
def fleet(tmp_path: Path):
    ca = tmp_path / "ca"
    certs = tmp_path / "certs"
    for identity, role in (("pi-a", "device"), ("pi-b", "device"), ("monitor-1", "monitor"), ("ops", "operator")):
        assert main(["fleet", "provision", identity, "--ca", str(ca), "-o", str(certs), "--role", role]) == 0
    server = make_tls_files(tmp_path / "server")  # the broker's own certificate, from another CA
    tls = TlsFiles(ca / "ca.crt", server.server_cert, server.server_key, server.client_cert, server.client_key)
    extra = ("use_identity_as_username true", f"crlfile {ca / 'crl.pem'}", f"acl_file {ca / 'acl'}")
    broker = Broker(tmp_path / "broker", tls=tls, require_client_cert=True, extra_config=extra).start()
    clients: list[Client] = []

    def connect(name: str | None, cert: Path | None = None, key: Path | None = None) -> Client:
        if name is not None and cert is None:
            cert, key = certs / f"{name}.crt", certs / f"{name}.key"
        client = Client(broker, server.ca, cert, key, f"c-{name}-{len(clients)}")
        clients.append(client)
        return client

    yield {"ca": ca, "certs": certs, "server": server, "broker": broker, "connect": connect}
    for c in clients:
        c.close()
    broker.stop()


def test_a_device_publishes_and_reads_only_its_own_topics(fleet) -> None:
    connect = fleet["connect"]
    monitor, ops, a, b = connect("monitor-1"), connect("ops"), connect("pi-a"), connect("pi-b")
    assert (monitor.ok, ops.ok, a.ok, b.ok) == (True, True, True, True)
    assert monitor.subscribe(f"{PREFIX}/#") == "Granted QoS 1"
    assert a.publish(f"{PREFIX}/pi-a/telemetry", b"mine") == "Success"
    assert a.publish(f"{PREFIX}/pi-b/telemetry", b"as b") == "Not authorized"  # cannot report as B
    assert a.publish(f"{PREFIX}/pi-b/cmd", b"order b") == "Not authorized"
    assert sorted(monitor.received()) == [(f"{PREFIX}/pi-a/telemetry", b"mine")]
    # mosquitto 2.0.11 grants a SUBSCRIBE the ACL does not allow, and withholds every message at delivery
    for topic in ("pi-a/cmd", "pi-b/cmd", "pi-b/text/request", "#"):
        a.subscribe(f"{PREFIX}/{topic}")
    assert b.subscribe(f"{PREFIX}/pi-b/cmd") == "Granted QoS 1"
    assert ops.publish(f"{PREFIX}/pi-b/cmd", b"for b") == "Success"
    assert ops.publish(f"{PREFIX}/pi-b/text/request", b"prompt for b") == "Success"
    assert ops.publish(f"{PREFIX}/pi-a/cmd", b"for a") == "Success"
    # cannot read B's commands or prompts (its own arrives once per matching subscription: pi-a/cmd and #)
    assert a.received() == [(f"{PREFIX}/pi-a/cmd", b"for a")] * 2
    assert b.received(0.2) == [(f"{PREFIX}/pi-b/cmd", b"for b")]
    assert monitor.publish(f"{PREFIX}/pi-a/cmd", b"monitor orders") == "Not authorized"  # a monitor only reads


def test_no_foreign_or_revoked_certificate_gets_in(fleet) -> None:
    connect, server = fleet["connect"], fleet["server"]
    assert not connect(None).ok  # no certificate
    assert not connect("stranger", server.client_cert, server.client_key).ok  # signed by another CA
    assert connect("pi-a").ok
    assert main(["fleet", "revoke", "pi-a", "--ca", str(fleet["ca"])]) == 0
    fleet["broker"].restart()
    assert not connect("pi-a").ok
    assert connect("pi-b").ok  # the others keep working


def test_the_daemons_telemetry_client_reports_with_its_certificate(fleet, tmp_path: Path) -> None:
    connect, certs, server = fleet["connect"], fleet["certs"], fleet["server"]
    monitor = connect("monitor-1")
    assert monitor.subscribe(f"{PREFIX}/+/telemetry") == "Granted QoS 1"
    broker = BrokerConfig(
        "127.0.0.1", fleet["broker"].port, tls_ca=server.ca, tls_cert=certs / "pi-a.crt", tls_key=certs / "pi-a.key"
    )
    client = TelemetryClient(TelemetryConfig("pi-a", tmp_path / "outbox.sqlite", broker, PREFIX))
    try:
        assert client.connect(timeout=10)
        client.report(Telemetry(latency_p50_ms=1.0, latency_p90_ms=2.0, fps=3.0, temperature_c=None, window_s=1.0))
        assert client.wait_drained(10)
    finally:
        client.close(5)
    got = monitor.received(1.0)
    assert [t for t, _ in got] == [f"{PREFIX}/pi-a/telemetry"]


def test_revoke_cuts_off_the_revoked_devices_open_session(fleet, capsys) -> None:
    connect = fleet["connect"]
    monitor, ops, a, b = connect("monitor-1"), connect("ops"), connect("pi-a"), connect("pi-b")
    assert monitor.subscribe(f"{PREFIX}/#") == "Granted QoS 1"
    assert a.subscribe(f"{PREFIX}/pi-a/cmd") == "Granted QoS 1"
    assert a.publish(f"{PREFIX}/pi-a/telemetry", b"before") == "Success"
    assert monitor.received() == [(f"{PREFIX}/pi-a/telemetry", b"before")]
    capsys.readouterr()
    assert main(["fleet", "revoke", "pi-a", "--ca", str(fleet["ca"])]) == 0
    assert "reload mosquitto now (systemctl reload mosquitto, or kill -HUP its pid)" in capsys.readouterr().out
    fleet["broker"].reload()
    time.sleep(1.0)
    # the session opened before the revocation is still connected, but may neither publish nor receive
    assert a.publish(f"{PREFIX}/pi-a/telemetry", b"after") == "Not authorized"
    assert ops.publish(f"{PREFIX}/pi-a/cmd", b"for a") == "Success"
    assert b.publish(f"{PREFIX}/pi-b/telemetry", b"b goes on") == "Success"
    assert sorted(monitor.received()) == [(f"{PREFIX}/pi-a/cmd", b"for a"), (f"{PREFIX}/pi-b/telemetry", b"b goes on")]
    assert a.received(0.2) == []
    assert not connect("pi-a").ok
