"""Disk and power faults under the durable outbox (issue 17): a full filesystem, a read-only one, and
SIGKILL at random points during commits. Real filesystems (a small tmpfs mounted for the test), real SQLite.

Needs root (``mount``); where mount is refused the test is skipped with the reason, never silently.
"""

from __future__ import annotations

import json
import os
import random
import select
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from edge.errors import TelemetryError
from edge.telemetry.outbox import Outbox
from edge.telemetry.schema import Result

pytestmark = pytest.mark.integration
PAD = "x" * 2000  # ~2 KB a report: a 256 KiB filesystem fills after ~100


def _mount(mnt: Path, options: str) -> None:
    run = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mnt)], capture_output=True,
                         text=True, timeout=30)  # fmt: skip
    if run.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({run.stderr.strip()}); the fault tests need root")


def _remount(mnt: Path, options: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{options}", str(mnt)], check=True, capture_output=True, timeout=30)


@pytest.fixture()
def small_fs(tmp_path: Path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    _mount(mnt, "size=256k")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], capture_output=True, timeout=30)


def _fill(outbox: Outbox) -> tuple[int, TelemetryError]:
    """Add reports until the disk refuses one; return how many were accepted and the error."""
    for i in range(10_000):
        try:
            outbox.add(Result(task="t", data={"i": i, "pad": PAD}), key=f"frame-{i}", wait=True, timeout=10)
        except TelemetryError as exc:
            return i + 1, exc  # the refused commit's report stays queued in memory (its number is taken)
    raise AssertionError("the small filesystem never filled")


def _stored(path: Path) -> tuple[list[int], list[int]]:
    """(seqs, frames) committed: seqs of the rows; frames named both by a receipt and by a row's payload."""
    db = sqlite3.connect(path)
    try:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        if not db.execute("SELECT 1 FROM sqlite_master WHERE name = 'receipts'").fetchall():
            return [], []  # killed before the schema's transaction committed: an empty, valid database
        rows = db.execute("SELECT seq, payload FROM outbox ORDER BY seq").fetchall()
        receipts = sorted(int(k.removeprefix("frame-")) for (k,) in db.execute("SELECT key FROM receipts"))
    finally:
        db.close()
    payload_frames = sorted(json.loads(p)["data"].get("frame", json.loads(p)["data"].get("i")) for _, p in rows)
    assert payload_frames == receipts, "a receipt without its report, or a report twice"
    return [seq for seq, _ in rows], receipts


def test_full_filesystem_clear_error_nothing_lost_recovers_when_space_returns(small_fs: Path) -> None:
    path = small_fs / "outbox.sqlite"
    outbox = Outbox(path, "pi-1", commit_interval_s=0)
    accepted, error = _fill(outbox)
    assert str(error) == (
        f"outbox {path}: cannot store 1 reports (database or disk is full); they are kept in memory and retried "
        "every 1 s"
    )
    with pytest.raises(TelemetryError, match="database or disk is full"):
        outbox.add(Result(task="t", data={}))  # refused while the disk is full: the caller knows
    _remount(small_fs, "size=8m")  # space returns
    outbox.flush(timeout=15)  # the writer's retry commits what waited in memory
    assert outbox.stored_seq == accepted
    outbox.add(Result(task="t", data={"i": accepted, "pad": PAD}), key=f"frame-{accepted}", wait=True)
    outbox.close()
    seqs, frames = _stored(path)
    assert seqs == list(range(1, accepted + 2)) and frames == list(range(accepted + 1))  # no gap, no duplicate


def test_read_only_filesystem_clear_error_nothing_lost_then_recovery(small_fs: Path) -> None:
    """Linux refuses to remount a filesystem read-only while a file on it is open for writing (EBUSY), so
    a disk turns read-only under the outbox only at a (re)start: ext4's errors=remount-ro, an SD card
    that locks itself. The outbox must then refuse to start with one clear line and keep what it holds."""
    path = small_fs / "outbox.sqlite"
    with Outbox(path, "pi-1", commit_interval_s=0) as outbox:
        for i in range(5):
            outbox.add(Result(task="t", data={"i": i}), key=f"frame-{i}", wait=True)
    _remount(small_fs, "ro")
    for name in ("outbox.sqlite", "fresh.sqlite"):
        with pytest.raises(TelemetryError) as info:
            Outbox(small_fs / name, "pi-1")
        assert str(info.value).startswith(f"outbox {small_fs / name}: cannot open as an SQLite database (")
        assert str(info.value).endswith("; its filesystem is mounted read-only)")
    _remount(small_fs, "rw")
    with Outbox(path, "pi-1", commit_interval_s=0) as outbox:
        assert [r.seq for r in outbox.pending()] == [1, 2, 3, 4, 5]
        outbox.add(Result(task="t", data={"i": 5}), key="frame-5", wait=True)
    seqs, frames = _stored(path)
    assert seqs == [1, 2, 3, 4, 5, 6] and frames == [0, 1, 2, 3, 4, 5]


# --- power faults: SIGKILL at random points during commits -----------------------------------------------


def _child(path: Path, seed: int, ready: int) -> None:
    """What the daemon does: take frames in order, skip the ones with a receipt, report the rest."""
    try:
        parent = os.getppid()
        rng = random.Random(seed)
        outbox = Outbox(path, "pi-1", capacity=1_000_000, commit_interval_s=rng.choice([0.0, 0.001, 0.01]))
        # Resume after the stored prefix (the daemon asks per file; asking for thousands of stored frames would
        # keep every kill away from the commits). A gap or a repeat would still show in the payloads below.
        frame = len(outbox.pending(limit=1_000_000))
        os.write(ready, b"1")
        while os.getppid() == parent:  # never outlive the test that kills us
            if not outbox.has_key(f"frame-{frame}"):
                outbox.add(Result(task="t", data={"frame": frame, "pad": PAD[: rng.randrange(0, 500)]}),
                           key=f"frame-{frame}", wait=rng.random() < 0.1)  # fmt: skip
            frame += 1
    finally:
        os._exit(1)


def test_sigkill_at_random_points_never_leaves_a_gap_or_a_duplicate(tmp_path: Path) -> None:
    path = tmp_path / "outbox.sqlite"
    rng = random.Random(17)
    cycles, grew = 200, 0
    last = 0
    for cycle in range(cycles):
        ready_r, ready_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            _child(path, cycle, ready_w)
        os.close(ready_w)
        if rng.random() < 0.15:  # some kills land while the outbox opens (schema, WAL recovery)
            time.sleep(rng.uniform(0.0, 0.03))
        else:  # the rest while reports are added and group-committed (fsync included)
            assert select.select([ready_r], [], [], 30)[0], "the child never opened its outbox"
            time.sleep(rng.uniform(0.0, 0.03))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(ready_r)
        seqs, frames = _stored(path)  # the file always opens and passes integrity_check
        assert seqs == list(range(1, len(seqs) + 1)), f"cycle {cycle}: a gap in {seqs[-5:]}"
        assert frames == list(range(len(frames))) and len(frames) == len(seqs), f"cycle {cycle}: lost or repeated"
        grew += len(seqs) > last
        last = len(seqs)
    print(f"{cycles} SIGKILLs: {last} reports stored, the outbox grew in {grew} cycles")
    assert grew >= cycles // 4  # the kills really landed while reports were being committed


def test_the_daemon_waits_out_a_full_disk_and_loses_nothing(face_fp32_models: Path, tmp_path: Path, caplog) -> None:
    """The disk fills while `serve` runs: frames wait (the daemon stays up), and when space returns every
    photo is reported exactly once."""
    import logging
    import shutil
    import threading

    from converters.facedata import package_dir
    from edge.daemon.config import load_config
    from edge.daemon.service import Daemon

    mnt = tmp_path / "state"
    mnt.mkdir()
    _mount(mnt, "size=2m")
    try:
        photo = package_dir("insightface") / "data" / "images" / "Tom_Hanks_54745.png"
        incoming = tmp_path / "incoming"
        incoming.mkdir()
        config = tmp_path / "edge-deploy.toml"
        config.write_text(
            f'device_id = "pi-full"\nstate_dir = "{mnt}"\n[face]\nmodels = "{face_fp32_models}"\nthreads = 1\n'
            '[source]\npath = "incoming"\nsettle_s = 0\npoll_interval_s = 0.05\n'
            "[telemetry]\ninterval_s = 3600\ncommit_interval_s = 0\n"
        )
        daemon = Daemon(load_config(config))
        runner = threading.Thread(target=daemon.run, daemon=True)
        caplog.set_level(logging.INFO, logger="edge.daemon")
        runner.start()
        shutil.copy(photo, incoming / "a.png")
        _wait(lambda: daemon.summary.frames == 1, "the first photo")
        with open(mnt / "filler", "wb") as fh:  # fill the disk
            try:
                while True:
                    fh.write(bytes(64 << 10))
                    fh.flush()
            except OSError:
                pass
        for name in ("b.png", "c.png"):
            shutil.copy(photo, incoming / name)
        _wait(lambda: "frames and messages wait until the disk takes reports again" in caplog.text, "the wait")
        time.sleep(2.0)
        assert runner.is_alive() and daemon._held  # waiting with the refused result in hand, not crashed
        assert daemon._client.storage_error is not None
        (mnt / "filler").unlink()  # space returns
        _wait(lambda: daemon.summary.frames == 3 and not daemon._held, "the rest")
        daemon.request_stop("test")
        runner.join(30)
        assert not runner.is_alive()
        assert "the outbox stores reports again; going on" in caplog.text
        db = sqlite3.connect(mnt / "outbox.sqlite")
        files = sorted(json.loads(p).get("data", {}).get("file") or "" for (p,) in db.execute("SELECT payload FROM outbox"))
        db.close()
        assert [f for f in files if f] == ["a.png", "b.png", "c.png"]
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True, timeout=30)


def _wait(condition, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
