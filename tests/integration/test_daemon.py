"""The daemon (`edge-deploy serve`) as a real subprocess, with real face models and a real mosquitto.

One scenario runs once per module (models are converted once, ~35 s) and the tests below check its parts:
SIGKILL mid-run and restart lose nothing and repeat nothing; malformed, wrongly signed and replayed
commands are rejected (logged and reported) while frames keep flowing; a signed bench command produces a
BenchReport; SIGTERM exits 0 with the outbox flushed. A second scenario reads a video written with
cv2.VideoWriter from real photos.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import cv2
import numpy as np
import paho.mqtt.publish as mqtt_publish
import pytest

from edge.daemon.commands import sign_command, write_secret
from edge.imageio import save_image
from edge.telemetry.link import BrokerConfig
from edge_deploy import serve_command
from fleet import Monitor, MonitorConfig
from testsupport.broker import Broker

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
DEVICE = "pi-test"
PREFIX = "edge-deploy"


# --- helpers -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def face_models(face_fp32_models: Path) -> Path:
    """The face models, exported once (without convert_face's dlib reference checks, to save a minute)."""
    return face_fp32_models


@pytest.fixture(scope="module")
def photos() -> dict[str, np.ndarray]:
    """Real photos: astronaut, t1 (6 people), Tom Hanks, each original plus 2 seeded augmentations."""
    from converters.face.facedata import make_eval_images

    return {img.name.replace("/", "_"): img.rgb for img in make_eval_images(seed=3, variants=2)}


@pytest.fixture(scope="module")
def people(tmp_path_factory: pytest.TempPathFactory, photos: dict[str, np.ndarray]) -> Path:
    """An enrolment folder: one sub-folder per person with their original photo."""
    root = tmp_path_factory.mktemp("people")
    for person, key in (("eileen_collins", "astronaut_original"), ("tom_hanks", "tom_hanks_original")):
        (root / person).mkdir()
        save_image(root / person / "1.png", photos[key])
    return root


def write_config(path: Path, models: Path, source: str, extra: str = "") -> Path:
    path.write_text(
        f'device_id = "{DEVICE}"\nstate_dir = "state"\n'
        f'[face]\nmodels = "{models}"\nenroll_dir = "../people"\n'
        f"[source]\n{source}\n{extra}",
        encoding="utf-8",
    )
    return path


class DaemonProcess:
    """`python -m edge_deploy.serve_command serve --config CFG` with its stderr in a log file."""

    def __init__(self, config: Path, log: Path, *extra: str) -> None:
        self.log_path = log
        with open(log, "ab") as fh:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "edge_deploy.serve_command", "serve", "--config", str(config), *extra],
                cwd=REPO,
                stdout=subprocess.PIPE,
                stderr=fh,
            )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_log(self, text: str, timeout: float, count: int = 1) -> None:
        deadline = time.monotonic() + timeout
        while self.log().count(text) < count:
            assert self.proc.poll() is None, f"daemon exited with {self.proc.returncode}:\n{self.log()}"
            assert time.monotonic() < deadline, f"no {text!r} in the daemon log after {timeout} s:\n{self.log()}"
            time.sleep(0.1)

    def stop(self, sig: signal.Signals, timeout: float = 60) -> int:
        self.proc.send_signal(sig)
        return self.proc.wait(timeout)


def stored(db: Path, kind: str = "result") -> list[dict]:
    """Messages of ``kind`` the monitor stored for DEVICE (read-only, beside the monitor's connection)."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10) as con:
        rows = con.execute(
            "SELECT payload FROM messages WHERE device_id = ? AND kind = ? ORDER BY seq", (DEVICE, kind)
        ).fetchall()
    return [json.loads(r[0]) for r in rows]


def by_task(messages: list[dict], task: str) -> list[dict]:
    return [m for m in messages if m["task"] == task]


def wait_until(check, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(0.1)


def outbox_rows(path: Path) -> int:
    with sqlite3.connect(path, timeout=10) as con:
        return int(con.execute("SELECT COUNT(*) FROM outbox").fetchone()[0])


# --- scenario 1: watched folder, SIGKILL + restart, commands, SIGTERM ----------------------------------------

FIRST_BATCH = 9  # every photo of `photos`
LATE = ("late_astronaut.png", "late_hanks.png")  # dropped in after the commands: frames keep flowing


@pytest.fixture(scope="module")
def scenario(tmp_path_factory, face_models: Path, photos: dict[str, np.ndarray], people: Path) -> dict:
    root = tmp_path_factory.mktemp("serve")
    (root / "people").symlink_to(people)
    incoming = root / "work" / "incoming"
    incoming.mkdir(parents=True)
    for name, rgb in photos.items():
        save_image(incoming / f"{name}.png", rgb)
    assert len(list(incoming.iterdir())) == FIRST_BATCH
    secret_file = write_secret(root / "command.key")
    secret = secret_file.read_bytes().rstrip(b"\n")
    out: dict = {"root": root}
    with Broker(root / "broker") as broker:
        config = write_config(
            root / "work" / "edge-deploy.toml",
            face_models,
            'path = "incoming"\nsettle_s = 0.0\npoll_interval_s = 0.2\nmax_fps = 2.0',
            f'[broker]\nhost = "127.0.0.1"\nport = {broker.port}\n'
            f'[telemetry]\ninterval_s = 1.0\n[commands]\nsecret_file = "{secret_file}"\nbench_runs = 5\n',
        )
        monitor = Monitor(MonitorConfig(BrokerConfig("127.0.0.1", broker.port), root / "monitor.db"))
        assert monitor.start(timeout=10)
        db = monitor.store.path
        try:
            # run 1: SIGKILL once a few photos are reported
            first = DaemonProcess(config, root / "daemon1.log")
            wait_until(lambda: len(by_task(stored(db), "face.identify")) >= 3, 120, "3 results before the kill")
            first.proc.send_signal(signal.SIGKILL)
            first.proc.wait(10)
            out["seen_at_kill"] = len(by_task(stored(db), "face.identify"))
            # run 2: the rest, then commands, then late photos, then SIGTERM
            second = DaemonProcess(config, root / "daemon2.log")
            out["second"] = second
            second.wait_log("listening for commands on", 60)
            topic = f"{PREFIX}/{DEVICE}/cmd"
            good = sign_command(secret, DEVICE, "bench", {"runs": 5})
            payloads = [
                b"{not json",
                sign_command(b"a-wrong-secret-of-32-bytes......", DEVICE, "bench", {"runs": 5}).encode(),
                good.encode(),
                good.encode(),  # replay
                sign_command(secret, "another-device", "reload").encode(),
            ]
            for payload in payloads:
                mqtt_publish.single(topic, payload, qos=1, hostname="127.0.0.1", port=broker.port)
            mqtt_publish.single(
                f"{PREFIX}/{DEVICE}/text/request",
                json.dumps({"id": "q1", "prompt": "What is the capital of France?"}),
                qos=1,
                hostname="127.0.0.1",
                port=broker.port,
            )
            out["good_nonce"] = json.loads(good)["nonce"]
            wait_until(lambda: len(by_task(stored(db), "command.rejected")) >= 4, 120, "4 rejections")
            wait_until(lambda: len(stored(db, "bench")) >= 1, 120, "the bench report")
            out["command_cli_exit"] = serve_command.main(["command", "--config", str(config), "reload"])
            wait_until(lambda: len(by_task(stored(db), "command.done")) >= 2, 120, "the reload's answer")
            assert serve_command.main(["command", "--config", str(config), "enroll"]) == 0
            wait_until(lambda: len(by_task(stored(db), "command.done")) >= 3, 120, "the enrol's answer")
            out["last_seq_before_late"] = max(m["seq"] for m in stored(db))
            for name, key in zip(LATE, ("astronaut_original", "tom_hanks_original"), strict=True):
                save_image(incoming / f".{name}", photos[key])
                os.replace(incoming / f".{name}", incoming / name)  # atomic arrival, as docs/daemon.md says
            total = FIRST_BATCH + len(LATE)
            wait_until(lambda: len(by_task(stored(db), "face.identify")) >= total, 180, f"{total} results")
            out["exit_code"] = second.stop(signal.SIGTERM)
            out["stdout"] = second.proc.stdout.read().decode()
            time.sleep(1.0)  # let the last telemetry reach the monitor
            out["results"] = stored(db)
            out["bench"] = stored(db, "bench")
            out["telemetry"] = stored(db, "telemetry")
            out["duplicates"] = monitor.store.duplicates
            out["running"] = monitor.store.running()
            out["outbox_left"] = outbox_rows(root / "work" / "state" / "outbox.sqlite")
            out["incoming"] = sorted(p.name for p in incoming.iterdir())
        finally:
            for name in ("first", "second"):
                proc = locals().get(name)
                if proc is not None and proc.proc.poll() is None:
                    proc.proc.kill()
            monitor.close()
    return out


def test_sigkill_mid_run_then_restart_loses_nothing_and_repeats_nothing(scenario: dict) -> None:
    faces = by_task(scenario["results"], "face.identify")
    frame_ids = [m["data"]["frame_id"] for m in faces]
    assert 3 <= scenario["seen_at_kill"] < FIRST_BATCH, "the kill did not happen mid-run"
    assert sorted(frame_ids) == scenario["incoming"]  # exactly one result per photo: none lost, none twice
    seqs = [m["seq"] for m in scenario["results"]]
    assert len(seqs) == len(set(seqs))
    print(
        f"\nSIGKILL after {scenario['seen_at_kill']} of {FIRST_BATCH} results; after restart {len(faces)} "
        f"results for {len(scenario['incoming'])} photos; duplicates dropped by the monitor: {scenario['duplicates']}"
    )


def test_recognition_names_enrolled_people_and_reports_strangers_unknown(scenario: dict) -> None:
    faces = {m["data"]["frame_id"]: m["data"]["faces"] for m in by_task(scenario["results"], "face.identify")}
    for frame in ("astronaut_original.png", "late_astronaut.png"):
        assert [f["name"] for f in faces[frame]] == ["eileen_collins"], faces[frame]
    for frame in ("tom_hanks_original.png", "late_hanks.png"):
        assert [f["name"] for f in faces[frame]] == ["tom_hanks"], faces[frame]
    assert len(faces["t1_original.png"]) == 6
    assert all(f["name"] is None for f in faces["t1_original.png"])  # six strangers: unknown
    for f in faces["astronaut_original.png"] + faces["t1_original.png"]:
        assert set(f) >= {"box", "score", "name", "distance"}
    print("\naugmented variants:", {k: [(f["name"], f["distance"]) for f in v] for k, v in faces.items() if "aug" in k})


def test_malformed_wrongly_signed_replayed_and_misaddressed_commands_are_rejected(scenario: dict) -> None:
    rejected = [m["data"]["reason"] for m in by_task(scenario["results"], "command.rejected")]
    assert len(rejected) == 4
    assert rejected[0].startswith("malformed command: not valid JSON (")
    assert rejected[1] == "bad signature: HMAC-SHA256 over the command does not match the shared secret"
    assert rejected[2] == f"replayed command: nonce {scenario['good_nonce']} was already used"
    assert rejected[3] == "command is for device 'another-device'; this is 'pi-test'"
    log = scenario["second"].log()
    assert "WARNING edge.daemon: command rejected: bad signature" in log
    assert "WARNING edge.daemon: command rejected: malformed command: not valid JSON" in log
    late = [m for m in by_task(scenario["results"], "face.identify") if m["data"]["frame_id"] in LATE]
    assert len(late) == 2 and all(m["seq"] > scenario["last_seq_before_late"] for m in late)  # kept running


def test_signed_bench_command_produces_a_bench_report(scenario: dict) -> None:
    (bench,) = scenario["bench"]
    assert bench["model"] == "embedder:face_embedder.onnx"
    assert bench["backend"] == "onnxruntime"
    assert bench["runs"] >= 5
    assert 0 < bench["p50_ms"] <= bench["p90_ms"]
    (done,) = [m for m in by_task(scenario["results"], "command.done") if m["data"]["cmd"] == "bench"]
    assert done["data"]["nonce"] == scenario["good_nonce"]
    assert done["data"]["bench_seq"] == bench["seq"]
    print(
        f"\nbench over MQTT: first {bench['first_ms']:.1f} ms, p50 {bench['p50_ms']:.1f} ms, p90 {bench['p90_ms']:.1f} ms"
    )


def test_edge_deploy_command_sends_a_signed_reload(scenario: dict) -> None:
    assert scenario["command_cli_exit"] == 0
    (done,) = [m for m in by_task(scenario["results"], "command.done") if m["data"]["cmd"] == "reload"]
    assert done["data"]["people"] == 2  # the gallery enrolled at start, re-read from its file
    assert "INFO edge.daemon: command reload (nonce" in scenario["second"].log()


def test_enroll_command_rebuilds_the_gallery_from_the_configured_folder(scenario: dict) -> None:
    (done,) = [m for m in by_task(scenario["results"], "command.done") if m["data"]["cmd"] == "enroll"]
    assert done["data"]["enrolled"] == {"eileen_collins": 1, "tom_hanks": 1}
    assert done["data"]["skipped"] == []
    assert done["data"]["gallery"].endswith("state/gallery.npz")


def test_text_request_without_a_model_gets_a_clear_error(scenario: dict) -> None:
    (reply,) = by_task(scenario["results"], "text.error")
    assert reply["data"] == {"id": "q1", "error": "text model not configured: set text.model_dir in the daemon config"}


def test_sigterm_exits_0_with_the_outbox_flushed(scenario: dict) -> None:
    assert scenario["exit_code"] == 0
    assert scenario["outbox_left"] == 0
    log = scenario["second"].log()
    assert "telemetry closed: 0 reports left in the outbox" in log
    assert scenario["telemetry"], "no telemetry report arrived"
    last = scenario["telemetry"][-1]
    assert last["fps"] >= 0 and last["latency_p90_ms"] >= last["latency_p50_ms"]


def test_every_heartbeat_names_what_runs(scenario: dict, face_models: Path) -> None:
    from edge.face.models import FaceModel, read_models_folder

    embedder = read_models_folder(face_models).entries[FaceModel.EMBEDDER.role]
    beats = scenario["telemetry"]
    print(f"\n{len(beats)} heartbeats")
    assert len(beats) >= 5, beats  # one a second (interval_s = 1.0) over two runs of many seconds
    assert {(t["model_sha256"], t["precision"], t["runtime"]) for t in beats} == {
        (embedder.sha256, "fp32", "onnxruntime")
    }
    [running] = scenario["running"]  # the monitor's store: which device runs which model
    assert (running.device_id, running.model_sha256, running.precision, running.runtime) == (
        DEVICE,
        embedder.sha256,
        "fp32",
        "onnxruntime",
    )


# --- scenario 2: a video file, resumed where it stopped --------------------------------------------------


def write_video(path: Path, photos: dict[str, np.ndarray]) -> list[str | None]:
    """A 10-frame MJPG video from real photos; returns who is in each frame (None: an empty grey frame)."""
    side = 512
    astronaut = photos["astronaut_original"]
    hanks = cv2.resize(photos["tom_hanks_original"], (side, side), interpolation=cv2.INTER_CUBIC)
    grey = np.full((side, side, 3), 128, np.uint8)
    plan = ["eileen_collins", None, "tom_hanks", None, None, None, "eileen_collins", None, "tom_hanks", None]
    frames = {"eileen_collins": astronaut, "tom_hanks": hanks, None: grey}
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 5.0, (side, side))
    assert writer.isOpened()
    for who in plan:
        writer.write(cv2.cvtColor(frames[who], cv2.COLOR_RGB2BGR))
    writer.release()
    return plan


def outbox_results(path: Path) -> list[dict]:
    with sqlite3.connect(path, timeout=10) as con:
        rows = con.execute("SELECT payload FROM outbox WHERE kind = 'result' ORDER BY seq").fetchall()
    return [json.loads(r[0]) for r in rows]


def test_video_source_every_second_frame_resumed_after_a_stop(
    tmp_path: Path, face_models: Path, photos: dict[str, np.ndarray], people: Path
) -> None:
    (tmp_path / "people").symlink_to(people)
    work = tmp_path / "work"
    work.mkdir()
    plan = write_video(work / "door.avi", photos)
    source = 'kind = "video"\npath = "door.avi"\nstride = 2'
    first = write_config(work / "first.toml", face_models, source + "\nmax_frames = 2")
    rest = write_config(work / "rest.toml", face_models, source)
    for config, log, frames in ((first, "first.log", 2), (rest, "rest.log", 3)):  # no [broker]: outbox
        run = DaemonProcess(config, tmp_path / log, "--once", "--json")
        assert run.proc.wait(120) == 0, run.log()
        summary = json.loads(run.proc.stdout.read())
        assert summary["stopped_by"] == "source exhausted (--once)"
        # throughput of the serving loop alone (model loading is start_s)
        assert summary["frames"] == frames and summary["start_s"] > 0 and summary["serve_s"] > 0
        assert math.isclose(summary["frames_per_s"] * summary["serve_s"], frames, rel_tol=0.01), summary
        assert f"{frames} frames in " in run.log()
    results = by_task(outbox_results(work / "state" / "outbox.sqlite"), "face.identify")
    assert [m["data"]["frame_id"] for m in results] == [f"door.avi#{i}" for i in range(0, 10, 2)]
    assert [m["data"]["frame_index"] for m in results] == [0, 2, 4, 6, 8]
    names = [[f["name"] for f in m["data"]["faces"]] for m in results]
    assert names == [[who] if who else [] for who in plan[::2]]


def test_a_video_s_faces_are_followed_between_detector_frames(
    tmp_path: Path, face_models: Path, photos: dict[str, np.ndarray], people: Path
) -> None:
    """``face.detect_every = 3`` on a camera-like clip: the detector on frames 0, 3 and 6, the face followed on
    the others, named every time; each face says which it was (``followed``)."""
    from converters.face.facedata import CLIP_SIZE, camera_clip

    (tmp_path / "people").symlink_to(people)
    work = tmp_path / "work"
    work.mkdir()
    writer = cv2.VideoWriter(str(work / "pan.avi"), cv2.VideoWriter_fourcc(*"MJPG"), 10.0, CLIP_SIZE)
    for rgb in camera_clip(photos["astronaut_original"], 7):
        writer.write(cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
    writer.release()
    config = write_config(work / "pan.toml", face_models, 'kind = "video"\npath = "pan.avi"')
    config.write_text(config.read_text().replace("[source]", "detect_every = 3\n[source]"), encoding="utf-8")
    run = DaemonProcess(config, tmp_path / "pan.log", "--once", "--json")
    assert run.proc.wait(120) == 0, run.log()
    results = by_task(outbox_results(work / "state" / "outbox.sqlite"), "face.identify")
    faces = [m["data"]["faces"] for m in results]
    assert [[f["name"] for f in frame] for frame in faces] == [["eileen_collins"]] * 7
    assert [frame[0]["followed"] for frame in faces] == [False, True, True, False, True, True, False]
