"""Figures of this process from ``/proc/self/status`` (Linux), for the benchmarks and their child processes, and
how to start such a child."""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def proc_status(field: str) -> int:
    """The first number of ``field`` in ``/proc/self/status`` (e.g. ``VmHWM`` in KiB, ``Threads``); -1 where
    /proc or the field is missing."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    except OSError:
        pass
    return -1


def cpu_seconds(pids: list[int]) -> float:
    """utime + stime of processes, seconds (0 for those gone)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def vm_hwm_kib() -> int:
    """Peak resident set size of this process (VmHWM), KiB; -1 where /proc is missing."""
    return proc_status("VmHWM")


def thread_count() -> int:
    """Threads of this process now; -1 where /proc is missing."""
    return proc_status("Threads")


def resident_files(top: int = 5) -> list[tuple[str, int]]:
    """The ``top`` files mapped into this process with the most resident pages of the file (file name, KiB), from
    ``/proc/self/smaps``: the libraries' code and read-only data the process has touched (a mapping's ``Rss``
    less its ``Anonymous`` pages, the copies written to, which count as RssAnon). Empty where /proc is missing."""
    sizes: dict[str, int] = {}
    name = ""
    try:
        lines = Path("/proc/self/smaps").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        head = line.split()
        if head and "-" in head[0] and ":" not in head[0]:  # a mapping's first line: range perms offset dev inode path
            name = Path(head[5]).name if len(head) > 5 and head[5].startswith("/") else ""
        elif name and line.startswith("Rss:"):
            sizes[name] = sizes.get(name, 0) + int(head[1])
        elif name and line.startswith("Anonymous:"):
            sizes[name] -= int(head[1])
    return sorted(((n, kib) for n, kib in sizes.items() if kib > 0), key=lambda item: -item[1])[:top]


def child_python(module: str) -> list[str]:
    """The command that runs ``module`` (``benchmarks.x``) as a fresh Python process; pass ``child_env()``."""
    return [sys.executable, "-m", module]


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment, plus ``extra``, with the repository first on the child's import path."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, **(extra or {}), "PYTHONPATH": path}
