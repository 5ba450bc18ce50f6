"""Issue 17 against a real mosquitto: poison messages never kill the monitor or come back forever, and
``edge-deploy command`` never sends in plaintext when TLS is configured."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from testsupport.broker import Broker

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


def _publish(port: int, topic: str, payload: bytes, retain: bool = False) -> None:
    import paho.mqtt.publish as publish

    publish.single(topic, payload, qos=1, retain=retain, hostname="127.0.0.1", port=port)


def _monitor(port: int, out: Path, prefix: str, seconds: float = 2.0) -> dict:
    run = subprocess.run(
        [sys.executable, "-m", "edge_deploy", "monitor", "--broker", f"127.0.0.1:{port}", "--prefix", prefix,
         "--duration", str(seconds), "-o", str(out), "--json"],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    assert (out / "telemetry.csv").is_file() and (out / "telemetry.png").is_file()
    return json.loads(run.stdout)


def _telemetry(device: str, seq: str, fps: str = "3.0") -> bytes:
    return (
        f'{{"type":"telemetry","device_id":"{device}","seq":{seq},"timestamp":1.0,"schema_version":1,'
        f'"latency_p50_ms":1.0,"latency_p90_ms":2.0,"fps":{fps}}}'
    ).encode()


def test_a_retained_nested_status_does_not_kill_fresh_monitors(tmp_path: Path) -> None:
    with Broker(tmp_path / "broker") as broker:
        nested = b'{"type":"status","x":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
        _publish(broker.port, "edge-deploy/x/status", nested, retain=True)
        _publish(broker.port, "edge-deploy/pi-1/telemetry", _telemetry("pi-1", "1"))
        for run in range(2):  # every fresh monitor gets the retained message again: each survives it
            summary = _monitor(broker.port, tmp_path / f"fresh{run}", "edge-deploy")
            assert summary["rejected"] == 1 and summary["devices"] == 0


def test_poison_reports_are_acknowledged_once_not_redelivered_forever(tmp_path: Path) -> None:
    with Broker(tmp_path / "broker") as broker:
        out = tmp_path / "monitor"  # one database and one persistent session across the runs
        assert _monitor(broker.port, out, "fleet", 1.0)["reports"] == 0  # the session exists from now on
        for payload in (_telemetry("pi-1", str(2**64)), _telemetry("pi-1", "1", "9" * 400), b"[" * 100_000):
            _publish(broker.port, "fleet/pi-1/telemetry", payload)
        _publish(broker.port, "fleet/pi-1/telemetry", _telemetry("pi-1", "2"))
        first = _monitor(broker.port, out, "fleet")
        assert (first["rejected"], first["reports"]) == (3, 1)
        second = _monitor(broker.port, out, "fleet")  # nothing was left unacknowledged in the session
        assert (second["rejected"], second["reports"]) == (3, 1)


# --- defect 5: `edge-deploy command` sent in plaintext with broker.tls = true, and ignored tls_cert/tls_key ---


def _device_config(tmp_path: Path, port: int, broker_extra: str) -> Path:
    for name in ("face", "incoming"):
        (tmp_path / name).mkdir(exist_ok=True)
    key = tmp_path / "command.key"
    key.write_text("0123456789abcdef0123456789abcdef\n")
    key.chmod(0o600)
    config = tmp_path / "edge-deploy.toml"
    config.write_text(
        'device_id = "pi-tls"\n[face]\nmodels = "face"\n[source]\npath = "incoming"\n'
        f'[commands]\nsecret_file = "command.key"\n[broker]\nhost = "127.0.0.1"\nport = {port}\n{broker_extra}'
    )
    return config


def _listen(port: int, topic: str, tls: dict | None = None):
    """A client subscribed to ``topic``: returns once the broker has acknowledged the subscription."""
    import threading

    import paho.mqtt.client as mqtt

    got: list[bytes] = []
    subscribed = threading.Event()
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2)
    if tls:
        client.tls_set(**tls)
    client.on_message = lambda c, u, m: got.append(m.payload)
    client.on_subscribe = lambda c, u, mid, codes, props: subscribed.set()
    client.connect("127.0.0.1", port)
    client.subscribe(topic, qos=1)
    client.loop_start()
    assert subscribed.wait(10), f"the listener's subscription to {topic} was not acknowledged in 10 s"
    return client, got


def _command(config: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "edge_deploy", "command", "--config", str(config), "reload"],
        capture_output=True, text=True, timeout=60, cwd=REPO,
    )  # fmt: skip


def test_command_never_falls_back_to_plaintext(tmp_path: Path) -> None:
    import time

    topic = "edge-deploy/pi-tls/cmd"
    with Broker(tmp_path / "broker") as broker:  # a plaintext broker: what the outside test captured on
        client, got = _listen(broker.port, topic)
        run = _command(_device_config(tmp_path, broker.port, "tls = true\n"))
        # a plaintext message sent after the command has exited: the listener sees it, so it would have seen
        # the command had it been sent in the clear (QoS 1 from one broker to one subscriber keeps order)
        _publish(broker.port, topic, b"canary")
        deadline = time.monotonic() + 10
        while b"canary" not in got and time.monotonic() < deadline:
            time.sleep(0.05)
        client.loop_stop()
        client.disconnect()
    assert run.returncode == 3 and run.stderr.startswith(f"Error: cannot publish to broker 127.0.0.1:{broker.port}: ")
    assert got == [b"canary"]  # the listener was listening, and nothing reached the broker in the clear


def test_command_uses_the_client_certificate(tmp_path: Path) -> None:
    import time

    from testsupport.broker import make_tls_files

    files = make_tls_files(tmp_path / "tls")
    with Broker(tmp_path / "broker", tls=files, require_client_cert=True) as broker:
        tls = {"ca_certs": str(files.ca), "certfile": str(files.client_cert), "keyfile": str(files.client_key)}
        client, got = _listen(broker.port, "edge-deploy/pi-tls/cmd", tls)
        extra = f'tls_ca = "{files.ca}"\ntls_cert = "{files.client_cert}"\ntls_key = "{files.client_key}"\n'
        run = _command(_device_config(tmp_path, broker.port, extra))
        deadline = time.monotonic() + 10
        while not got and time.monotonic() < deadline:
            time.sleep(0.1)
        client.loop_stop()
        client.disconnect()
    assert run.returncode == 0, run.stderr
    assert len(got) == 1 and json.loads(got[0])["cmd"] == "reload"
