"""The dashboard in real headless Chromium over 1,000 simulated devices written straight into a real store:
the table sorts and filters, counts and alerts show and update live (no reload), a device page draws axes and
its history. Once on PostgreSQL. Alerts published retained through real mosquitto by ``run_monitor``.

``python -m tests.integration.test_dashboard_browser docs/img`` writes the screenshots docs/fleet.md shows.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import pytest

from edge.telemetry.link import BrokerConfig
from edge.telemetry.schema import BenchReport, DeviceState, Result, Status, Telemetry, to_json
from fleet import MonitorConfig, SqliteStore, open_store, run_monitor
from fleet.alerts import AlertRules
from fleet.dashboard import Dashboard, DashboardConfig
from fleet.store import FleetStore
from tests.unit.fleet_flood import flood
from testsupport.broker import Broker
from testsupport.postgres import Postgres, wait_until

pytestmark = pytest.mark.integration
RULES = AlertRules(latency_p90_ms=500, offline_min=10, temperature_c=80, rollback_min=60)


def fill(store: FleetStore, devices: int, now: float) -> None:
    """``devices`` simulated devices plus ``cam-7``, which has a history: an update, a rollback, errors, faces."""
    flood(store, devices, 30, now, step_s=20.0)
    send = store.handle
    for k in range(30):  # cam-7: model a, then b, then back to a; one slow window
        ts = now - (29 - k) * 20.0
        body = Telemetry(
            device_id="cam-7",
            seq=k + 1,
            timestamp=ts,
            latency_p50_ms=180.0 + k % 4,
            latency_p90_ms=4200.0 if k == 27 else 230.0 + 3 * (k % 5),
            fps=4.5 + (k % 3) / 4,
            temperature_c=61.0 + k / 3,
            model="face-embedder",
            model_sha256=("ab" if k < 12 or k > 20 else "cd") * 32,
            model_version="0.9.1" if k < 12 or k > 20 else "0.9.2",
            profile="rpi4",
            runtime="onnxruntime",
            precision="int8",
        )
        send("edge-deploy/cam-7/telemetry", to_json(body), received=ts)
    events = [
        ("update.accepted", now - 360, {"bundle_id": "b-092"}),
        ("update.rolled_back", now - 180, {"error": "golden check failed: cosine 0.91 < 0.99"}),
        ("face.error", now - 100, {"error": "camera timeout"}),
    ]
    for i, (task, ts, data) in enumerate(events):
        send(
            "edge-deploy/cam-7/result",
            to_json(Result(device_id="cam-7", seq=100 + i, timestamp=ts, task=task, data=data)),
            received=ts,
        )
    for i, faces in enumerate(([("ann", 0.312), (None, 0.71)], [("bob", 0.281)])):
        data = {"faces": [{"name": n, "distance": d, "box": [1, 2, 3, 4]} for n, d in faces], "latency_ms": 190.0}
        send(
            "edge-deploy/cam-7/result",
            to_json(Result(device_id="cam-7", seq=110 + i, timestamp=now - 30 + i, task="face.identify", data=data)),
            received=now,
        )
    bench = BenchReport(
        device_id="cam-7",
        seq=120,
        timestamp=now - 50,
        model="face-embedder",
        backend="onnxruntime",
        runs=100,
        first_ms=140.0,
        p50_ms=58.2,
        p90_ms=61.0,
    )
    send("edge-deploy/cam-7/bench", to_json(bench), received=now)
    reply = Result(
        device_id="cam-7",
        seq=121,
        timestamp=now - 40,
        task="text.reply",
        data={"id": "r1", "decode_tokens_per_s": 12.5, "time_to_first_token_s": 0.42},
    )
    send("edge-deploy/cam-7/result", to_json(reply), received=now)
    status = Status(device_id="cam-7", timestamp=now, state=DeviceState.ONLINE)
    send("edge-deploy/cam-7/status", to_json(status), received=now)
    hot = Telemetry(
        device_id="fake-00042", seq=31, timestamp=now, latency_p50_ms=20, latency_p90_ms=30, fps=20, temperature_c=86.0
    )
    send("edge-deploy/fake-00042/telemetry", to_json(hot), received=now)
    send("edge-deploy/fake-00042/telemetry", b"{not json")  # one rejected message


@pytest.fixture(scope="module")
def browser():
    from testsupport.browser import Chromium, browser_missing

    reason = browser_missing()
    assert reason is None, reason
    chromium = Chromium()
    yield chromium
    chromium.close()


def _texts(browser, css: str) -> list[str]:
    """The text of every element matching ``css``, read in one step (the live update swaps the elements)."""
    script = "return [...document.querySelectorAll(arguments[0])].map(e => (e.innerText ?? e.textContent).trim())"
    return browser.driver.execute_script(script, css)


def _text(browser, css: str) -> str:
    return " ".join(" ".join(_texts(browser, css)).split())


def _click(browser, css: str) -> None:
    """Click a link or button and wait for the page it leads to."""
    driver, before = browser.driver, browser.driver.current_url
    driver.execute_script("document.querySelector(arguments[0]).click()", css)
    wait_until(lambda: driver.current_url != before, 10, f"the page {css} leads to")
    wait_until(lambda: driver.execute_script("return document.readyState") == "complete", 10, "the page")


def check_pages(browser, url: str, store: FleetStore, shots: Path | None = None) -> None:
    """Drive the fleet page and cam-7's page as an operator would, asserting what they show."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    driver = browser.driver
    driver.get(url)
    assert _texts(browser, "#count-alerting b") == ["2"]  # fake-00042 too hot, cam-7 rolled back
    assert _texts(browser, "#count-rejected b") == ["1"]
    assert "fake-00042: 86 °C" in _text(browser, "#alerts") and "cam-7: rolled back 3 min ago" in _text(
        browser, "#alerts"
    )
    plots = _texts(browser, "svg.plot")
    assert len(plots) == 2 and "log scale" in plots[0]  # cam-7's 4.2 s outlier
    _click(browser, 'th[data-key="p90"] a')  # ascending
    _click(browser, 'th[data-key="p90"] a')  # descending
    assert _texts(browser, "#fleet tbody tr td:first-child")[0] == "cam-7"
    p90 = [float(t) for t in _texts(browser, "#fleet tbody tr td:nth-child(8)")]
    assert p90 == sorted(p90, reverse=True)
    if shots:
        driver.get(url + "?sort=alerts&order=desc")
        driver.save_screenshot(str(shots / "dashboard-fleet.png"))
    driver.get(url)
    driver.find_element(By.ID, "q").send_keys("m-2")  # the form is outside the live part: never swapped
    _click(browser, "#filter button")
    assert set(_texts(browser, "#fleet tbody tr td:nth-child(4)")) == {"m-2"}
    driver.find_element(By.ID, "q").clear()
    Select(driver.find_element(By.ID, "state")).select_by_visible_text("alerting")
    _click(browser, "#filter button")
    assert sorted(_texts(browser, "#fleet tbody tr td:first-child")) == ["cam-7", "fake-00042"]
    driver.execute_script("window.notReloaded = true")  # live update: a new alert shows without a reload
    late = Telemetry(
        device_id="fake-00007", seq=31, timestamp=time.time(), latency_p50_ms=700, latency_p90_ms=950, fps=1
    )
    store.handle("edge-deploy/fake-00007/telemetry", to_json(late))
    wait_until(lambda: "fake-00007" in _text(browser, "#alerts"), 30, "the new alert on the page")
    assert driver.execute_script("return window.notReloaded") is True
    assert "whole-frame p90 950 ms" in _text(browser, "#fleet")

    driver.get(url + "device/cam-7?window=1h")
    assert len(_texts(browser, "svg.plot")) == 3
    assert len(_texts(browser, "svg.plot .xtick")) == 15 and len(_texts(browser, "svg.plot .ytick")) >= 9
    assert _texts(browser, "#models tbody td:nth-child(4)") == ["0.9.1", "0.9.2"]
    assert _texts(browser, "#models tbody td:last-child") == ["rpi4 onnxruntime int8"] * 2
    assert "update.rolled_back golden check failed" in _text(browser, "#updates")
    assert "face.error camera timeout" in _text(browser, "#errors")
    assert "ann 0.312, unknown 0.710" in _text(browser, "#recognitions") and "bob 0.281" in _text(
        browser, "#recognitions"
    )
    assert "58.20" in _text(browser, "#bench") and "80.00" in _text(browser, "#tokens")  # 1000 / 12.5 tok/s
    assert "rolled back" in _text(browser, "#alerts")
    for word in ("whole frame", "one inference", "one token"):
        assert word in _text(browser, "#live")
    if shots:
        driver.set_window_size(1400, 1500)
        driver.save_screenshot(str(shots / "dashboard-device.png"))
        driver.set_window_size(1400, 1100)
    driver.get(url + "device/nobody")
    assert "no device 'nobody'" in driver.page_source


def test_1000_devices_in_chromium(browser, tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "m.db") as store:
        fill(store, 1000, time.time())
        with Dashboard(store, DashboardConfig(port=0, refresh_s=1, rules=RULES)).start() as board:
            check_pages(browser, board.url, store, tmp_path)
    assert (tmp_path / "dashboard-fleet.png").stat().st_size > 10_000


def test_the_pages_on_postgresql(browser, pg: Postgres, pg_url: str) -> None:
    with open_store(pg_url) as store:
        fill(store, 60, time.time())
        with Dashboard(store, DashboardConfig(port=0, refresh_s=1, rules=RULES)).start() as board:
            check_pages(browser, board.url, store)


def test_the_monitor_publishes_alerts_retained(tmp_path: Path) -> None:
    import paho.mqtt.client as mqtt

    db = tmp_path / "m.db"
    with SqliteStore(db) as store:
        fill(store, 3, time.time())
    got: dict[str, dict] = {}
    with Broker(tmp_path / "broker") as broker:
        config = MonitorConfig(BrokerConfig("127.0.0.1", broker.port), db)
        monitor = threading.Thread(
            target=run_monitor,
            args=(config, 4.0, tmp_path / "out"),
            kwargs={"print_fn": lambda _: None, "refresh_s": 0.5, "rules": RULES},
        )
        monitor.start()
        monitor.join(60)
        assert not monitor.is_alive()
        client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2)  # a Home Assistant's view: subscribe afterwards
        client.on_message = lambda c, u, m: got.update({m.topic: json.loads(m.payload)})
        client.connect("127.0.0.1", broker.port)
        client.subscribe("edge-deploy-alerts/#", qos=1)
        client.loop_start()
        try:
            wait_until(lambda: len(got) == 5, 10, "the retained alerts")  # every device's state at start
        finally:
            client.loop_stop()
            client.disconnect()
    assert got["edge-deploy-alerts/fake-00042"]["state"] == "alerting"
    assert [a["rule"] for a in got["edge-deploy-alerts/fake-00042"]["alerts"]] == ["temperature_c"]
    assert [a["rule"] for a in got["edge-deploy-alerts/cam-7"]["alerts"]] == ["rollback_min"]
    assert {got[f"edge-deploy-alerts/fake-0000{i}"]["state"] for i in range(3)} == {"ok"}
    with SqliteStore(db) as store:
        assert store.rejected == 1  # the monitor did not read its own alerts back as device reports


if __name__ == "__main__":  # write the docs' screenshots
    from testsupport.browser import Chromium

    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    import tempfile

    with tempfile.TemporaryDirectory() as tmp, SqliteStore(Path(tmp) / "m.db") as fleet:
        fill(fleet, 1000, time.time())
        chromium = Chromium()
        try:
            with Dashboard(fleet, DashboardConfig(port=0, refresh_s=1, rules=RULES)).start() as board:
                check_pages(chromium, board.url, fleet, out)
        finally:
            chromium.close()
