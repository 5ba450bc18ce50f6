"""Over-the-air updates (issue 16): a real daemon, a real mosquitto, a real HTTP server, real signed bundles.

One scenario per module (face models exported once), run against one device in this order:

1. an update signed by a key the device does not trust -> ``update.failed``, nothing switched;
2. a truncated download -> ``update.failed``, nothing switched;
3. a deliberately wrong model, correctly signed (its golden set is the right model's) -> installed, the
   golden check fails on the device, ``update.rolled_back`` to the base models;
4. a good update -> ``update.accepted``; telemetry names the new bundle; frames use it;
5. the daemon SIGKILLed twice in the trial window (``crash_limit = 2``) -> rolled back at the second start;
6. SIGKILL while the next update is ``installing``, and again while it is ``checking`` -> each restart comes back
   on a consistent slot (the one before) and reports why;
7. the same update again -> accepted; a SIGTERM and a restart count no crash.
"""

from __future__ import annotations

import http.server
import json
import re
import shutil
import signal
import threading
import time
from pathlib import Path

import numpy as np
import paho.mqtt.publish as mqtt_publish
import pytest

from edge.bundle import verify_bundle
from edge.daemon.commands import sign_command, write_secret
from edge.digest import file_sha256
from edge.imageio import save_image
from edge.signing import generate_keypair, load_trusted_keys, sign_manifest
from edge.telemetry.link import BrokerConfig
from fleet import Monitor, MonitorConfig
from tests.integration.test_daemon import DEVICE, PREFIX, DaemonProcess, by_task, stored, wait_until
from testsupport.broker import Broker

pytestmark = pytest.mark.integration


# --- bundles -----------------------------------------------------------------------------------------------


def _copy_models(src: Path, dest: Path, tag: str) -> Path:
    """A copy of a models folder whose models.json names another tool version (so its bundle id differs)."""
    shutil.copytree(src, dest)
    data = json.loads((dest / "models.json").read_text())
    data["tool_version"] = tag
    (dest / "models.json").write_text(json.dumps(data, indent=2))
    return dest


def _break_embedder(models: Path) -> None:
    """Negate one conv kernel of the embedder (still a valid face embedder, computing something else)."""
    import onnx
    from onnx import numpy_helper

    data = json.loads((models / "models.json").read_text())
    entry = next(m for m in data["models"] if m["role"] == "embedder")
    path = models / entry["file"]
    model = onnx.load(str(path))
    init = max(model.graph.initializer, key=lambda t: int(np.prod(t.dims)))
    init.CopyFrom(numpy_helper.from_array(-numpy_helper.to_array(init), init.name))
    onnx.save(model, str(path))
    entry.update(sha256=file_sha256(path), size=path.stat().st_size)
    (models / "models.json").write_text(json.dumps(data, indent=2))


def _build(models: Path, out: Path, key: Path, golden: bool = True):
    from converters.package import bundle as package
    from converters.package.bundle import BuildOptions, build_bundle
    from converters.package.stages import ModelKind, ModelStage, StageContext, StageResult
    from edge.profiles import Precision, load_profile

    def run(ctx: StageContext) -> StageResult:
        shutil.copytree(models, ctx.out_dir, dirs_exist_ok=True)
        files = tuple(sorted(p.name for p in ctx.out_dir.iterdir()))
        return StageResult(ModelKind.FACE, ctx.precision.value, "onnx", files, (), {}, {})

    stage = ModelStage(ModelKind.FACE, lambda: (), (), run)
    saved = package.STAGES[ModelKind.FACE]
    package.STAGES[ModelKind.FACE] = stage
    try:
        opts = BuildOptions(precision=Precision.FP32, wheels=False, sign_key=key, golden=golden)
        return build_bundle(load_profile("rpi4"), ["face"], out, out / "cache", options=opts)
    finally:
        package.STAGES[ModelKind.FACE] = saved


def _reseal(folder: Path, key: Path) -> Path:
    """Rewrite the manifest for the folder's files, sign it with ``key``, archive it (a bundle as built)."""
    from converters.package.bundle import _archive, _manifest
    from edge.profiles import load_profile

    old = json.loads((folder / "manifest.json").read_text())
    (folder / "manifest.sig").unlink(missing_ok=True)
    manifest = _manifest(folder, load_profile("rpi4"), old["models"], old["wheelhouse"])
    data = (json.dumps(manifest, indent=2) + "\n").encode()
    (folder / "manifest.json").write_bytes(data)
    (folder / "manifest.sig").write_bytes(sign_manifest(data, key))
    return _archive(folder)


# --- an HTTP server on loopback, with one route that cuts its body short ------------------------------------


#: /trickle answers 200 and then sends one byte this often (a slow retrieval attack), until the test ends.
_TRICKLE_S = 0.5
_SERVER_STOPS = threading.Event()


class _Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        if self.path == "/trickle":
            self.close_connection = True
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n")
            for _ in range(600):  # at most 5 minutes
                if _SERVER_STOPS.wait(_TRICKLE_S):
                    return
                try:
                    self.wfile.write(b"0")
                except OSError:
                    return
            return
        if not self.path.startswith("/truncated/"):
            return super().do_GET()
        data = (Path(self.directory) / self.path.removeprefix("/truncated/")).read_bytes()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data[: len(data) // 2])
        self.wfile.flush()
        self.close_connection = True


def _serve(www: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), lambda *a: _Handler(*a, directory=str(www)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


# --- the scenario ----------------------------------------------------------------------------------------------


def _phase(state: Path) -> str:
    try:
        return json.loads((state / "slots" / "update.json").read_text())["phase"]
    except (OSError, ValueError, KeyError):
        return ""


def _kill_in_phase(daemon: DaemonProcess, state: Path, phase: str, timeout: float = 180) -> None:
    """SIGKILL the daemon once update.json says ``phase`` (for ``checking``: once ``current`` was switched too,
    which follows the record by one rename; the golden check after it takes far longer than a poll)."""
    deadline = time.monotonic() + timeout
    while _phase(state) != phase or (phase == "checking" and _current(state) is None):
        assert daemon.proc.poll() is None, daemon.log()
        assert time.monotonic() < deadline, f"never saw phase {phase!r}; last {_phase(state)!r}\n{daemon.log()}"
        time.sleep(0.002)
    daemon.proc.kill()
    daemon.proc.wait(30)


def _current(state: Path) -> str | None:
    link = state / "slots" / "current"
    return link.readlink().name if link.is_symlink() else None


@pytest.fixture(scope="module")
def bundles(tmp_path_factory, face_fp32_models: Path) -> dict:
    root = tmp_path_factory.mktemp("update-bundles")
    keys = root / "keys"
    keys.mkdir()
    release, other = generate_keypair(keys / "release.key"), generate_keypair(keys / "other.key")
    good = _build(_copy_models(face_fp32_models, root / "m1", "update-1"), root / "good", release.private_path)
    v2 = _build(_copy_models(face_fp32_models, root / "m2", "update-2"), root / "v2", release.private_path)
    wrong_models = _copy_models(face_fp32_models, root / "m3", "update-wrong")
    _break_embedder(wrong_models)
    wrong = _build(wrong_models, root / "wrong", release.private_path, golden=False)
    shutil.copytree(good.folder / "golden", wrong.folder / "golden")  # the right model's golden set
    wrong_archive = _reseal(wrong.folder, release.private_path)
    foreign = root / "foreign" / good.folder.name
    shutil.copytree(good.folder, foreign)
    foreign_archive = _reseal(foreign, other.private_path)
    www = root / "www"
    www.mkdir()
    archives = {"good": good.archive, "v2": v2.archive, "wrong": wrong_archive, "foreign": foreign_archive}
    for name, archive in archives.items():
        shutil.copyfile(archive, www / f"{name}.tar.gz")
    return {"root": root, "release": release, "other": other, "www": www, "good": good, "v2": v2, "wrong": wrong}


@pytest.fixture(scope="module")
def scenario(tmp_path_factory, face_fp32_models: Path, bundles: dict) -> dict:
    from converters.face.facedata import make_eval_images

    root = tmp_path_factory.mktemp("update")
    base = shutil.copytree(face_fp32_models, root / "base")
    incoming = root / "incoming"
    incoming.mkdir()
    photos = {img.name.split("/")[0]: img.rgb for img in make_eval_images(seed=0, variants=0)}
    save_image(incoming / "astronaut-1.png", photos["astronaut"])
    secret_file = write_secret(root / "command.key")
    secret = secret_file.read_bytes().rstrip(b"\n")
    state = root / "state"
    server, url = _serve(bundles["www"])
    out: dict = {"state": state, "url": url, "phases": {}, "current": {}, "base_id": _models_id(base)}
    with Broker(root / "broker") as broker:
        config = root / "edge-deploy.toml"
        config.write_text(
            f'device_id = "{DEVICE}"\nstate_dir = "state"\ntrusted_keys = ["{bundles["release"].public_path}"]\n'
            f'[face]\nmodels = "{base}"\n[source]\npath = "incoming"\nsettle_s = 0.0\npoll_interval_s = 0.2\n'
            f'[broker]\nhost = "127.0.0.1"\nport = {broker.port}\n[telemetry]\ninterval_s = 1.0\n'
            f'[commands]\nsecret_file = "{secret_file}"\nmax_skew_s = 3600\n'
            "[update]\ncrash_limit = 2\ncrash_window_s = 3600\nmax_latency_ms = 60000\nbench_runs = 3\n"
        )
        monitor = Monitor(MonitorConfig(BrokerConfig("127.0.0.1", broker.port), root / "monitor.db"))
        assert monitor.start(timeout=10)
        db = monitor.store.path
        daemons: list[DaemonProcess] = []

        def start() -> DaemonProcess:
            daemon = DaemonProcess(config, root / f"daemon{len(daemons) + 1}.log")
            daemons.append(daemon)
            daemon.wait_log("listening for commands on", 180)
            return daemon

        def send(name: str, path: str | None = None) -> None:
            sha = file_sha256(bundles["www"] / f"{name}.tar.gz")
            body = sign_command(secret, DEVICE, "update", {"url": f"{url}/{path or name + '.tar.gz'}", "sha256": sha})
            mqtt_publish.single(f"{PREFIX}/{DEVICE}/cmd", body, qos=1, hostname="127.0.0.1", port=broker.port)

        def wait_events(task: str, count: int, timeout: float = 240) -> list[dict]:
            wait_until(lambda: len(by_task(stored(db), task)) >= count, timeout, f"{count} x {task}")
            return by_task(stored(db), task)

        try:
            daemon = start()
            send("foreign")
            wait_events("update.failed", 1)
            send("good", "truncated/good.tar.gz")
            wait_events("update.failed", 2)
            out["current"]["after_failures"] = _current(state)
            send("wrong")
            wait_events("update.rolled_back", 1)
            out["current"]["after_wrong"] = _current(state)
            send("good")
            wait_events("update.accepted", 1)
            out["current"]["after_good"] = _current(state)
            save_image(incoming / "astronaut-2.png", photos["astronaut"])
            wait_until(lambda: any(m["data"].get("frame_id") == "astronaut-2.png" for m in stored(db)), 120, "a frame")
            good_id = _models_id(bundles["good"].folder / "models" / "face")
            wait_until(lambda: any(t.get("bundle_id") == good_id for t in stored(db, "telemetry")), 60, "telemetry")
            # 5: two crashes in the trial window
            for _ in range(2):
                daemon.proc.kill()
                daemon.proc.wait(30)
                daemon = start()
            wait_events("update.rolled_back", 2)
            out["current"]["after_crashes"] = _current(state)
            # 6: killed while installing, then while checking
            for phase in ("installing", "checking"):
                send("v2")
                _kill_in_phase(daemon, state, phase)
                out["current"][f"killed_{phase}"] = _current(state)
                daemon = start()
                out["current"][f"after_{phase}"] = _current(state)
                out["phases"][phase] = _phase(state)
            wait_events("update.failed", 3)
            wait_events("update.rolled_back", 3)
            # 7: the update again, a clean stop and a restart
            send("v2")
            wait_events("update.accepted", 2)
            out["current"]["after_v2"] = _current(state)
            out["clean_exit"] = daemon.stop(signal.SIGTERM)
            daemon = start()
            time.sleep(2.0)
            out["record"] = json.loads((state / "slots" / "update.json").read_text())
            out["slot_verifies"] = verify_bundle(
                state / "slots" / _current(state), load_trusted_keys([bundles["release"].public_path])
            ).signed_by
            out["final_exit"] = daemon.stop(signal.SIGTERM)
            time.sleep(1.0)
            out["results"] = stored(db)
            out["telemetry"] = stored(db, "telemetry")
            out["logs"] = "\n".join(d.log() for d in daemons)
        finally:
            for d in daemons:
                if d.proc.poll() is None:
                    d.proc.kill()
            monitor.close()
            server.shutdown()
    return out


def _models_id(models: Path) -> str:
    """The bundle id telemetry and update events name: models.json's sha256, first 16 hex digits."""
    return file_sha256(models / "models.json")[:16]


def _bundle_id(bundle: Path) -> str:
    return _models_id(bundle / "models" / "face")


def _events(scenario: dict, task: str) -> list[dict]:
    return [m["data"] for m in by_task(scenario["results"], task)]


# --- the checks --------------------------------------------------------------------------------------------------


def test_a_bundle_signed_by_another_key_and_a_truncated_download_switch_nothing(scenario: dict, bundles: dict) -> None:
    failed = _events(scenario, "update.failed")
    other = bundles["other"].key_id
    assert (
        f"signed by key {other}, which is not trusted here; expected a signature by {bundles['release'].key_id}"
        in (failed[0]["reason"])
    )
    size = (bundles["www"] / "good.tar.gz").stat().st_size
    assert (
        failed[1]["reason"]
        == f"{scenario['url']}/truncated/good.tar.gz: truncated: received {size // 2} of {size} bytes"
    )
    assert scenario["current"]["after_failures"] is None  # still the base models
    commands_failed = by_task(scenario["results"], "command.failed")
    assert len(commands_failed) >= 2


def test_a_wrong_model_correctly_signed_fails_the_golden_check_and_rolls_back(scenario: dict, bundles: dict) -> None:
    installed = _events(scenario, "update.installed")
    wrong_id = _bundle_id(bundles["wrong"].folder)
    assert installed[0]["to"] == wrong_id
    rolled = _events(scenario, "update.rolled_back")[0]
    assert (rolled["from"], rolled["to"]) == (scenario["base_id"], wrong_id)
    assert rolled["reason"].startswith("acceptance check failed: ")
    assert "golden chip" in rolled["reason"] and "expected at least 0.995" in rolled["reason"]
    assert rolled["reason"].endswith("; back on base")
    assert scenario["current"]["after_wrong"] is None


def test_a_good_update_is_accepted_and_runs(scenario: dict, bundles: dict) -> None:
    accepted = _events(scenario, "update.accepted")[0]
    good_id = _bundle_id(bundles["good"].folder)
    assert accepted["to"] == good_id
    assert accepted["golden"]["count"] == 4 and accepted["golden"]["worst_cosine"] > 0.9999
    assert scenario["current"]["after_good"] in ("a", "b")
    assert any(t.get("bundle_id") == good_id for t in scenario["telemetry"])
    order = [m["task"] for m in scenario["results"] if m["task"].startswith("update.")]
    first_good = order.index("update.accepted")
    assert order[first_good - 2 : first_good + 1] == ["update.downloading", "update.installed", "update.accepted"]
    # runs: the frame that arrived after the switch is analysed by the update as the same photo was by the base
    accepted_seq = next(m["seq"] for m in scenario["results"] if m["task"] == "update.accepted")
    frames = {m["data"]["frame_id"]: m for m in by_task(scenario["results"], "face.identify")}
    before, after = frames["astronaut-1.png"], frames["astronaut-2.png"]
    assert before["seq"] < accepted_seq < after["seq"]
    print("\nbase:", before["data"]["faces"], "\nupdate:", after["data"]["faces"])
    (face,) = after["data"]["faces"]
    (base_face,) = before["data"]["faces"]
    assert face["box"] == pytest.approx(base_face["box"], abs=0.5) and face["score"] > 0.5, (face, base_face)


def test_two_crashes_in_the_trial_window_roll_back(scenario: dict, bundles: dict) -> None:
    rolled = _events(scenario, "update.rolled_back")[1]
    assert rolled["to"] == _bundle_id(bundles["good"].folder)
    assert rolled["reason"] == "the daemon crashed 2 times within 3600 s after the switch; back on base"
    assert scenario["current"]["after_crashes"] is None


def test_sigkill_mid_install_and_mid_check_come_back_on_a_consistent_slot(scenario: dict) -> None:
    cur = scenario["current"]
    assert cur["killed_installing"] is None and cur["after_installing"] is None  # current never moved
    assert cur["killed_checking"] in ("a", "b")  # switched when killed ...
    assert cur["after_checking"] is None  # ... and switched back at the start
    failed = _events(scenario, "update.failed")[2]
    assert failed["reason"] == "interrupted while installing (the daemon stopped); the current slot was not touched"
    rolled = _events(scenario, "update.rolled_back")[2]
    assert rolled["reason"] == "the daemon stopped during the acceptance check; back on base"
    assert scenario["phases"] == {"installing": "failed", "checking": "rolled_back"}


def test_the_update_then_succeeds_and_a_clean_restart_counts_no_crash(scenario: dict, bundles: dict) -> None:
    assert scenario["current"]["after_v2"] in ("a", "b")
    assert scenario["clean_exit"] == 0 and scenario["final_exit"] == 0
    record = scenario["record"]
    assert (record["phase"], record["crashes"], record["to_id"]) == ("trial", 0, _bundle_id(bundles["v2"].folder))
    assert scenario["slot_verifies"] == bundles["release"].key_id


# --- a server that trickles: the daemon goes on, and stops when asked ---------------------------------------------


def test_frames_telemetry_and_sigterm_go_on_while_a_server_trickles_the_download(
    tmp_path: Path, face_fp32_models: Path
) -> None:
    """Issue 44: a server that sends 200 and then a byte every 0.5 s must not stop the daemon's loop: a new
    photo is analysed and telemetry goes on while update.json says ``downloading``; SIGTERM stops the daemon
    promptly, cancelling the download (update.failed, command.failed, nothing left in download/)."""
    release = generate_keypair(tmp_path / "release.key")
    incoming = tmp_path / "incoming"
    incoming.mkdir()
    secret = write_secret(tmp_path / "command.key")
    state = tmp_path / "state"
    www = tmp_path / "www"
    www.mkdir()
    _SERVER_STOPS.clear()
    server, url = _serve(www)
    with Broker(tmp_path / "broker") as broker:
        config = tmp_path / "edge-deploy.toml"
        config.write_text(
            f'device_id = "{DEVICE}"\nstate_dir = "state"\ntrusted_keys = ["{release.public_path}"]\n'
            f'[face]\nmodels = "{face_fp32_models}"\n[source]\npath = "incoming"\nsettle_s = 0.0\n'
            f'poll_interval_s = 0.2\n[broker]\nhost = "127.0.0.1"\nport = {broker.port}\n[telemetry]\n'
            f'interval_s = 1.0\n[commands]\nsecret_file = "{secret}"\nmax_skew_s = 3600\n'
            "[update]\ndownload_timeout_s = 3600\nmin_bytes_per_s = 0\n"
        )
        monitor = Monitor(MonitorConfig(BrokerConfig("127.0.0.1", broker.port), tmp_path / "monitor.db"))
        assert monitor.start(timeout=10)
        db = monitor.store.path
        daemon = DaemonProcess(config, tmp_path / "daemon.log")
        try:
            daemon.wait_log("listening for commands on", 180)
            body = sign_command(
                secret.read_bytes().rstrip(b"\n"), DEVICE, "update", {"url": f"{url}/trickle", "sha256": "0" * 64}
            )
            mqtt_publish.single(f"{PREFIX}/{DEVICE}/cmd", body, qos=1, hostname="127.0.0.1", port=broker.port)
            wait_until(lambda: _phase(state) == "downloading", 60, "update.json at downloading")
            beats = len(stored(db, "telemetry"))
            photo = next(img.rgb for img in _eval_images() if img.name.startswith("astronaut"))
            save_image(incoming / "astronaut-1.png", photo)
            wait_until(lambda: any(m["data"].get("frame_id") == "astronaut-1.png" for m in stored(db)), 60, "a frame")
            wait_until(lambda: len(stored(db, "telemetry")) >= beats + 2, 30, "telemetry")
            assert _phase(state) == "downloading"  # the frame and the heartbeats came during the download
            started = time.monotonic()
            assert daemon.stop(signal.SIGTERM, timeout=30) == 0, daemon.log()
            took = time.monotonic() - started
            wait_until(lambda: len(by_task(stored(db), "command.failed")) >= 1, 30, "the command's answer")
            results = stored(db)
        finally:
            if daemon.proc.poll() is None:
                daemon.proc.kill()
            monitor.close()
            _SERVER_STOPS.set()
            server.shutdown()
    assert took < 15, f"SIGTERM took {took:.1f} s\n{daemon.log()}"
    (failed,) = [m["data"] for m in by_task(results, "update.failed")]
    assert re.fullmatch(
        rf"{re.escape(url)}/trickle: stopped after \d+ bytes in \d+\.\d s \(the daemon is stopping\)", failed["reason"]
    ), failed["reason"]
    (answer,) = [m["data"] for m in by_task(results, "command.failed")]
    assert (answer["cmd"], answer["error"]) == ("update", failed["reason"])
    assert _phase(state) == "failed" and list((state / "slots" / "download").iterdir()) == []


def _eval_images():
    from converters.face.facedata import make_eval_images

    return make_eval_images(seed=0, variants=0)
