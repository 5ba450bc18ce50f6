"""Alert rules of the fleet monitor: read from its config, evaluated over the store, published over MQTT.

The ``[alerts]`` table of ``monitor --config FILE`` (every key optional; an absent key turns its rule off)::

    [alerts]
    latency_p90_ms = 500.0   # newest telemetry's whole-frame latency p90 above this
    offline_min = 5.0        # not heard from (offline or silent) for longer than this
    temperature_c = 80.0     # newest telemetry's SoC temperature above this
    rollback_min = 60.0      # an update was rolled back within the last this many minutes

Each device's alerts are published retained as JSON on ``<prefix>-alerts/<device_id>`` when they change
(``{"device_id", "state": "alerting"|"ok", "alerts": [{"rule", "value", "limit", "text"}], "timestamp"}``);
the topic lies outside ``<prefix>/#``, so monitors don't take it for a device's report.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from edge.errors import InputError
from edge.tomlschema import Field, read_tables, read_toml
from fleet.records import DeviceRow
from fleet.store import FleetStore

#: The update task a device reports when it rolled back (edge/daemon/updater.py's TASK_ROLLED_BACK).
ROLLED_BACK = "update.rolled_back"
_SCHEMA = {
    "": {},
    "alerts": {
        "latency_p90_ms": Field(float, None, low=0, low_open=True),
        "offline_min": Field(float, None, low=0, low_open=True),
        "temperature_c": Field(float, None, low=-50, high=200),
        "rollback_min": Field(float, None, low=0, low_open=True),
    },
}


@dataclass(frozen=True)
class AlertRules:
    """Thresholds of the alert rules; None turns a rule off."""

    latency_p90_ms: float | None = None
    offline_min: float | None = None
    temperature_c: float | None = None
    rollback_min: float | None = None


@dataclass(frozen=True)
class Alert:
    """One rule a device breaks now."""

    rule: str
    value: float
    limit: float
    text: str


def load_alert_rules(path: Path) -> AlertRules:
    """The ``[alerts]`` table of a monitor config file (no table: no rules).

    Raises:
        InputError: naming the file and key: unreadable, unknown table or key, a value of the wrong kind.
    """
    where = str(path)
    tables = read_tables(where, read_toml(Path(path), where, InputError, "monitor config"), _SCHEMA, InputError, ())
    return AlertRules(**tables.get("alerts", {}))


def alert_topic(prefix: str, device_id: str) -> str:
    """The retained topic of a device's alerts."""
    return f"{prefix}-alerts/{device_id}"


def device_alerts(row: DeviceRow, rules: AlertRules, rolled_back_at: float | None, now: float) -> list[Alert]:
    """The rules ``row`` breaks at ``now`` (``rolled_back_at``: its newest rollback's time, if any)."""
    out = []
    p90, temp = row.latency_p90_ms, row.temperature_c
    if rules.latency_p90_ms is not None and p90 is not None and p90 > rules.latency_p90_ms:
        out.append(Alert("latency_p90_ms", p90, rules.latency_p90_ms, f"whole-frame p90 {p90:.0f} ms"))
    silent_min = (now - row.last_seen) / 60.0
    if rules.offline_min is not None and silent_min > rules.offline_min:
        out.append(Alert("offline_min", round(silent_min, 1), rules.offline_min, f"offline {silent_min:.0f} min"))
    if rules.temperature_c is not None and temp is not None and temp > rules.temperature_c:
        out.append(Alert("temperature_c", temp, rules.temperature_c, f"{temp:.0f} °C"))
    if rules.rollback_min is not None and rolled_back_at is not None:
        ago = (now - rolled_back_at) / 60.0
        if ago <= rules.rollback_min:
            out.append(Alert("rollback_min", round(ago, 1), rules.rollback_min, f"rolled back {ago:.0f} min ago"))
    return out


def rollbacks(store: FleetStore, rules: AlertRules, now: float) -> dict[str, float]:
    """Each device's newest rollback inside the rule's window (empty when the rule is off)."""
    if rules.rollback_min is None:
        return {}
    out: dict[str, float] = {}
    for r in store.recent_results((ROLLED_BACK,), since=now - rules.rollback_min * 60.0):
        out[r["device_id"]] = max(out.get(r["device_id"], 0.0), r["timestamp"])
    return out


def evaluate(
    store: FleetStore, rules: AlertRules, now: float | None = None, everyone: bool = False
) -> dict[str, list[Alert]]:
    """Every device's alerts at ``now``; devices breaking no rule are left out unless ``everyone``."""
    now = time.time() if now is None else now
    if rules == AlertRules():
        return {}
    back = rollbacks(store, rules, now)
    found = {r.device_id: device_alerts(r, rules, back.get(r.device_id), now) for r in store.devices()}
    return {dev: alerts for dev, alerts in found.items() if alerts or everyone}


def alert_payload(device_id: str, alerts: list[Alert], now: float) -> str:
    """The retained JSON published for a device."""
    state = "alerting" if alerts else "ok"
    body = {"device_id": device_id, "state": state, "alerts": [asdict(a) for a in alerts], "timestamp": now}
    return json.dumps(body)


class AlertPublisher:
    """Turns successive evaluations into the messages to publish: a device's alerts when their rules change,
    and ``ok`` once when they clear. The first call publishes every device it is given (pass them all, see
    ``evaluate(everyone=True)``), so a retained alert that cleared while no monitor ran is replaced."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._shown: dict[str, tuple[str, ...]] | None = None

    def changes(self, current: dict[str, list[Alert]], now: float) -> list[tuple[str, str]]:
        """(topic, payload) for every device whose set of broken rules changed since the last call."""
        first, shown = self._shown is None, self._shown or {}
        out = []
        for dev in sorted(set(current) | set(shown)):
            rules = tuple(a.rule for a in current.get(dev, []))
            if first or rules != shown.get(dev, ()):
                out.append((alert_topic(self.prefix, dev), alert_payload(dev, current.get(dev, []), now)))
        self._shown = {dev: tuple(a.rule for a in alerts) for dev, alerts in current.items() if alerts}
        return out
