"""Disk and power faults under the durable outbox, measured: a full tmpfs, a read-only one, repeated SIGKILL.

The same scenarios as tests/integration/test_outbox_faults.py (which asserts them on every CI run), run
here with their figures written to docs/benchmarks.md. Needs root (it mounts small tmpfs filesystems).

    .venv/bin/python -m benchmarks run faults                 # 1,000 SIGKILL cycles; writes docs/benchmarks.md
    .venv/bin/python -m benchmarks run faults --kills 200 --no-write
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.harness.report import machine_line, write_section
from edge.errors import TelemetryError
from edge.telemetry.outbox import Outbox
from edge.telemetry.schema import Result
from testsupport.faults import fill, kill_once, remount, stored, tmpfs

NAME = "faults"
SUMMARY = "Disk and power faults under the durable outbox (root: tmpfs mounts)"
#: the docs/benchmarks.md sections it writes
SECTIONS = ("faults",)

REPO = Path(__file__).resolve().parent.parent


def full_disk(work: Path) -> dict:
    """Fill a 256 KiB tmpfs through the outbox, then give it space: what was refused, how fast it recovers."""
    with tmpfs(work / "full", "256k") as mnt:
        path = mnt / "outbox.sqlite"
        outbox = Outbox(path, "pi-1", commit_interval_s=0)
        accepted, error = fill(outbox)
        start = time.monotonic()
        remount(mnt, "size=8m")
        outbox.flush(timeout=30)
        recovered_s = time.monotonic() - start
        outbox.close()
        seqs, frames = stored(path)
        gapless = seqs == list(range(1, len(seqs) + 1)) and len(frames) == len(seqs)
        error_text = str(error).replace(str(path), "OUTBOX")
        return {"accepted": accepted, "error": error_text, "recovered_s": recovered_s, "stored": len(seqs),
                "gapless": gapless}  # fmt: skip


def read_only(work: Path) -> dict:
    """Open an outbox on a filesystem that came up read-only; then read-write again."""
    with tmpfs(work / "ro", "1m") as mnt:
        path = mnt / "outbox.sqlite"
        with Outbox(path, "pi-1", commit_interval_s=0) as outbox:
            for i in range(5):
                outbox.add(Result(task="t", data={"i": i}), key=f"frame-{i}", wait=True)
        remount(mnt, "ro")
        try:
            Outbox(path, "pi-1")
            error = "(opened: no error)"
        except TelemetryError as exc:
            error = str(exc).replace(str(path), "OUTBOX")
        remount(mnt, "rw")
        with Outbox(path, "pi-1") as outbox:
            kept = len(outbox.pending())
        return {"error": error, "kept": kept}


def kills(work: Path, cycles: int, seed: int = 17) -> dict:
    """SIGKILL a reporting process ``cycles`` times at random points; check the file after each kill."""
    path = work / "kill" / "outbox.sqlite"
    path.parent.mkdir()
    rng = random.Random(seed)
    grew = last = bad = 0
    start = time.monotonic()
    for cycle in range(cycles):
        kill_once(path, cycle, rng)
        try:
            seqs, frames = stored(path)
            bad += not (seqs == list(range(1, len(seqs) + 1)) and frames == list(range(len(frames))))
        except (AssertionError, OSError) as exc:  # a damaged file or a receipt without its report
            print(f"cycle {cycle}: {exc}", file=sys.stderr)
            seqs, bad = [], bad + 1
        grew += len(seqs) > last
        last = len(seqs)
    return {"cycles": cycles, "stored": last, "grew": grew, "bad": bad, "seconds": time.monotonic() - start}


def report(full: dict, ro: dict, k: dict, command: str) -> str:
    gapless = "yes" if full["gapless"] else "NO"
    return f"""## Disk and power faults under the outbox

`{command}` — {machine_line()}. Real SQLite (WAL, `synchronous=FULL`) on small tmpfs mounts.

- **Full filesystem** (256 KiB tmpfs, ~2 KB reports): {full["accepted"] - 1} reports stored, then
  `{full["error"]}`. While the disk was full, `add` refused new reports with that error; the refused
  commit's report stayed queued in memory. After the mount grew to 8 MiB, the writer's next try (it
  retries every 1 s; a `flush` wakes it at once) stored it {full["recovered_s"]:.2f} s after the remount
  began. {full["stored"]} reports on disk, numbered without a gap: {gapless}.
- **Read-only filesystem at start**: `{ro["error"]}`. After remounting read-write, all {ro["kept"]}
  stored reports were still there.
- **SIGKILL at random points** (opening, adding, mid-commit): {k["cycles"]} kills in {k["seconds"]:.0f} s;
  {k["stored"]:,} reports stored; the store grew in {k["grew"]} cycles. After every kill the file opened and
  passed `PRAGMA integrity_check`. Cycles with a gap, a repeat or a receipt without its report: {k["bad"]}.

Linux refuses to remount a filesystem read-only while a file on it is open for writing (EBUSY), so a disk
turns read-only under a running outbox only through ext4's `errors=remount-ro` or a failing SD card; that
case was not reproduced here. The daemon itself rides out a full disk (tests/integration/test_outbox_faults.py:
it holds the refused result, takes no new frame, and goes on when space returns).
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=1000)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="edge-deploy-faults-") as tmp:
        work = Path(tmp)
        full, ro, k = full_disk(work), read_only(work), kills(work, args.kills)
    command = "python -m benchmarks run faults" + ("" if args.kills == 1000 else f" --kills {args.kills}")
    text = report(full, ro, k, command)
    print(text)
    if not args.no_write:
        write_section("faults", text)
    return 0 if full["gapless"] and k["bad"] == 0 else 1
