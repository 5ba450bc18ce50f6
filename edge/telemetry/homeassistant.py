"""Home Assistant MQTT discovery: announce a device's latency, fps and temperature as sensors.

Each sensor gets one retained config message on ``<ha_prefix>/sensor/edge_deploy_<device>/<key>/config``
whose ``state_topic`` is the device's telemetry topic and whose ``value_template`` picks one field of the
telemetry JSON. Availability follows the device's retained status topic (``online``/``offline``). A
missing temperature (JSON ``null``) renders as ``None``, which Home Assistant shows as *unknown*.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from edge import __version__
from edge.telemetry.schema import DeviceState, MessageKind, check_name, check_prefix, topic_for

#: Home Assistant's default discovery prefix.
DEFAULT_HA_PREFIX = "homeassistant"


@dataclass(frozen=True)
class _Sensor:
    key: str
    name: str
    field: str
    unit: str
    device_class: str | None = None


_SENSORS = (
    _Sensor("latency_p50", "Latency p50", "latency_p50_ms", "ms", "duration"),
    _Sensor("latency_p90", "Latency p90", "latency_p90_ms", "ms", "duration"),
    _Sensor("fps", "Frames per second", "fps", "fps"),
    _Sensor("temperature", "SoC temperature", "temperature_c", "°C", "temperature"),
)


def discovery_messages(prefix: str, device_id: str, ha_prefix: str = DEFAULT_HA_PREFIX) -> list[tuple[str, str]]:
    """Build the retained discovery config messages for one device.

    Args:
        prefix: edge-deploy topic prefix, e.g. ``edge-deploy``.
        device_id: the device's id (one topic level).
        ha_prefix: Home Assistant's discovery prefix.

    Returns:
        (topic, JSON payload) pairs, one per sensor: latency p50, latency p90, fps, temperature.

    Raises:
        TelemetryError: if a prefix or the device id is not a valid topic level.
    """
    check_prefix(ha_prefix)
    node = "edge_deploy_" + check_name("device_id", device_id).replace(".", "_").replace(":", "_")
    state_topic = topic_for(prefix, device_id, MessageKind.TELEMETRY)
    device = {
        "identifiers": [f"edge-deploy-{device_id}"],
        "name": f"edge-deploy {device_id}",
        "manufacturer": "edge-deploy",
        "sw_version": __version__,
    }
    messages = []
    for sensor in _SENSORS:
        config: dict[str, object] = {
            "name": sensor.name,
            "unique_id": f"{node}_{sensor.key}",
            "object_id": f"{node}_{sensor.key}",
            "state_topic": state_topic,
            "value_template": "{{ value_json." + sensor.field + " }}",
            "unit_of_measurement": sensor.unit,
            "state_class": "measurement",
            "availability_topic": topic_for(prefix, device_id, MessageKind.STATUS),
            "availability_template": "{{ value_json.state }}",
            "payload_available": DeviceState.ONLINE.value,
            "payload_not_available": DeviceState.OFFLINE.value,
            "device": device,
        }
        if sensor.device_class:
            config["device_class"] = sensor.device_class
        topic = f"{ha_prefix}/sensor/{node}/{sensor.key}/config"
        messages.append((topic, json.dumps(config, separators=(",", ":"), ensure_ascii=False)))
    return messages
