"""Telemetry client pieces that need no broker: config checks, backoff, refusal texts, HA discovery."""

from __future__ import annotations

import json
import random
import socket
from pathlib import Path

import pytest

import edge
from edge.errors import TelemetryError
from edge.telemetry.homeassistant import discovery_messages
from edge.telemetry.link import BrokerConfig, backoff_delay, refusal_message
from edge.telemetry.mqtt import TelemetryClient, TelemetryConfig
from edge.telemetry.schema import Telemetry


def test_backoff_doubles_up_to_the_cap_with_jitter() -> None:
    rng = random.Random(1)
    for attempt in range(12):
        nominal = min(30.0, 0.5 * 2**attempt)
        delays = [backoff_delay(attempt, 0.5, 30.0, rng) for _ in range(200)]
        assert min(delays) >= nominal / 2
        assert max(delays) <= nominal
        assert max(delays) - min(delays) > nominal / 4  # really jittered, not a fixed delay
    assert backoff_delay(10_000, 1.0, 60.0, rng) <= 60.0


def test_refusals_that_retrying_cannot_fix_are_fatal() -> None:
    assert refusal_message("127.0.0.1:1884", "Not authorized") == (
        "broker 127.0.0.1:1884 refused the connection: not authorised (check username/password)",
        True,
    )
    assert refusal_message("h:1", "Bad user name or password") == (
        "broker h:1 refused the connection: bad username or password (check username/password)",
        True,
    )
    assert refusal_message("h:1", "Server unavailable") == (
        "broker h:1 refused the connection: server unavailable (will retry)",
        False,
    )


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"port": 0}, "broker port = 0; expected an integer in 1..65535"),
        ({"port": "1883"}, "broker port = '1883'; expected an integer in 1..65535"),
        ({"password": "x"}, "broker password is set but username is not; expected both or neither"),
        ({"keepalive_s": 0}, "broker keepalive_s = 0; expected a number > 0"),
        (
            {"reconnect_min_s": 5.0, "reconnect_max_s": 1.0},
            "broker reconnect_max_s = 1.0; expected >= reconnect_min_s (5.0)",
        ),
        (
            {"tls_ca": Path("/nonexistent/ca.crt")},
            "broker tls_ca = '/nonexistent/ca.crt'; expected an existing PEM file",
        ),
    ],
)
def test_broker_config_errors_name_the_key(kwargs: dict, error: str) -> None:
    with pytest.raises(TelemetryError) as info:
        BrokerConfig("127.0.0.1", **kwargs)
    assert str(info.value) == error


def test_client_cert_needs_its_key(tmp_path: Path) -> None:
    cert = tmp_path / "c.crt"
    cert.write_text("x")
    with pytest.raises(TelemetryError) as info:
        BrokerConfig("h", tls_cert=cert)
    assert str(info.value) == f"broker tls_cert = {cert!r}, tls_key = None; expected both or neither"
    assert BrokerConfig("h", tls=True).uses_tls and not BrokerConfig("h").uses_tls


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        (
            {"device_id": "pi/1"},
            "device_id = 'pi/1'; expected 1-64 characters of letters, digits, '_', '.', ':' or '-' (it becomes one "
            "MQTT topic level)",
        ),
        ({"queue_bound": 0}, "telemetry queue_bound = 0; expected an integer >= 1"),
        ({"ack_timeout_s": -1}, "telemetry ack_timeout_s = -1; expected a number > 0"),
    ],
)
def test_telemetry_config_errors(kwargs: dict, error: str, tmp_path: Path) -> None:
    args = {"device_id": "pi-1", "outbox_path": tmp_path / "o.db", **kwargs}
    with pytest.raises(TelemetryError) as info:
        TelemetryConfig(**args)
    assert str(info.value) == error


def test_without_broker_reports_wait_in_the_outbox(tmp_path: Path) -> None:
    client = TelemetryClient(TelemetryConfig(device_id="pi-1", outbox_path=tmp_path / "o.db"))
    assert client.connect(timeout=5) is False
    for _ in range(3):
        client.report(Telemetry(latency_p50_ms=1.0, latency_p90_ms=2.0, fps=3.0))
    health = client.health()
    assert (health.connected, health.pending, health.last_seq, health.last_error) == (
        False, 3, 3, "no broker configured",
    )  # fmt: skip
    assert client.close(timeout=1) == 3
    with pytest.raises(TelemetryError) as info:
        client.report(Telemetry(latency_p50_ms=1.0, latency_p90_ms=2.0, fps=3.0))
    assert str(info.value) == "telemetry client for 'pi-1' is closed; cannot report"


def test_unreachable_broker_is_retried_in_the_background(tmp_path: Path) -> None:
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    broker = BrokerConfig("127.0.0.1", port, reconnect_min_s=0.05, reconnect_max_s=0.1)
    client = TelemetryClient(TelemetryConfig(device_id="pi-1", outbox_path=tmp_path / "o.db", broker=broker))
    assert client.connect(timeout=1.0) is False
    health = client.health()
    assert health.attempts >= 3
    assert health.last_error == f"cannot connect to broker 127.0.0.1:{port}: [Errno 111] Connection refused"
    assert health.fatal_error is None
    assert client.close(timeout=1) == 0


def test_home_assistant_discovery_configs() -> None:
    messages = dict(discovery_messages("edge-deploy", "pi.kitchen"))
    node = "homeassistant/sensor/edge_deploy_pi_kitchen"
    assert sorted(messages) == [f"{node}/{k}/config" for k in ("fps", "latency_p50", "latency_p90", "temperature")]
    temp = json.loads(messages[f"{node}/temperature/config"])
    assert temp == {
        "name": "SoC temperature",
        "unique_id": "edge_deploy_pi_kitchen_temperature",
        "object_id": "edge_deploy_pi_kitchen_temperature",
        "state_topic": "edge-deploy/pi.kitchen/telemetry",
        "value_template": "{{ value_json.temperature_c }}",
        "unit_of_measurement": "°C",
        "state_class": "measurement",
        "availability_topic": "edge-deploy/pi.kitchen/status",
        "availability_template": "{{ value_json.state }}",
        "payload_available": "online",
        "payload_not_available": "offline",
        "device": {
            "identifiers": ["edge-deploy-pi.kitchen"],
            "name": "edge-deploy pi.kitchen",
            "manufacturer": "edge-deploy",
            "sw_version": edge.__version__,
        },
        "device_class": "temperature",
    }
    assert json.loads(messages[f"{node}/latency_p50/config"])["unit_of_measurement"] == "ms"
