"""benchmarks/face_rss.py's write-up on made-up peaks, and benchmarks/harness/procstat.py's resident files of this very
process (read from /proc, no model loaded)."""

from __future__ import annotations

import numpy as np

from benchmarks import face_rss
from benchmarks.harness.procstat import proc_status, resident_files


def _row(peak_mib: float, files_mib: float, cpu_s: float = 2.0) -> dict:
    return {
        "faces": 1,
        "run_cpu_s": cpu_s,
        "vmhwm_kib": int(peak_mib * 1024),
        "rss_file_kib": int(files_mib * 1024),
        "resident_files_kib": [("cv2.abi3.so", 38_000), ("libpython3.11.so.1.0", 5_000)],
    }


def _result(int8_peak: float) -> dict:
    rows = {"baseline": _row(100, 70)}
    for label in face_rss.DETECTORS:
        rows[f"fp32, {label}"] = _row(200, 100)
        rows[f"INT8 (rpi4), {label}"] = _row(int8_peak, 100)
    rows[f"fp32, MTCNN, {face_rss.MMAP_LABEL}"] = _row(150, 100, 3.0)
    rows[f"INT8 (rpi4), MTCNN, {face_rss.MMAP_LABEL}"] = _row(120, 100, 3.0)
    return {"target": "rpi4", "photos": 2, "repeats": 1, "rows": rows, "fp32_model_kib": 32 * 1024}


def test_the_goal_line_names_the_libraries_pages_and_the_floor_they_set():
    text = face_rss.markdown(_result(180), "cmd", "machine").splitlines()
    assert "| INT8 (rpi4), MTCNN | 1 | 180.0 | 80.0 | 100.0 | 30.0 | 2.00 |" in text
    line = next(s for s in text if s.startswith("- MTCNN:"))
    assert "180.0 / 200.0 MiB = 0.900× — **not met**" in line
    assert "they take 80.0 MiB, 30.0 MiB of it the libraries' pages the run touched" in line
    # (100 + 30) / 200: more than 0.6 before any model memory
    assert line.endswith("would still be 0.650× fp32's peak: the goal is out of reach with these libraries.")
    most = next(s for s in text if s.startswith("- What INT8 weights can save at most"))
    assert "is 32.0 MiB; held once, in a quarter of the bytes, they would save 24.0 MiB" in most
    # (200 - 24) / 200 for every detector: the fp32 peaks are made up equal
    assert "stays at or above MTCNN 0.880×, BlazeFace full range tiled 0.880×, BlazeFace full range 0.880×" in most
    lever = next(s for s in text if s.startswith("- A lever measured, not taken"))
    assert "MTCNN's peak goes fp32 200.0 → 150.0 MiB at 1.50× the CPU time; INT8 (rpi4) 180.0 → 120.0 MiB" in lever
    assert lever.endswith("INT8 / fp32 0.800×. No profile sets it.")
    assert text[-1].startswith("- The files with the most resident pages at the end of the INT8 BlazeFace full range")
    assert text[-1].endswith("`cv2.abi3.so` 37.1, `libpython3.11.so.1.0` 4.9.")


def test_a_floor_under_the_goal_is_said_to_be_within_reach():
    result = _result(110)
    for row in result["rows"].values():
        row["rss_file_kib"] = 70 * 1024  # no library pages beyond the baseline's
    line = next(s for s in face_rss.markdown(result, "cmd", "m").splitlines() if s.startswith("- MTCNN:"))
    assert "110.0 / 200.0 MiB = 0.550× — met" in line and line.endswith("the goal is within reach.")


def test_resident_files_are_this_processs_mapped_files_largest_first():
    np.ones(1)  # numpy's core module is mapped and touched
    files = resident_files(top=50)
    assert files == sorted(files, key=lambda item: -item[1])
    assert all("/" not in name and kib > 0 for name, kib in files)
    assert any(name.startswith("_multiarray_umath") for name, _ in files)
    assert sum(kib for _, kib in files) <= proc_status("RssFile")


def test_model_kib_counts_the_weight_files_only(tmp_path):
    (tmp_path / "a.onnx").write_bytes(b"x" * 4096)
    (tmp_path / "b.npz").write_bytes(b"x" * 2048)
    (tmp_path / "report.md").write_bytes(b"x" * 8192)
    assert face_rss.model_kib(tmp_path) == 6
