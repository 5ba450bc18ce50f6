"""Over-the-air update parts (issue 16), fast: download bounds, A/B slots, the golden check, the state machine.

A tiny real face-embedder-shaped ONNX model (1x1 conv to 128 channels, global average pool) stands in for
the ResNet, run by real onnxruntime; bundles are real signed archives; downloads come from a real
``http.server`` on loopback. The whole daemon with real models is tests/integration/test_update.py.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import re
import shutil
import tarfile
import threading
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edge.errors import BundleError, InputError, ValidationError
from edge.signing import generate_keypair, load_trusted_keys, sign_manifest
from edge.update.download import Download, DownloadLimits, download
from edge.update.golden import check_golden, read_face_golden, write_face_golden
from edge.update.slots import Phase, Slots, UpdateRecord

# --- a tiny embedder and bundles ---------------------------------------------------------------------------------


def _embedder(path: Path, sign: float = 1.0) -> Path:
    w = (np.random.default_rng(0).standard_normal((128, 3, 1, 1)) * sign).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["chip", "w"], ["c"]),
            helper.make_node("GlobalAveragePool", ["c"], ["g"]),
            helper.make_node("Flatten", ["g"], ["descriptor"]),
        ],
        "tiny_embedder",
        [helper.make_tensor_value_info("chip", TensorProto.FLOAT, ["n", 3, 150, 150])],
        [helper.make_tensor_value_info("descriptor", TensorProto.FLOAT, ["n", 128])],
        [numpy_helper.from_array(w, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.save(model, str(path))
    return path


def _chips(n: int = 3) -> np.ndarray:
    rng = np.random.default_rng(1)
    return rng.integers(0, 256, (n, 150, 150, 3), dtype=np.uint8)


def _descriptors(model: Path, chips: np.ndarray) -> np.ndarray:
    from edge.face.embed import FaceEmbedder

    with FaceEmbedder(model) as e:
        return e.embed(chips)


def _bundle(root: Path, key: Path | None, tag: str, sign: float = 1.0, golden_from: float = 1.0) -> Path:
    """A signed bundle folder: models/face (tiny embedder) + a golden set made from the ``golden_from`` model."""
    from edge.face.models import describe, write_models_file

    folder = root / "rpi4-face"
    models = folder / "models" / "face"
    models.mkdir(parents=True)
    model = _embedder(models / "embedder.onnx", sign)
    write_models_file(models, [describe(model, "embedder", "onnx", "fp32", {})], "rpi4", tag)
    reference = _embedder(root / "reference.onnx", golden_from)
    chips = _chips()
    write_face_golden(folder, chips, _descriptors(reference, chips), 0.995, "x" * 64, "test chips")
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    manifest = {
        "schema_version": 1, "format": "edge-deploy-bundle", "target": "rpi4", "tool_version": tag,
        "profile": {}, "models": [{"kind": "face"}], "wheelhouse": None,
        "files": [{"path": p.relative_to(folder).as_posix(), "size": p.stat().st_size,
                   "sha256": hashlib.sha256(p.read_bytes()).hexdigest()} for p in files],
    }  # fmt: skip
    data = json.dumps(manifest).encode()
    (folder / "manifest.json").write_bytes(data)
    if key is not None:
        (folder / "manifest.sig").write_bytes(sign_manifest(data, key))
    return folder


def _archive(folder: Path, out: Path) -> Path:
    with tarfile.open(out, "w:gz") as tar:
        tar.add(folder, arcname=folder.name)
    return out


@pytest.fixture
def keys(tmp_path: Path):
    (tmp_path / "keys").mkdir()
    return generate_keypair(tmp_path / "keys" / "release.key"), generate_keypair(tmp_path / "keys" / "other.key")


# --- golden -----------------------------------------------------------------------------------------------------


def test_the_golden_set_reproduces_with_the_right_model_and_not_with_a_wrong_one(tmp_path: Path) -> None:
    good = _bundle(tmp_path / "good", None, "1")
    result = check_golden(good, threads=1, max_latency_ms=60_000, bench_runs=2)
    assert result.count == 3 and result.worst_cosine > 0.99999 and result.min_cosine == 0.995
    wrong = _bundle(tmp_path / "wrong", None, "1", sign=-1.0)  # golden from the right model
    with pytest.raises(ValidationError) as err:
        check_golden(wrong, threads=1, max_latency_ms=60_000, bench_runs=2)
    assert re.match(
        rf"{re.escape(str(wrong))}: golden chip [0-2] of 3: cosine -1.000000 to the descriptor the build",
        str(err.value),
    )
    assert str(err.value).endswith("expected at least 0.995 (the model does not compute what the build proved)")


def test_the_golden_bench_refuses_a_model_slower_than_the_bound(tmp_path: Path) -> None:
    good = _bundle(tmp_path / "good", None, "1")
    with pytest.raises(
        ValidationError, match=r"embedder median [0-9.]+ ms per chip over 2 runs; expected at most 1e-06 ms"
    ):
        check_golden(good, threads=1, max_latency_ms=1e-6, bench_runs=2)


def test_a_missing_or_malformed_golden_set_is_named(tmp_path: Path) -> None:
    good = _bundle(tmp_path / "good", None, "1")
    (good / "golden" / "golden.json").write_text('{"schema_version": 1, "face": {"min_cosine": 2}}')
    with pytest.raises(ValidationError, match="golden.json: face.min_cosine = 2; expected a number in"):
        read_face_golden(good)
    shutil.rmtree(good / "golden")
    with pytest.raises(ValidationError, match="no golden/golden.json; expected a bundle built with a golden set"):
        read_face_golden(good)
    with pytest.raises(InputError, match=r"golden chips: uint8 \(2, 10, 12, 3\); expected uint8 \[1..32, S, S, 3\]"):
        write_face_golden(good, np.zeros((2, 10, 12, 3), np.uint8), np.zeros((2, 128)), 0.9, "", "")
    with pytest.raises(InputError, match=r"golden descriptors: \(3, 128\); expected finite float32 \[2, D\]"):
        write_face_golden(good, np.zeros((2, 10, 10, 3), np.uint8), np.zeros((3, 128)), 0.9, "", "")


@pytest.mark.parametrize("name", ["golden/golden.json", "golden/face.npz"])
def test_a_golden_file_that_is_a_link_is_refused(tmp_path: Path, name: str) -> None:
    """Issue 44: bundle files read by name are never read through a link."""
    good = _bundle(tmp_path / "good", None, "1")
    real = tmp_path / "elsewhere"
    (good / name).rename(real)
    (good / name).symlink_to(real)
    with pytest.raises(BundleError) as err:
        read_face_golden(good)
    assert str(err.value) == (
        f"{good / name}: a symbolic link; expected the file itself (bundle files are not read through links)"
    )


def test_a_golden_set_of_another_chip_or_descriptor_size_is_named(tmp_path: Path) -> None:
    """Any embedder's chip and descriptor sizes are stored (a user's: convert face --embedder); a golden set
    whose sizes are not the bundle's embedder's is refused with both named, before anything is compared."""
    good = _bundle(tmp_path / "good", None, "1")
    write_face_golden(good, _chips(2)[:, :112, :112], np.ones((2, 64), np.float32), 0.9, "", "a 64-d embedder")
    record, chips, descriptors = read_face_golden(good)
    assert (chips.shape, descriptors.shape, record["source"]) == ((2, 112, 112, 3), (2, 64), "a 64-d embedder")
    with pytest.raises(ValidationError, match=r"112-pixel chips and 64-d descriptors; the bundle's embedder takes "
                       r"150-pixel chips and gives 128-d descriptors"):  # fmt: skip
        check_golden(good, threads=1, max_latency_ms=60_000, bench_runs=1)


# --- download ---------------------------------------------------------------------------------------------------


#: The trickling routes send one byte this often, at most _TRICKLE_BYTES of them, until the test ends.
_TRICKLE_S = 0.5
_TRICKLE_BYTES = 30
#: What a bounded download may take beyond its bound on a loaded machine.
_SLACK_S = 1.5
_SERVER_STOPS = threading.Event()


class _Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        if self.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", "ftp://127.0.0.1/b.tar.gz")  # urllib itself refuses file://
            self.end_headers()
            return
        if self.path.startswith("/cut/"):
            data = (Path(self.directory) / self.path.removeprefix("/cut/")).read_bytes()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data[:100])
            self.close_connection = True
            return
        if self.path.startswith("/slow/"):  # slow but steady: 1 KiB every 50 ms
            data = (Path(self.directory) / self.path.removeprefix("/slow/")).read_bytes()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            for i in range(0, len(data), 1024):
                time.sleep(0.05)
                self.wfile.write(data[i : i + 1024])
            return
        trickles = {
            "/trickle": b"HTTP/1.1 200 OK\r\nContent-Length: 10000\r\n\r\n",  # the body, byte by byte
            "/trickle-headers": b"HTTP/1.1 200 OK\r\nX-Slow: ",  # a header that never ends
            "/trickle-chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",  # a chunk-size line
        }
        if self.path in trickles:
            self.close_connection = True
            self.wfile.write(trickles[self.path])
            for _ in range(_TRICKLE_BYTES):
                if _SERVER_STOPS.wait(_TRICKLE_S):
                    return
                try:
                    self.wfile.write(b"0")
                except OSError:
                    return
            return
        super().do_GET()


@pytest.fixture
def server(tmp_path: Path):
    www = tmp_path / "www"
    www.mkdir()
    (www / "b.tar.gz").write_bytes(bytes(range(256)) * 40)
    _SERVER_STOPS.clear()
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), lambda *a: _Handler(*a, directory=str(www)))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}", www
    _SERVER_STOPS.set()
    srv.shutdown()
    srv.server_close()


def test_download_checks_size_sha256_and_leaves_nothing_when_it_fails(server, tmp_path: Path) -> None:
    url, www = server
    data = (www / "b.tar.gz").read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    dest = tmp_path / "got.tar.gz"
    assert download(f"{url}/b.tar.gz", dest, sha, DownloadLimits(1 << 20, 30)) == len(data)
    assert dest.read_bytes() == data
    cases = [
        (f"{url}/cut/b.tar.gz", sha, 1 << 20, f"{url}/cut/b.tar.gz: truncated: received 100 of {len(data)} bytes"),
        (f"{url}/b.tar.gz", sha, 1000, f"{url}/b.tar.gz: {len(data)} bytes announced; expected at most 1000 (update.max_bytes)"),
        (f"{url}/b.tar.gz", "0" * 64, 1 << 20, f"{url}/b.tar.gz: sha256 {sha[:12]}… != the command's 000000000000… (a different or damaged file)"),
        (f"{url}/none.tar.gz", sha, 1 << 20, f"{url}/none.tar.gz: HTTP 404 File not found"),
        ("file:///etc/passwd", sha, 1 << 20, "update url = 'file:///etc/passwd'; expected an http or https URL with a host"),
        (f"{url}/redirect", sha, 1 << 20, f"{url}/redirect: redirected to 'ftp://127.0.0.1/b.tar.gz'; expected an http or https URL"),
    ]  # fmt: skip
    for url_, sha_, limit, message in cases:
        dest = tmp_path / "x.tar.gz"
        with pytest.raises(BundleError) as err:
            download(url_, dest, sha_, DownloadLimits(limit, 30))
        assert str(err.value) == message
        assert not dest.exists() and not dest.with_name("x.tar.gz.partial").exists()


def _refused(url: str, limits: DownloadLimits, tmp_path: Path) -> tuple[str, float]:
    """The error of a download that must fail, and how long it took; nothing may be left behind."""
    dest = tmp_path / "x.tar.gz"
    started = time.monotonic()
    with pytest.raises(BundleError) as err:
        download(url, dest, "0" * 64, limits)
    took = time.monotonic() - started
    assert not dest.exists() and not dest.with_name("x.tar.gz.partial").exists()
    return str(err.value), took


@pytest.mark.timeout(60)
@pytest.mark.parametrize("route", ["trickle", "trickle-headers", "trickle-chunked"])
def test_a_server_that_trickles_is_cut_at_the_deadline(server, tmp_path: Path, route: str) -> None:
    """A slow retrieval attack (200, then a byte every 0.5 s: in the body, in a header, in a chunk-size line)
    ends at download_timeout_s, not when 64 KiB have come."""
    url, _ = server
    message, took = _refused(f"{url}/{route}", DownloadLimits(1 << 20, 2.0), tmp_path)
    found = re.fullmatch(
        rf"{re.escape(url)}/{route}: (\d+) bytes in (\d+\.\d) s; expected the whole file within 2 s "
        r"\(update.download_timeout_s\)",
        message,
    )
    assert found, message
    body_bytes = int(2.0 / _TRICKLE_S) if route == "trickle" else 0
    assert int(found[1]) <= body_bytes and 2.0 <= float(found[2]) < 2.0 + _SLACK_S
    assert took < 2.0 + _SLACK_S


@pytest.mark.timeout(60)
def test_a_server_below_the_least_average_speed_is_cut_after_the_grace_period(server, tmp_path: Path) -> None:
    url, _ = server
    limits = DownloadLimits(1 << 20, 30.0, min_bytes_per_s=100, grace_s=1.0)
    message, took = _refused(f"{url}/trickle", limits, tmp_path)
    found = re.fullmatch(
        rf"{re.escape(url)}/trickle: (\d) bytes in (\d+\.\d) s \((\d+\.\d) bytes/s\); expected at least 100 "
        r"bytes/s on average after the first 1 s \(update.min_bytes_per_s\)",
        message,
    )
    assert found, message
    assert 1.0 <= float(found[2]) < 1.0 + _SLACK_S and float(found[3]) < 100
    assert took < 1.0 + _SLACK_S


def test_a_slow_but_steady_server_is_within_the_bounds(server, tmp_path: Path) -> None:
    url, www = server
    data = (www / "b.tar.gz").read_bytes()
    limits = DownloadLimits(1 << 20, 30.0, min_bytes_per_s=1000, grace_s=0.2)
    dest = tmp_path / "got.tar.gz"
    assert download(f"{url}/slow/b.tar.gz", dest, hashlib.sha256(data).hexdigest(), limits) == len(data)
    assert dest.read_bytes() == data


@pytest.mark.timeout(60)
def test_a_download_cancelled_from_another_thread_stops_at_once(server, tmp_path: Path) -> None:
    url, _ = server
    fetch = Download(f"{url}/trickle", tmp_path / "x.tar.gz", "0" * 64, DownloadLimits(1 << 20, 600.0))
    threading.Timer(1.0, fetch.cancel, args=("the daemon is stopping",)).start()
    started = time.monotonic()
    with pytest.raises(BundleError) as err:
        fetch.run()
    assert re.fullmatch(
        rf"{re.escape(url)}/trickle: stopped after \d bytes in \d+\.\d s \(the daemon is stopping\)", str(err.value)
    ), str(err.value)
    assert time.monotonic() - started < 1.0 + _SLACK_S
    assert not (tmp_path / "x.tar.gz.partial").exists()


# --- slots --------------------------------------------------------------------------------------------------------


def test_slots_install_only_a_verified_signed_bundle_and_switch_atomically(tmp_path: Path, keys) -> None:
    release, other = keys
    trusted = load_trusted_keys([release.public_path])
    slots = Slots(tmp_path / "slots")
    assert (slots.current(), slots.inactive()) == (None, "a")
    _archive(_bundle(tmp_path / "b1", release.private_path, "1"), slots.archive)
    folder = slots.install("a", trusted)
    assert folder == tmp_path / "slots" / "a" and (folder / "models" / "face" / "models.json").is_file()
    assert slots.current() is None  # installing does not switch
    slots.switch("a")
    assert (slots.current(), slots.inactive(), (tmp_path / "slots" / "current").readlink()) == ("a", "b", Path("a"))
    with pytest.raises(BundleError, match="is the current slot; an update goes into the other one"):
        slots.install("a", trusted)
    _archive(_bundle(tmp_path / "b2", other.private_path, "2"), slots.archive)
    with pytest.raises(BundleError, match=f"signed by key {other.key_id}, which is not trusted here"):
        slots.install("b", trusted)
    assert not (tmp_path / "slots" / "b").exists()  # nothing was written for a refused archive
    slots.switch(None)
    assert slots.current() is None and (tmp_path / "slots" / "a").is_dir()


def test_the_update_record_is_durable_and_a_broken_one_is_named(tmp_path: Path) -> None:
    slots = Slots(tmp_path / "slots")
    assert slots.read_record() == UpdateRecord()
    slots.write_record(UpdateRecord(Phase.TRIAL.value, "b", "a", "f" * 16, "t" * 16, crashes=1, running=True))
    again = slots.read_record()
    assert (again.phase, again.slot, again.previous, again.crashes, again.running) == ("trial", "b", "a", 1, True)
    (tmp_path / "slots" / "update.json").write_text('{"phase": "sideways"}')
    with pytest.raises(InputError, match="update.json: not an update record .* remove it to start afresh"):
        slots.read_record()


# --- the updater's state machine ------------------------------------------------------------------------------------


def _updater(tmp_path: Path, keys, crash_limit: int = 2):
    from edge.daemon.config import load_config
    from edge.daemon.updater import Updater

    release, _ = keys
    base = _bundle(tmp_path / "base", None, "base") / "models" / "face"
    (tmp_path / "incoming").mkdir(exist_ok=True)
    cfg = tmp_path / "edge-deploy.toml"
    cfg.write_text(
        f'trusted_keys = ["{release.public_path}"]\n[face]\nmodels = "{base}"\n[source]\npath = "incoming"\n'
        f"[update]\ncrash_limit = {crash_limit}\nmax_latency_ms = 60000\nbench_runs = 1\n"
    )
    events: list[tuple[str, dict]] = []
    return Updater(load_config(cfg), lambda task, data: events.append((task, data)), threads=1), events, base


def test_run_accepts_a_good_bundle_and_rolls_back_a_wrong_one(tmp_path: Path, keys, server) -> None:
    url, www = server
    release, _ = keys
    updater, events, base = _updater(tmp_path, keys)
    _archive(_bundle(tmp_path / "good", release.private_path, "2"), www / "good.tar.gz")
    _archive(_bundle(tmp_path / "wrong", release.private_path, "3", sign=-1.0), www / "wrong.tar.gz")
    used: list[Path] = []

    def sha(name: str) -> str:
        return hashlib.sha256((www / name).read_bytes()).hexdigest()

    out = updater.run({"url": f"{url}/wrong.tar.gz", "sha256": sha("wrong.tar.gz")}, "n1", used.append)
    assert out["outcome"] == "rolled_back" and updater.slots.current() is None and used == []
    assert [t for t, _ in events] == ["update.downloading", "update.installed", "update.rolled_back"]
    assert events[2][1]["reason"].startswith("acceptance check failed: ") and events[2][1]["reason"].endswith(
        "; back on base"
    )
    # the refused update leaves nothing behind: not its archive, not its slot
    assert not updater.slots.archive.exists() and list((updater.slots.root / "download").iterdir()) == []
    assert not (updater.slots.root / "a").exists()
    events.clear()
    out = updater.run({"url": f"{url}/good.tar.gz", "sha256": sha("good.tar.gz")}, "n2", used.append)
    assert out["outcome"] == "accepted" and updater.slots.current() == "a"
    assert used == [tmp_path / "state" / "slots" / "a" / "models" / "face"]
    assert [t for t, _ in events] == ["update.downloading", "update.installed", "update.accepted"]
    assert events[2][1]["golden"]["count"] == 3
    assert updater.record.phase == "trial" and updater.active_models() == used[0]
    with pytest.raises(InputError, match="is still in its trial window"):
        updater.run({"url": f"{url}/good.tar.gz", "sha256": sha("good.tar.gz")}, "n3", used.append)


@pytest.mark.timeout(60)
def test_an_update_downloads_off_the_loop_and_a_stop_cancels_it(tmp_path: Path, keys, server) -> None:
    """The daemon's loop goes on while a server trickles (tick returns at once); a stop ends the download
    promptly with update.failed, and nothing is left in the download folder."""
    url, _ = server
    updater, events, _ = _updater(tmp_path, keys)
    updater.begin({"url": f"{url}/trickle", "sha256": "0" * 64}, "n1", lambda _p: None)
    with pytest.raises(InputError, match=rf"update: {re.escape(url)}/trickle is still downloading; send it again"):
        updater.begin({"url": f"{url}/trickle", "sha256": "0" * 64}, "n2", lambda _p: None)
    for _ in range(3):
        assert updater.tick() is None
        time.sleep(_TRICKLE_S)
    assert updater.slots.read_record().phase == "downloading"
    finished = updater.stop()
    assert finished is not None and (finished.nonce, finished.data) == ("n1", None)
    reason = str(finished.error)
    assert re.fullmatch(
        rf"{re.escape(url)}/trickle: stopped after \d bytes in \d+\.\d s \(the daemon is stopping\)", reason
    )
    assert events[1] == ("update.failed", {"nonce": "n1", "from": events[0][1]["from"], "to": "", "slot": "a",
                                           "url": f"{url}/trickle", "reason": reason})  # fmt: skip
    assert [t for t, _ in events] == ["update.downloading", "update.failed"]
    assert updater.slots.read_record().phase == "failed"
    assert list((updater.slots.root / "download").iterdir()) == []


def test_updates_need_trusted_keys_and_well_formed_arguments(tmp_path: Path, keys) -> None:
    updater, events, _ = _updater(tmp_path, keys)
    with pytest.raises(InputError, match="update: sha256 = 'abc'; expected 64 lowercase hex digits"):
        updater.run({"url": "http://127.0.0.1:1/x", "sha256": "abc"}, "n", lambda _p: None)
    updater.trusted = ()
    with pytest.raises(InputError, match="update: no trusted_keys configured; over-the-air updates take signed"):
        updater.run({"url": "http://127.0.0.1:1/x", "sha256": "0" * 64}, "n", lambda _p: None)
    assert events == []


def test_a_start_after_a_kill_undoes_an_install_and_rolls_back_a_check(tmp_path: Path, keys) -> None:
    from edge.daemon.updater import Updater

    release, _ = keys
    updater, events, base = _updater(tmp_path, keys)
    slots = updater.slots
    # killed while installing: a half slot and a download are left; current was never switched
    (slots.root / "a").mkdir()
    (slots.archive).write_bytes(b"half")
    slots.write_record(UpdateRecord(Phase.INSTALLING.value, "a", "base", "f", "", running=True))
    fresh = Updater(updater.config, updater.emit, 1)
    fresh.on_start()
    assert not (slots.root / "a").exists() and not slots.archive.exists() and slots.current() is None
    assert events[-1] == ("update.failed", {"nonce": "", "from": "f", "to": "", "slot": "a", "url": "",
                          "reason": "interrupted while installing (the daemon stopped); the current slot was not touched"})  # fmt: skip
    # killed while checking: current already points at the new slot
    _archive(_bundle(tmp_path / "b1", release.private_path, "1"), slots.archive)
    slots.install("b", fresh.trusted)
    slots.switch("b")
    slots.write_record(UpdateRecord(Phase.CHECKING.value, "b", "base", "f", "t", running=True))
    fresh = Updater(updater.config, updater.emit, 1)
    fresh.on_start()
    assert slots.current() is None and fresh.active_models() == base
    assert events[-1][0] == "update.rolled_back"
    assert events[-1][1]["reason"] == "the daemon stopped during the acceptance check; back on base"
    assert slots.read_record().phase == "rolled_back"


def test_crashes_in_the_trial_window_roll_back_and_a_clean_stop_is_no_crash(tmp_path: Path, keys) -> None:
    from edge.daemon.updater import Updater

    release, _ = keys
    updater, events, _ = _updater(tmp_path, keys, crash_limit=2)
    slots = updater.slots
    _archive(_bundle(tmp_path / "b1", release.private_path, "1"), slots.archive)
    slots.install("a", updater.trusted)
    slots.switch("a")
    slots.write_record(UpdateRecord(Phase.TRIAL.value, "a", "base", "f", "t", switched_at=time.time(), running=True))

    def start() -> Updater:
        u = Updater(updater.config, updater.emit, 1)
        u.on_start()
        return u

    u = start()  # crash 1 of 2: kept
    assert (slots.current(), u.record.crashes, events) == ("a", 1, [])
    u.on_clean_stop()
    u = start()  # a clean stop is no crash
    assert (slots.current(), u.record.crashes, events) == ("a", 1, [])
    u = start()  # killed (running left set), then crash 2: rolled back
    u = start()
    assert slots.current() is None
    assert events == [("update.rolled_back", {"nonce": "", "from": "f", "to": "t", "slot": "a", "url": "",
                       "reason": "the daemon crashed 2 times within 600 s after the switch; back on base"})]  # fmt: skip


def test_a_tampered_current_slot_is_rolled_back_at_start(tmp_path: Path, keys) -> None:
    from edge.daemon.updater import Updater

    release, _ = keys
    updater, events, _ = _updater(tmp_path, keys)
    slots = updater.slots
    _archive(_bundle(tmp_path / "b1", release.private_path, "1"), slots.archive)
    slots.install("a", updater.trusted)
    slots.switch("a")
    slots.write_record(UpdateRecord(Phase.GOOD.value, "a", "base", "f", "t", switched_at=1.0))
    (slots.root / "a" / "models" / "face" / "embedder.onnx").write_bytes(b"tampered")
    u = Updater(updater.config, updater.emit, 1)
    u.on_start()
    assert slots.current() is None
    assert events[-1][0] == "update.rolled_back"
    assert "the current slot a failed verification at start" in events[-1][1]["reason"]
    assert "models/face/embedder.onnx: size 8 bytes" in events[-1][1]["reason"]


def test_the_command_cli_needs_url_and_sha256_for_an_update(tmp_path: Path, keys, capsys) -> None:
    from edge.daemon.commands import write_secret
    from edge_deploy import serve_command

    updater, _, base = _updater(tmp_path, keys)
    cfg = updater.config.source_file
    secret = write_secret(tmp_path / "command.key")
    cfg.write_text(cfg.read_text() + f'[commands]\nsecret_file = "{secret}"\n[broker]\nhost = "127.0.0.1"\nport = 1\n')
    assert serve_command.main(["command", "--config", str(cfg), "update", "--url", "http://127.0.0.1:1/b.tar.gz"]) == 3
    assert capsys.readouterr().err == (
        "Error: update: needs --url (the signed bundle's .tar.gz) and --sha256 (the archive's sha256)\n"
    )
