"""The fleet store on a real PostgreSQL (own cluster) and real mosquitto: same interface as SQLite, shared
ingest, at-least-once through faults (a SIGKILLed monitor, a PostgreSQL restart, a 20 s broker outage)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from edge.telemetry.link import BrokerConfig
from edge.telemetry.mqtt import TelemetryClient, TelemetryConfig
from edge.telemetry.schema import DeviceState, MessageKind, Result, Status, Telemetry, to_json
from fleet import Monitor, MonitorConfig, open_store
from fleet.records import DeviceRow, Running
from testsupport.broker import Broker
from testsupport.postgres import Postgres, wait_until

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
DEVICES = "testsupport.fleet_devices"


def fast(port: int) -> BrokerConfig:
    return BrokerConfig("127.0.0.1", port, reconnect_min_s=0.2, reconnect_max_s=1.0, keepalive_s=5)


def tele(device: str, seq: int, ts: float, **running: str) -> bytes:
    message = Telemetry(
        device_id=device, seq=seq, timestamp=ts, latency_p50_ms=10.0 + seq, latency_p90_ms=20.0 + seq, fps=25.0,
        temperature_c=50.0, **running,
    )  # fmt: skip
    return to_json(message).encode()


V1 = {"model": "embedder", "model_version": "0.1.0", "model_sha256": "aa" * 32, "bundle_id": "b1",
      "profile": "rpi4", "runtime": "onnxruntime", "precision": "int8"}  # fmt: skip
V2 = {**V1, "model_version": "0.2.0", "model_sha256": "bb" * 32, "bundle_id": "b2"}


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_both_stores_answer_the_query_api_alike(backend: str, tmp_path: Path, request) -> None:
    target = tmp_path / "fleet.db" if backend == "sqlite" else request.getfixturevalue("pg_url")
    with open_store(target) as store:
        store.handle("edge-deploy/pi-1/status", to_json(Status(device_id="pi-1", timestamp=90.0,
                                                                 state=DeviceState.ONLINE)), received=1000.0)  # fmt: skip
        assert store.handle("edge-deploy/pi-1/telemetry", tele("pi-1", 1, 100.0, **V1), received=1001.0) == "stored"
        assert store.handle("edge-deploy/pi-1/telemetry", tele("pi-1", 1, 100.0, **V1), received=1002.0) == "duplicate"
        store.handle("edge-deploy/pi-1/telemetry", tele("pi-1", 3, 300.0, **V2), received=1003.0)
        store.handle("edge-deploy/pi-1/telemetry", tele("pi-1", 2, 200.0, **V1), received=1004.0)
        error = Result(
            device_id="pi-2", seq=1, timestamp=150.0, task="face.error", data={"error": "cannot decode x.png"}
        )
        store.handle("edge-deploy/pi-2/result", to_json(error), received=1005.0)
        assert store.handle("edge-deploy/pi-2/result", b"{oops") == "rejected"
        assert (store.count(), store.seqs("pi-1"), store.duplicates, store.rejected) == (4, [1, 2, 3], 1, 1)
        assert store.devices() == [
            DeviceRow("pi-1", True, 13.0, 23.0, 25.0, 50.0, last_seen=1004.0, reports=3, dropped=0),
            DeviceRow("pi-2", None, None, None, None, None, last_seen=1005.0, reports=1, dropped=0,
                      last_error="face.error: cannot decode x.png"),
        ]  # fmt: skip
        assert store.running() == [Running("pi-1", *V2.values(), first_seen=300.0, last_seen=300.0)]
        assert store.running_history("pi-1") == [
            Running("pi-1", *V1.values(), first_seen=100.0, last_seen=200.0),
            Running("pi-1", *V2.values(), first_seen=300.0, last_seen=300.0),
        ]
        assert [r["seq"] for r in store.latest(MessageKind.TELEMETRY, "pi-1", limit=2)["pi-1"]] == [3, 2]
        assert store.latest(MessageKind.RESULT) == {"pi-2": [json.loads(to_json(error))]}
        assert [t["seq"] for t in store.telemetry(since=200.0)] == [2, 3]


def test_postgres_store_retries_across_a_server_restart(pg: Postgres, pg_url: str) -> None:
    from fleet import StoreUnavailable

    with open_store(pg_url) as store:
        assert store.handle("edge-deploy/pi-1/telemetry", tele("pi-1", 1, 1.0)) == "stored"
        pg.restart()
        with pytest.raises(StoreUnavailable) as info:  # the old connection died with the server
            store.handle("edge-deploy/pi-1/telemetry", tele("pi-1", 2, 2.0))
        assert str(info.value).startswith(f"fleet store {store.location}: cannot write now (")
        assert store.handle("edge-deploy/pi-1/telemetry", tele("pi-1", 2, 2.0)) == "stored"  # reconnected
        assert store.seqs("pi-1") == [1, 2]


def test_shared_group_splits_the_stream_between_monitors(tmp_path: Path, pg_url: str) -> None:
    n = 300
    with Broker(tmp_path / "broker") as broker:
        monitors = [
            Monitor(MonitorConfig(fast(broker.port), pg_url, client_id=f"m{i}", shared_group="ingest")) for i in (1, 2)
        ]
        try:
            assert all(m.start(timeout=10) for m in monitors)
            config = TelemetryConfig(device_id="pi-s", outbox_path=tmp_path / "o.db", broker=fast(broker.port))
            with TelemetryClient(config) as client:
                assert client.connect(timeout=10)
                for i in range(n):
                    client.report(Telemetry(latency_p50_ms=1.0, latency_p90_ms=2.0, fps=float(i)))
                assert client.wait_drained(30)
            wait_until(lambda: monitors[0].store.count("pi-s") == n, 30, f"{n} reports in the store")
            assert monitors[0].store.seqs("pi-s") == list(range(1, n + 1))
            split = [m.committed for m in monitors]
            print(f"\nshared group: monitor m1 committed {split[0]}, m2 {split[1]} of {n} (+ status messages)")
            assert min(split) > n // 4, f"the broker did not split the stream: {split}"
            assert sum(split) >= n  # plus the device's status messages
            assert monitors[0].store.duplicates == 0
        finally:
            for m in monitors:
                m.close()


def test_a_device_keeps_reports_until_a_subscriber_takes_them(tmp_path: Path) -> None:
    """mosquitto 2.0 forgets shared subscriptions on restart: the device must not count "nobody listened" as sent."""
    with Broker(tmp_path / "broker") as broker:
        config = TelemetryConfig(
            device_id="pi-r", outbox_path=tmp_path / "o.db", broker=fast(broker.port), require_subscriber=True
        )
        with TelemetryClient(config) as client:
            assert client.connect(timeout=10)
            for i in range(5):
                client.report(Telemetry(latency_p50_ms=1.0, latency_p90_ms=2.0, fps=float(i)))
            wait_until(lambda: "has no subscriber for report" in (client.health().last_error or ""), 10, "a refusal")
            assert client.health().pending == 5  # the broker took them, nobody subscribed: still in the outbox
            with Monitor(MonitorConfig(fast(broker.port), tmp_path / "m.db", client_id="m", shared_group="g")) as m:
                assert m.start(timeout=10)
                assert m.wait_for("pi-r", 5, timeout=20)
                assert client.wait_drained(10)
                assert m.store.seqs("pi-r") == [1, 2, 3, 4, 5]


class MonitorProcess:
    """``edge-deploy monitor --shared`` in its own process (so it can be SIGKILLed)."""

    def __init__(self, port: int, url: str, client_id: str, out: Path) -> None:
        self.args = [sys.executable, "-m", "edge_deploy", "monitor", "--broker", f"127.0.0.1:{port}",
                     "--store", url, "--shared", "fleet", "--client-id", client_id, "-o", str(out), "--json"]  # fmt: skip
        self.log = out / f"{client_id}.log"
        out.mkdir(parents=True, exist_ok=True)
        self.proc = self._start()

    def _start(self) -> subprocess.Popen:
        with open(self.log, "ab") as log:
            return subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)

    def kill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def restart(self) -> None:
        self.proc = self._start()

    def stop(self) -> int:
        """Ctrl-C: the monitor commits, acknowledges, exports and exits 0."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        return self.proc.wait(60)


def test_fifty_devices_lose_nothing_through_monitor_kill_postgres_restart_and_broker_outage(
    tmp_path: Path, pg: Postgres, pg_url: str
) -> None:
    """Every report of every device in the store exactly once, counted by (device_id, seq), no gaps."""
    devices, rate, sending_s = 50, 2.0, 45.0
    with Broker(tmp_path / "broker") as broker:
        monitors = [MonitorProcess(broker.port, pg_url, f"m{i}", tmp_path / "monitors") for i in (1, 2)]
        sims = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    DEVICES,
                    "--port",
                    str(broker.port),
                    "--dir",
                    str(tmp_path / f"dev{k}"),
                    "--devices",
                    str(devices // 2),
                    "--first",
                    str(k * devices // 2),
                    "--rate",
                    str(rate),
                    "--duration",
                    str(sending_s),
                    "--drain-timeout",
                    "90",
                ],
                stdout=subprocess.PIPE,
                text=True,
                cwd=ROOT,
            )  # fmt: skip
            for k in (0, 1)
        ]
        store = open_store(pg_url)
        try:
            t0 = time.monotonic()
            wait_until(lambda: store.count() > 100, 30, "the first reports in the store")
            monitors[0].kill()  # SIGKILL mid-stream: its unacknowledged messages stay with the broker
            time.sleep(3)
            monitors[0].restart()  # same client id: its session (and queued share) comes back
            time.sleep(4)
            pg.restart()  # both monitors lose their connections; batches are retried, nothing acked meanwhile
            time.sleep(4)
            before_outage = store.count()
            broker.stop()  # 20 s without a broker: devices keep reporting into their outboxes
            time.sleep(20)
            broker.start()
            results = [json.loads(p.communicate(timeout=150)[0].strip().splitlines()[-1]) for p in sims]
            last_seq = {d: n for r in results for d, n in r["last_seq"].items()}
            expected = sum(last_seq.values())
            assert all(v == 0 for r in results for v in (*r["left"].values(), *r["dropped"].values())), results
            wait_until(lambda: store.count() >= expected, 90, f"{expected} reports in the store")
            gaps = {d: n for d, n in last_seq.items() if store.seqs(d) != list(range(1, n + 1))}
            assert not gaps, f"devices with missing or extra seqs: {sorted(gaps)[:5]}"
            assert store.count() == expected and len(last_seq) == devices
            rows = store.devices()
            assert len(rows) == devices and all(r.reports == last_seq[r.device_id] for r in rows)
            assert {r.model_version for r in store.running()} == {"0.1.0"}
            print(
                f"\n{devices} devices, {expected} reports ({before_outage} stored before the broker outage) in "
                f"{time.monotonic() - t0:.0f} s; duplicates dropped {store.duplicates}, rejected {store.rejected}"
            )
        finally:
            store.close()
            for p in sims:
                if p.poll() is None:
                    p.kill()
                    p.wait(10)
            codes = [m.stop() for m in monitors]
        assert codes == [0, 0], [m.log.read_text()[-2000:] for m in monitors]


def fill_fleet(store, now: float) -> None:
    """Six devices over the last 10 minutes: two model versions, one offline, one with an error."""
    for i in range(6):
        dev = f"pi-{i}"
        running = V2 if i < 2 else V1
        state = DeviceState.OFFLINE if i == 5 else DeviceState.ONLINE
        store.handle(f"edge-deploy/{dev}/status", to_json(Status(device_id=dev, timestamp=now - 600, state=state)),
                     received=now - 600)  # fmt: skip
        for k in range(20):
            ts = now - 600 + k * 30
            p50 = 30.0 + 10 * i + 8 * ((k * (i + 1)) % 5)
            body = Telemetry(device_id=dev, seq=k + 1, timestamp=ts, latency_p50_ms=p50, latency_p90_ms=p50 * 1.4,
                             fps=20.0 - i, temperature_c=45.0 + i + k % 3, **running)  # fmt: skip
            store.handle(f"edge-deploy/{dev}/telemetry", to_json(body), received=ts + 0.2)
    error = Result(
        device_id="pi-3", seq=21, timestamp=now - 5, task="face.error", data={"error": "<b>x.png</b>: truncated"}
    )
    store.handle("edge-deploy/pi-3/result", to_json(error), received=now - 4)


def test_dashboard_in_headless_chromium(tmp_path: Path, pg_url: str) -> None:
    from testsupport.browser import Chromium, browser_missing

    why = browser_missing()
    if why:
        pytest.fail(why)
    from selenium.webdriver.common.by import By

    from fleet.dashboard import Dashboard, DashboardConfig

    with open_store(pg_url) as store, Dashboard(store, DashboardConfig(port=0)).start() as board:
        fill_fleet(store, time.time())
        browser = Chromium()
        try:
            browser.driver.get(board.url)
            d = browser.driver
            assert d.title == "edge-deploy fleet"
            cards = {k: d.find_element(By.ID, f"count-{k}").text.split() for k in ("devices", "online", "offline")}
            assert cards == {"devices": ["devices", "6"], "online": ["online", "5"], "offline": ["offline", "1"]}
            rows = d.find_elements(By.CSS_SELECTOR, "#fleet tbody tr")
            assert [r.get_attribute("data-device") for r in rows] == [f"pi-{i}" for i in range(6)]
            assert "embedder 0.2.0 rpi4 onnxruntime int8" in rows[0].text and "embedder 0.1.0" in rows[2].text
            models = d.find_element(By.ID, "models").text.splitlines()
            assert models == [
                "embedder 0.1.0 (int8, onnxruntime): 4 device(s)",
                "embedder 0.2.0 (int8, onnxruntime): 2 device(s)",
            ]
            error_cell = rows[3].find_elements(By.TAG_NAME, "td")[11]
            assert error_cell.text == "face.error: <b>x.png</b>: truncated"  # shown as text, never as markup
            scripts = d.find_elements(By.TAG_NAME, "script")  # only the live update, never inline code
            assert [(x.get_attribute("src"), x.get_attribute("innerHTML")) for x in scripts] == [
                (f"{board.url}app.js", "")
            ]
            browser.driver.set_window_size(1400, 700)
            assert d.save_screenshot(str(tmp_path / "fleet-dashboard.png"))
        finally:
            browser.close()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_both_stores_find_results_by_task_for_rollouts(backend: str, tmp_path: Path, request) -> None:
    """Issue 16: `fleet rollout` reads announcements and update outcomes through FleetStore.results."""
    from fleet.rollout import group_members

    target = tmp_path / "fleet.db" if backend == "sqlite" else request.getfixturevalue("pg_url")
    reports = [
        ("pi-1", "device.announce", {"tags": ["beta"]}),
        ("pi-2", "device.announce", {"tags": ["beta", "prod"]}),
        ("pi-1", "update.accepted", {"nonce": "n1", "to": "b2"}),
        ("pi-2", "face.error", {"error": "a file named update.accepted"}),  # the text matches, the task does not
        ("pi-2", "update.rolled_back", {"nonce": "n2", "reason": "golden"}),
        ("pi-2", "device.announce", {"tags": ["prod"]}),  # left beta
    ]
    with open_store(target) as store:
        for seq, (device, task, data) in enumerate(reports, 1):
            body = to_json(Result(device_id=device, seq=seq, timestamp=100.0 + seq, task=task, data=data))
            assert store.handle(f"edge-deploy/{device}/result", body, received=1000.0 + seq) == "stored"
        found = store.results(("update.accepted", "update.rolled_back"))
        assert [(r["device_id"], r["task"], r["data"]["nonce"]) for r in found] == [
            ("pi-1", "update.accepted", "n1"),
            ("pi-2", "update.rolled_back", "n2"),
        ]
        assert [r["seq"] for r in store.results(("device.announce",), device_id="pi-2")] == [2, 6]
        assert group_members(store, "beta") == ["pi-1"] and group_members(store, "prod") == ["pi-2"]
        assert store.results(()) == []


def _ignore_sigint() -> None:  # what a non-interactive shell does to a command it starts with `&`
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_monitor_started_in_the_background_stops_cleanly_on_sigterm_and_sigint(sig, tmp_path: Path) -> None:
    """A monitor that inherited SIGINT as ignored (a background job) still ends on Ctrl-C, and on SIGTERM: it
    commits, exports and exits 0 (before the fix it ignored SIGINT and had to be SIGKILLed)."""
    with Broker(tmp_path / "broker") as broker:
        out = tmp_path / "out"
        args = [sys.executable, "-m", "edge_deploy", "monitor", "--broker", f"127.0.0.1:{broker.port}",
                "--store", str(tmp_path / "fleet.db"), "-o", str(out), "--json"]  # fmt: skip
        pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
        proc = subprocess.Popen(args, cwd=ROOT, preexec_fn=_ignore_sigint, **pipes)  # noqa: PLW1509
        try:
            config = TelemetryConfig(
                device_id="pi-s", outbox_path=tmp_path / "o.db", broker=fast(broker.port), require_subscriber=True
            )  # kept in the outbox until the monitor has subscribed and takes it
            with TelemetryClient(config) as client:
                assert client.connect(timeout=10)
                client.report(Telemetry(latency_p50_ms=1.0, latency_p90_ms=2.0, fps=3.0))
                assert client.wait_drained(30)
            with open_store(tmp_path / "fleet.db") as store:  # the broker took it; now the monitor has it
                wait_until(lambda: store.count("pi-s") == 1, 30, "the report in the monitor's store")
            proc.send_signal(sig)
            stdout, stderr = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    assert proc.returncode == 0, stderr.decode()[-2000:]
    assert (out / "telemetry.csv").is_file(), stdout.decode()[-2000:]
    assert "pi-s" in (out / "telemetry.csv").read_text()
