"""Disk and power faults for the outbox: small tmpfs mounts, filling one, a process to SIGKILL, and the
check of what a killed outbox left. Shared by tests/integration/test_outbox_faults.py and
benchmarks/faults.py (root needed for ``mount``)."""

from __future__ import annotations

import json
import os
import random
import select
import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from edge.errors import TelemetryError
from edge.telemetry.outbox import Outbox
from edge.telemetry.schema import Result

PAD = "x" * 2000  # ~2 KB a report: a 256 KiB filesystem fills after a few


class MountRefused(Exception):
    """``mount`` failed (not root, no CAP_SYS_ADMIN): the caller says so."""


def remount(mnt: Path, options: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{options}", str(mnt)], check=True, capture_output=True, timeout=30)


@contextmanager
def tmpfs(mnt: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted on ``mnt`` (created) for the block; unmounted after it."""
    mnt.mkdir(parents=True, exist_ok=True)
    run = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)], capture_output=True,
                         text=True, timeout=30)  # fmt: skip
    if run.returncode != 0:
        raise MountRefused(f"cannot mount a tmpfs on {mnt} ({run.stderr.strip()}); the disk-fault checks need root")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True, timeout=30)


def fill(outbox: Outbox) -> tuple[int, TelemetryError]:
    """Add reports until the disk refuses one; return how many were accepted and the error."""
    for i in range(10_000):
        try:
            outbox.add(Result(task="t", data={"i": i, "pad": PAD}), key=f"frame-{i}", wait=True, timeout=10)
        except TelemetryError as exc:
            return i + 1, exc  # the refused commit's report stays queued in memory (its number is taken)
    raise AssertionError("the small filesystem never filled")


def stored(path: Path) -> tuple[list[int], list[int]]:
    """(seqs, frames) committed: seqs of the rows; frames named both by a receipt and by a row's payload.

    Raises:
        AssertionError: the file fails ``PRAGMA integrity_check``, or receipts and reports disagree.
    """
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


def _child(path: Path, seed: int, ready: int) -> None:
    """What the daemon does: take frames in order, skip the ones with a receipt, report the rest."""
    try:
        parent = os.getppid()
        rng = random.Random(seed)
        outbox = Outbox(path, "pi-1", capacity=1_000_000, commit_interval_s=rng.choice([0.0, 0.001, 0.01]))
        # Resume after the stored prefix (the daemon asks per file; asking for thousands of stored frames would
        # keep every kill away from the commits). A gap or a repeat would still show in ``stored``.
        frame = len(outbox.pending(limit=1_000_000))
        os.write(ready, b"1")
        while os.getppid() == parent:  # never outlive the process that kills us
            if not outbox.has_key(f"frame-{frame}"):
                outbox.add(Result(task="t", data={"frame": frame, "pad": PAD[: rng.randrange(0, 500)]}),
                           key=f"frame-{frame}", wait=rng.random() < 0.1)  # fmt: skip
            frame += 1
    finally:
        os._exit(1)


def kill_once(path: Path, cycle: int, rng: random.Random) -> None:
    """Start a reporting process on ``path`` and SIGKILL it at a random point: 15 % while it opens the
    outbox (schema, WAL recovery), the rest while it adds and group-commits reports (fsync included)."""
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        _child(path, cycle, ready_w)
    os.close(ready_w)
    try:
        if rng.random() >= 0.15:
            assert select.select([ready_r], [], [], 30)[0], "the child never opened its outbox"
        time.sleep(rng.uniform(0.0, 0.03))
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(ready_r)
