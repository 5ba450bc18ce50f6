"""The fleet package without services: config checks, the optional PostgreSQL dependency, the dashboard page
drawn from a SQLite store, what a models folder says it runs, and the monitor command's errors."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from edge.errors import MissingDependencyError, TelemetryError
from edge.face.models import FaceModel, describe, read_models_folder, write_models_file
from edge.telemetry.link import BrokerConfig
from edge.telemetry.schema import RUNNING_FIELDS, DeviceState, Result, Status, Telemetry, to_json
from edge_deploy.cli import main
from fleet import MonitorConfig, SqliteStore, open_store
from fleet.dashboard_page import fleet_data, render_fleet
from fleet.plotsvg import plot
from fleet.records import decode
from fleet.store import plan_batch

BROKER = BrokerConfig("127.0.0.1", 1883)


def test_monitor_config_topics_and_checks(tmp_path: Path) -> None:
    assert MonitorConfig(BROKER, tmp_path / "m.db").topic == "edge-deploy/#"
    assert MonitorConfig(BROKER, tmp_path / "m.db", prefix="f/a", shared_group="ingest").topic == "$share/ingest/f/a/#"
    with pytest.raises(TelemetryError) as info:
        MonitorConfig(BROKER, tmp_path / "m.db", shared_group="a/b")
    assert str(info.value) == "shared group = 'a/b'; expected 1-64 letters, digits, '_', '.', ':' or '-'"
    with pytest.raises(TelemetryError) as info:
        MonitorConfig(BROKER, tmp_path / "m.db", batch_max=0)
    assert str(info.value) == "monitor batch_max = 0; expected an integer in 1..65535"
    with pytest.raises(TelemetryError) as info:
        MonitorConfig(BROKER, tmp_path / "m.db", flush_s=float("nan"))
    assert str(info.value) == "monitor flush_s = nan; expected a number in (0, 10]"
    with pytest.raises(TelemetryError) as info:
        MonitorConfig(BROKER, tmp_path / "m.db", max_skew_s=float("inf"))
    assert str(info.value) == "monitor max_skew_s = inf; expected a number in (0, 86400]"


def test_postgres_store_names_the_extra_when_psycopg_is_missing(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)  # import psycopg -> ImportError
    with pytest.raises(MissingDependencyError) as info:
        open_store("postgresql://edge@127.0.0.1:1/fleet")
    assert str(info.value).startswith("the PostgreSQL fleet store needs the Python module 'psycopg' (")
    assert str(info.value).endswith("install it with: pip install 'edge-deploy[fleet]'")


def test_a_batch_keeps_first_copies_and_the_newest_error() -> None:
    def inc(dev: str, message, retained: bool = False):
        return decode("edge-deploy", f"edge-deploy/{dev}/{type(message).__name__.lower()}", to_json(message), 1000.0,
                      retained)  # fmt: skip

    t = Telemetry(device_id="b", seq=1, timestamp=5.0, latency_p50_ms=1, latency_p90_ms=2, fps=3)
    err1 = Result(device_id="a", seq=2, timestamp=7.0, task="face.error", data={"error": "one"})
    err2 = Result(device_id="a", seq=3, timestamp=9.0, task="text.error", data={"error": "two"})
    ok = Result(device_id="a", seq=4, timestamp=10.0, task="face.identify", data={})
    st = Status(device_id="c", timestamp=3.0, state=DeviceState.ONLINE)
    plan = plan_batch([inc("b", t), inc("b", t), inc("a", err2), inc("a", err1), inc("a", ok), inc("c", st, True)])
    assert [(r.device_id, r.message.seq) for r in plan.reports] == [("b", 1), ("a", 3), ("a", 2), ("a", 4)]
    assert plan.seen == [("a", 1000.0), ("b", 1000.0), ("c", 3.0)]  # a replayed retained status: its own time
    assert plan.errors == [("a", 9.0, "text.error: two")]
    assert [s.device_id for s in plan.statuses] == ["c"]


def test_dashboard_page_from_a_sqlite_store(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "m.db") as store:
        store.handle("edge-deploy/pi-1/status", to_json(Status(device_id="pi-1", timestamp=1.0,
                                                                 state=DeviceState.OFFLINE)), received=100.0)  # fmt: skip
        for k in range(3):
            body = Telemetry(device_id="pi-1", seq=k + 1, timestamp=90.0 + k, latency_p50_ms=10.0 + k,
                             latency_p90_ms=20.0, fps=5.0, model="m<x>", model_sha256="ab" * 32)  # fmt: skip
            store.handle("edge-deploy/pi-1/telemetry", to_json(body), received=100.0 + k)
        assert store.handle("edge-deploy/pi-1/telemetry", b"{oops") == "rejected"
        data = fleet_data(store, window_s=60.0, now=120.0)
    assert data["counts"] == {"devices": 1, "online": 0, "offline": 1, "unknown": 0, "alerting": 0, "rejected": 1,
                              "last_rejection": store.last_rejection}  # fmt: skip
    assert data["fleet"]["p90_median"] == [(90.5, 20.0), (91.5, 20.0), (92.5, 20.0)]  # 1 s buckets of 60 s
    assert data["models"] == {"m<x>  (, )": 1}
    page = render_fleet(data)
    assert "m&lt;x&gt;" in page and "m<x>" not in page  # a device's strings are escaped
    assert "<td class=offline>offline</td>" in page and "<script>" not in page  # only /app.js, never inline
    assert '<div class="card" id="count-rejected">rejected<b>1</b></div>' in page
    assert "last rejected: topic edge-deploy/pi-1/telemetry: " in page
    assert json.dumps(data)  # /fleet.json serves the same data


def test_plots_share_one_scale_with_real_axes_and_go_log_for_an_outlier() -> None:
    flat = plot([("a", "#111", [(0.0, 10.0), (60.0, 20.0)]), ("b", "#222", [(0.0, 30.0)])], "t", 0.0, 60.0)
    assert flat.count("class=xtick") == 5 and "log scale" not in flat
    assert [t.split(">")[1].split("<")[0] for t in flat.split("class=ytick")[1:]] == [
        "0",
        "10",
        "20",
        "30",
    ]  # top = 30, the max
    outlier = plot([("a", "#111", [(float(t), 10.0 + t % 3) for t in range(20)] + [(20.0, 5000.0)])], "t", 0.0, 20.0)
    assert "log scale" in outlier
    assert [t.split(">")[1].split("<")[0] for t in outlier.split("class=ytick")[1:]] == ["10", "100", "1000", "10000"]
    assert "no data" in plot([("a", "#111", [])], "t", 0.0, 1.0)


def test_a_models_folder_says_what_runs(tmp_path: Path) -> None:
    model = tmp_path / "embedder.onnx"
    model.write_bytes(b"\x08\x07" + b"0" * 30)
    write_models_file(tmp_path, [describe(model, FaceModel.EMBEDDER.role, "onnx", "int8", {})], "rpi4", "0.1.0")
    running = read_models_folder(tmp_path).running()
    assert tuple(running) == RUNNING_FIELDS
    assert {k: running[k] for k in ("model", "model_version", "profile", "runtime", "precision")} == {
        "model": "embedder", "model_version": "0.1.0", "profile": "rpi4", "runtime": "onnxruntime", "precision": "int8"
    }  # fmt: skip
    assert len(running["bundle_id"]) == 16 and len(running["model_sha256"]) == 64


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["--broker", "127.0.0.1:1", "--shared", "g"],
         "Error: monitor --shared g needs --client-id ID: a stable id per instance, so the broker keeps each "
         "instance's session (and its unacknowledged messages) across restarts"),
        (["--web", "127.0.0.1"], "Error: --web '127.0.0.1': port '' is not a number; expected HOST:PORT"),
        ([], "Error: monitor needs --broker HOST[:PORT], e.g. --broker 127.0.0.1:1883 (or only --web to serve the "
             "dashboard of a store other monitors write)"),
    ],
)  # fmt: skip
def test_monitor_command_errors(argv: list[str], error: str, tmp_path: Path, capsys) -> None:
    assert main(["monitor", "-o", str(tmp_path), *argv]) != 0
    assert capsys.readouterr().err.strip() == error
