"""Refuse, before any set-up, to start a job the disk cannot hold, and say what it needs and where.

Usage: ``python3 scripts/disk_space.py demo|tests [--subset]`` (scripts/demo.sh and scripts/test.sh run it first).
Exit 0 when every disk has room, 1 with a report on stderr when one has not, 2 on a wrong argument.

A full test run writes converted models, bundles and wheelhouses into pytest's temporary folders: 8.9 GB at
its peak (measured below). Without a check, a disk with less free ends the run 20 minutes in with hundreds of
``No space left on device`` errors and no word of what was needed; this says it in a second. What the job
installs (venvs, the emulated Pi's rootfs, the browser's packages) is counted only while it is missing, and
the temporary folders are counted on the disk that holds ``TMPDIR`` (or /tmp), where pytest puts them.
``--subset`` (scripts/test.sh passes it when given pytest arguments) leaves the full run's peak out.

Sizes were measured on 2026-12-07 at commit 953accc (x86-64, Python 3.11) in a new checkout: each folder
with ``du -sm FOLDER`` after ``bash scripts/demo.sh`` and ``bash scripts/test.sh``; the peak as the largest
of ``du -sm /tmp/pytest-of-$USER``, taken every 20 s while ``bash scripts/test.sh`` ran (1,384 tests), and
the same 8,853 MB again in a fresh clone's ``bash .ci/run`` at 751b317 (1,389 tests). Debian packages
(qemu, Chromium; about 1 GB, installed by the set-up scripts) go to the system disk and are not counted.
Stdlib only: it runs before the venv exists.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

MB = 1_000_000
GB = 1_000 * MB
#: Room asked beyond the measured sizes: pip's and npm's downloads while they install, logs, run-to-run spread.
MARGIN = 0.10


@dataclass(frozen=True)
class Need:
    """``size`` bytes that a job writes into ``path``, and what they are."""

    path: Path
    size: int
    what: str


#: What each job installs into the project folder, counted while missing: (folder, bytes, what it is).
INSTALLS = {
    ".venv": (2_403 * MB, ".venv, the main venv (scripts/setup.sh)"),
    ".cache/arm/rootfs": (684 * MB, "the emulated Pi's Debian rootfs, with the demo's wheels (scripts/arm/rootfs.sh)"),
    "out/demo": (245 * MB, "the demo's models, bundle and report (out/demo)"),
    ".venv-onnx2tf": (2_573 * MB, ".venv-onnx2tf, the TFLite converter (scripts/setup_onnx2tf.sh)"),
    ".venv-litert-torch": (2_148 * MB, ".venv-litert-torch, the language model's TFLite converter"),
    "web/node_modules": (148 * MB, "web/node_modules, onnxruntime-web for the browser (scripts/setup_web.sh)"),
    ".cache/web": (518 * MB, ".cache/web, the browser tests' built pages"),
    ".cache/test_build": (153 * MB, ".cache/test_build, the bundle tests' wheel cache"),
}
JOBS = {
    "demo": (".venv", ".cache/arm/rootfs", "out/demo"),
    "tests": (
        ".venv",
        ".cache/arm/rootfs",
        ".venv-onnx2tf",
        ".venv-litert-torch",
        "web/node_modules",
        ".cache/web",
        ".cache/test_build",
    ),
}
#: The full test run's temporary folders at their peak; pytest removes them when the run passes (pyproject.toml).
SUITE_PEAK = 8_853 * MB


def needs(job: str, repo: Path, tmp: Path, *, subset: bool = False) -> list[Need]:
    """What ``job`` still has to write, folder by folder: the installs it lacks, and for a full test run the
    temporary folders' peak in ``tmp``."""
    if job not in JOBS:
        raise ValueError(f"job {job!r}: expected one of {', '.join(JOBS)}")
    out = []
    for rel in JOBS[job]:
        if not (repo / rel).exists():
            size, what = INSTALLS[rel]
            out.append(Need(repo / rel, size, f"{what}: not there yet"))
    if job == "tests" and not subset:
        what = "the suite's temporary folders at their peak (pytest removes them when the run passes)"
        out.append(Need(tmp, SUITE_PEAK, f"{what}, in {tmp}"))
    return out


def _device(path: Path) -> tuple[int, Path]:
    """The filesystem a path is (or would be) on, and the nearest existing folder that tells it."""
    while not path.exists():
        path = path.parent
    return os.stat(path).st_dev, path


def shortfalls(wanted: list[Need], free=lambda p: shutil.disk_usage(p).free) -> list[str]:
    """One report for each disk without room for what ``wanted`` puts there (plus ``MARGIN``)."""
    by_disk: dict[int, tuple[Path, list[Need]]] = {}
    for need in wanted:
        dev, where = _device(need.path)
        by_disk.setdefault(dev, (where, []))[1].append(need)
    reports = []
    for where, group in by_disk.values():
        total = round(sum(n.size for n in group) * (1 + MARGIN))
        have = free(where)
        if have < total:
            lines = [f"  {n.size / GB:5.1f} GB  {n.what}" for n in group]
            head = f"{where} is on a disk with {have / GB:.1f} GB free; this needs {total / GB:.1f} GB there"
            reports.append("\n".join([f"{head} (the sizes below plus {MARGIN:.0%}):", *lines]))
    return reports


def main(argv: list[str]) -> int:
    args, subset = [a for a in argv if a != "--subset"], "--subset" in argv
    if len(args) != 1 or args[0] not in JOBS:
        print(f"usage: python3 scripts/disk_space.py {'|'.join(JOBS)} [--subset]", file=sys.stderr)
        return 2
    repo = Path(__file__).resolve().parent.parent
    reports = shortfalls(needs(args[0], repo, Path(tempfile.gettempdir()), subset=subset))
    if not reports:
        return 0
    print(f"not enough free disk for the {args[0]}:", file=sys.stderr)
    print("\n".join(reports), file=sys.stderr)
    advice = "Free some space, or clone the project onto a disk with room"
    if args[0] == "tests" and not subset:
        advice += ", or set TMPDIR to a folder on a disk with room (pytest's temporary folders go there)"
    print(advice + ".", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
