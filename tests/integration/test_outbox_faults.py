"""Disk and power faults under the durable outbox (issue 17): a full filesystem, a read-only one, and
SIGKILL at random points during commits. Real filesystems (a small tmpfs mounted for the test), real SQLite.

Needs root (``mount -t tmpfs``); where mount is refused the tests fail, saying why.
"""

from __future__ import annotations

import json
import random
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from edge.errors import TelemetryError
from edge.telemetry.outbox import Outbox
from edge.telemetry.schema import Result
from testsupport.faults import PAD, MountRefused, fill, kill_once, remount, stored, tmpfs

pytestmark = pytest.mark.integration


@contextmanager
def _tmpfs(mnt: Path, size: str) -> Iterator[Path]:
    try:
        with tmpfs(mnt, size) as mounted:
            yield mounted
    except MountRefused as exc:
        pytest.fail(str(exc), pytrace=False)  # a fault check that cannot run has not passed


@pytest.fixture()
def small_fs(tmp_path: Path):
    with _tmpfs(tmp_path / "mnt", "256k") as mnt:
        yield mnt


def test_full_filesystem_clear_error_nothing_lost_recovers_when_space_returns(small_fs: Path) -> None:
    path = small_fs / "outbox.sqlite"
    outbox = Outbox(path, "pi-1", commit_interval_s=0)
    accepted, error = fill(outbox)
    assert str(error) == (
        f"outbox {path}: cannot store 1 reports (database or disk is full); they are kept in memory and retried "
        "every 1 s"
    )
    with pytest.raises(TelemetryError, match="database or disk is full"):
        outbox.add(Result(task="t", data={}))  # refused while the disk is full: the caller knows
    remount(small_fs, "size=8m")  # space returns
    outbox.flush(timeout=15)  # the writer's retry commits what waited in memory
    assert outbox.stored_seq == accepted
    outbox.add(Result(task="t", data={"i": accepted, "pad": PAD}), key=f"frame-{accepted}", wait=True)
    outbox.close()
    seqs, frames = stored(path)
    assert seqs == list(range(1, accepted + 2)) and frames == list(range(accepted + 1))  # no gap, no duplicate


def test_read_only_filesystem_clear_error_nothing_lost_then_recovery(small_fs: Path) -> None:
    """Linux refuses to remount a filesystem read-only while a file on it is open for writing (EBUSY), so
    a disk turns read-only under the outbox only at a (re)start: ext4's errors=remount-ro, an SD card
    that locks itself. The outbox must then refuse to start with one clear line and keep what it holds."""
    path = small_fs / "outbox.sqlite"
    with Outbox(path, "pi-1", commit_interval_s=0) as outbox:
        for i in range(5):
            outbox.add(Result(task="t", data={"i": i}), key=f"frame-{i}", wait=True)
    remount(small_fs, "ro")
    for name in ("outbox.sqlite", "fresh.sqlite"):
        with pytest.raises(TelemetryError) as info:
            Outbox(small_fs / name, "pi-1")
        assert str(info.value).startswith(f"outbox {small_fs / name}: cannot open as an SQLite database (")
        assert str(info.value).endswith("; its filesystem is mounted read-only)")
    remount(small_fs, "rw")
    with Outbox(path, "pi-1", commit_interval_s=0) as outbox:
        assert [r.seq for r in outbox.pending()] == [1, 2, 3, 4, 5]
        outbox.add(Result(task="t", data={"i": 5}), key="frame-5", wait=True)
    seqs, frames = stored(path)
    assert seqs == [1, 2, 3, 4, 5, 6] and frames == [0, 1, 2, 3, 4, 5]


# --- power faults: SIGKILL at random points during commits -----------------------------------------------


def test_sigkill_at_random_points_never_leaves_a_gap_or_a_duplicate(tmp_path: Path) -> None:
    path = tmp_path / "outbox.sqlite"
    rng = random.Random(17)
    cycles, grew = 200, 0
    last = 0
    for cycle in range(cycles):
        kill_once(path, cycle, rng)
        seqs, frames = stored(path)  # the file always opens and passes integrity_check
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

    from converters.face.facedata import package_dir
    from edge.daemon.config import load_config
    from edge.daemon.service import Daemon

    with _tmpfs(tmp_path / "state", "2m") as mnt:
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
        payloads = [json.loads(p) for (p,) in db.execute("SELECT payload FROM outbox")]
        db.close()
        assert sorted(p["data"]["file"] for p in payloads if "file" in p.get("data", {})) == ["a.png", "b.png", "c.png"]


def _wait(condition, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
