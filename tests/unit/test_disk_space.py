"""scripts/disk_space.py: demo.sh and test.sh refuse at once, naming what they need where, when a disk is short
(stop 39's CI ended with "No space left on device" in hundreds of tests, 23 minutes in)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "disk_space.py"
_spec = importlib.util.spec_from_file_location("disk_space", SCRIPT)
assert _spec is not None and _spec.loader is not None
disk_space = importlib.util.module_from_spec(_spec)
sys.modules["disk_space"] = disk_space  # dataclasses look their module up there
_spec.loader.exec_module(disk_space)


def test_a_fresh_clone_needs_every_install_and_the_suite_peak(tmp_path: Path) -> None:
    repo, tmp = tmp_path / "ed", tmp_path / "tmp"
    repo.mkdir()
    wanted = disk_space.needs("tests", repo, tmp)
    assert [n.path for n in wanted] == [repo / rel for rel in disk_space.JOBS["tests"]] + [tmp]
    assert wanted[-1].size == disk_space.SUITE_PEAK
    assert all(n.what.endswith(": not there yet") for n in wanted[:-1])
    demo = disk_space.needs("demo", repo, tmp)
    assert [n.path for n in demo] == [repo / ".venv", repo / ".cache/arm/rootfs", repo / "out/demo"]


def test_what_is_installed_is_not_counted_and_a_subset_leaves_out_the_peak(tmp_path: Path) -> None:
    for rel in disk_space.JOBS["tests"]:
        (tmp_path / rel).mkdir(parents=True)
    assert disk_space.needs("tests", tmp_path, tmp_path, subset=True) == []
    assert [n.size for n in disk_space.needs("tests", tmp_path, tmp_path)] == [disk_space.SUITE_PEAK]


def test_an_unknown_job_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"job 'bench': expected one of demo, tests"):
        disk_space.needs("bench", tmp_path, tmp_path)
    run = subprocess.run([sys.executable, str(SCRIPT), "bench"], capture_output=True, text=True, timeout=30)
    assert (run.returncode, run.stderr) == (2, "usage: python3 scripts/disk_space.py demo|tests [--subset]\n")


def test_a_short_disk_gets_a_report_that_names_it_and_each_need(tmp_path: Path) -> None:
    wanted = disk_space.needs("demo", tmp_path, tmp_path)
    total = sum(n.size for n in wanted)
    # enough for the sizes but not for the margin: refused; enough for both: no report
    (report,) = disk_space.shortfalls(wanted, free=lambda p: total)
    need = round(total * 1.1) / 1e9
    assert report.splitlines()[0] == (
        f"{tmp_path} is on a disk with {total / 1e9:.1f} GB free; this needs {need:.1f} GB there "
        "(the sizes below plus 10%):"
    )
    assert report.splitlines()[1:] == [f"  {n.size / 1e9:5.1f} GB  {n.what}" for n in wanted]
    assert disk_space.shortfalls(wanted, free=lambda p: round(total * 1.1)) == []


def test_each_disk_is_judged_on_what_goes_onto_it(tmp_path: Path) -> None:
    # a folder on another filesystem than tmp_path: /dev/shm (tmpfs) where it is one, else /proc (always one)
    others = [
        p for p in (Path("/dev/shm"), Path("/proc")) if p.is_dir() and os.stat(p).st_dev != os.stat(tmp_path).st_dev
    ]
    assert others, f"neither /dev/shm nor /proc is on a filesystem other than {tmp_path}'s"
    other = others[0]
    wanted = disk_space.needs("tests", tmp_path / "ed", other)  # installs under tmp_path, the peak on the other
    reports = disk_space.shortfalls(wanted, free=lambda p: 0)
    assert [r.split(" is on a disk")[0] for r in reports] == [str(tmp_path), str(other)]
    assert reports[1].endswith(f"(pytest removes them when the run passes), in {other}")
