"""Alert rules: read from the monitor's config, evaluated over a SQLite store, turned into retained messages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edge.errors import InputError
from edge.telemetry.schema import Result, Telemetry, to_json
from fleet import SqliteStore
from fleet.alerts import AlertPublisher, AlertRules, alert_topic, evaluate, load_alert_rules

NOW = 100_000.0


def test_rules_come_from_the_alerts_table(tmp_path: Path) -> None:
    path = tmp_path / "monitor.toml"
    path.write_text("[alerts]\nlatency_p90_ms = 500\noffline_min = 5.0\n")
    assert load_alert_rules(path) == AlertRules(latency_p90_ms=500.0, offline_min=5.0)
    path.write_text("")
    assert load_alert_rules(path) == AlertRules()
    path.write_text("[alerts]\nlatency_p90 = 500\n")
    with pytest.raises(InputError) as info:
        load_alert_rules(path)
    assert str(info.value).startswith(f"{path}: unknown key alerts.latency_p90; expected one of ")
    path.write_text("[alerts]\ntemperature_c = 'hot'\n")
    with pytest.raises(InputError, match=r"alerts.temperature_c = 'hot'"):
        load_alert_rules(path)


def _report(store: SqliteStore, dev: str, seq: int, ts: float, p90: float, temp: float) -> None:
    body = Telemetry(
        device_id=dev, seq=seq, timestamp=ts, latency_p50_ms=p90 / 2, latency_p90_ms=p90, fps=5, temperature_c=temp
    )
    store.handle(f"edge-deploy/{dev}/telemetry", to_json(body), received=ts)


def test_each_rule_fires_on_its_own_device(tmp_path: Path) -> None:
    rules = AlertRules(latency_p90_ms=500, offline_min=5, temperature_c=80, rollback_min=60)
    with SqliteStore(tmp_path / "m.db") as store:
        _report(store, "fine", 1, NOW, 100, 50)
        _report(store, "slow", 1, NOW, 812, 50)
        _report(store, "hot", 1, NOW, 100, 85)
        _report(store, "gone", 1, NOW - 600, 100, 50)
        _report(store, "back", 1, NOW, 100, 50)
        for seq, ts in ((2, NOW - 7200), (3, NOW - 120)):  # an old rollback and a recent one
            done = Result(device_id="back", seq=seq, timestamp=ts, task="update.rolled_back", data={"error": "golden"})
            store.handle("edge-deploy/back/result", to_json(done), received=ts)
        found = {dev: [(a.rule, a.text) for a in alerts] for dev, alerts in evaluate(store, rules, NOW).items()}
        assert evaluate(store, AlertRules(), NOW) == {}
    assert found == {
        "slow": [("latency_p90_ms", "whole-frame p90 812 ms")],
        "hot": [("temperature_c", "85 °C")],
        "gone": [("offline_min", "offline 10 min")],
        "back": [("rollback_min", "rolled back 2 min ago")],
    }


def test_a_device_is_published_when_its_alerts_change_and_once_when_they_clear() -> None:
    from fleet.alerts import Alert

    hot = Alert("temperature_c", 85.0, 80.0, "85 °C")
    publisher = AlertPublisher("edge-deploy")
    first = publisher.changes({"pi-1": [hot], "pi-2": []}, NOW)  # at start every device: stale ones are replaced
    assert [t for t, _ in first] == [alert_topic("edge-deploy", "pi-1"), "edge-deploy-alerts/pi-2"]
    assert json.loads(first[1][1])["state"] == "ok"
    assert json.loads(first[0][1]) == {
        "device_id": "pi-1",
        "state": "alerting",
        "timestamp": NOW,
        "alerts": [{"rule": "temperature_c", "value": 85.0, "limit": 80.0, "text": "85 °C"}],
    }
    assert publisher.changes({"pi-1": [hot], "pi-2": []}, NOW + 1) == []
    cleared = publisher.changes({"pi-1": [], "pi-2": []}, NOW + 2)
    assert [(t, json.loads(p)["state"]) for t, p in cleared] == [("edge-deploy-alerts/pi-1", "ok")]
    assert publisher.changes({"pi-1": [], "pi-2": []}, NOW + 3) == []


def test_monitor_names_the_config_file_and_key(tmp_path: Path, capsys) -> None:
    from edge_deploy.cli import main

    config = tmp_path / "monitor.toml"
    config.write_text("[alerts]\noffline_min = -1\n")
    args = ["monitor", "--store", str(tmp_path / "m.db"), "--web", "127.0.0.1:0", "--config", str(config)]
    assert main([*args, "--duration", "0"]) == 3
    assert capsys.readouterr().err.strip() == f"Error: {config}: alerts.offline_min = -1.0; expected a number > 0"
