"""Figures of this process from ``/proc/self/status`` (Linux), for the benchmarks and their child processes."""

from __future__ import annotations

from pathlib import Path


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


def vm_hwm_kib() -> int:
    """Peak resident set size of this process (VmHWM), KiB; -1 where /proc is missing."""
    return proc_status("VmHWM")


def thread_count() -> int:
    """Threads of this process now; -1 where /proc is missing."""
    return proc_status("Threads")
