"""The face speed race's arithmetic and write-up (no models, no timing): benchmarks/face_speed*.py."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks import face_speed as fs
from benchmarks.harness import face_speed_report as report
from edge.profiles import load_profile


def _contender(name: str, runtime: str, precision: str, threads: int | None) -> fs.Contender:
    return fs.Contender(name, runtime, precision, threads, lambda chip: chip, lambda: None, model=None)


def _unit(rng: np.random.Generator, n: int) -> np.ndarray:
    v = rng.standard_normal((n, 128))
    return (v / np.linalg.norm(v, axis=1, keepdims=True) * 0.5).astype(np.float32)


def test_agreement_of_identical_descriptors_is_exact() -> None:
    ref = _unit(np.random.default_rng(0), 5)
    a = fs.agreement(ref, ref.copy())
    assert a["chips"] == 5 and a["pairs"] == 10
    assert a["max_abs_diff"] == 0.0 and a["max_distance"] == 0.0
    assert a["min_cosine"] == pytest.approx(1.0, abs=1e-12)
    assert a["decision_agreement"] == 1.0 and a["flips"] == []


def test_agreement_counts_flipped_decisions() -> None:
    # chips 0 and 1 are the same person for dlib (distance 0.5); ours pulls them apart (0.7): one pair of 3 flips.
    ref = np.zeros((3, 128), np.float32)
    ref[:, 2] = 1.0
    ref[0, 0], ref[1, 0], ref[2, 1] = 0.0, 0.5, 5.0
    got = ref.copy()
    got[1, 0] = 0.7
    a = fs.agreement(ref, got)
    assert a["pairs"] == 3
    assert a["decision_agreement"] == pytest.approx(2 / 3)
    assert a["flips"] == [{"chips": [0, 1], "dlib_distance": 0.5, "distance": pytest.approx(0.7)}]
    assert a["max_abs_diff"] == pytest.approx(0.2, abs=1e-6)


def test_gate_fp32_uses_the_profiles_max_abs_diff() -> None:
    profile = load_profile("rpi4")
    c = _contender("ORT fp32", "onnxruntime", "fp32", 1)
    ok = {"max_abs_diff": 5e-5, "mean_cosine": 1.0, "decision_agreement": 1.0}
    assert fs.gate(c, ok, profile, True) == (True, "max|diff| <= 0.0001")
    assert fs.gate(c, {**ok, "max_abs_diff": 2e-4}, profile, True) == (False, "max|diff| > 0.0001")


def test_gate_int8_lists_every_miss() -> None:
    profile = load_profile("rpi4")
    c = _contender("ORT INT8", "onnxruntime", "int8", 2)
    bad = {"max_abs_diff": 0.1, "mean_cosine": 0.99, "decision_agreement": 0.98}
    assert fs.gate(c, bad, profile, False) == (
        False,
        "cos 0.99000 < 0.995; decisions 0.9800 < 0.995; quantize_face_models gate failed",
    )
    good = {"max_abs_diff": 0.01, "mean_cosine": 0.999, "decision_agreement": 1.0}
    litert = _contender("LiteRT INT8", "litert", "int8", 1)
    # the ORT build's gate does not bear on the LiteRT file
    assert fs.gate(litert, good, profile, False) == (True, "cos >= 0.995, decisions >= 0.995")


def _row(label: str, threads: int | None, ms: float, passed: bool = True) -> dict:
    return {
        "label": label,
        "name": label.split(" ×")[0],
        "threads": threads,
        "ms": ms,
        "q1": ms * 0.9,
        "q3": ms * 1.1,
        "load_ms": 10.0,
        "first_ms": ms * 2,
        "speedup_vs_dlib": 100.0 / ms,
        "vs_fp32": 1.0,
        "max_abs_diff": 1e-7,
        "min_cosine": 1.0,
        "decision_agreement": 1.0,
        "pairs": 190,
        "gate_passed": passed,
        "gate": "x",
        "samples": 200,
    }


def test_best_passing_skips_dlib_and_failed_gates() -> None:
    rows = [_row("dlib", None, 100.0), _row("ORT INT8 ×2", 2, 5.0, passed=False), _row("LiteRT fp32 ×2", 2, 15.0)]
    assert report.best_passing(rows)["label"] == "LiteRT fp32 ×2"
    assert report.best_passing(rows[:2]) is None


def test_goals_report_values_and_verdicts() -> None:
    rows = [_row("dlib", None, 100.0), _row("LiteRT fp32 ×2", 2, 25.0)]
    sizes = {
        "embedder": {"ONNX fp32": 1000, "ONNX INT8 (QDQ)": 260, "TFLite fp32": 1000, "TFLite INT8": 300},
        "folder_fp32": 2000,
        "folder_int8": 1000,
    }
    rss = {
        report.BASELINE_RSS: {"vmhwm_kib": 50 * 1024},
        report.FP32_RSS: {"vmhwm_kib": 150 * 1024},
        report.INT8_RSS: {"vmhwm_kib": 100 * 1024},
        report.EMB_FP32_RSS: {"vmhwm_kib": 80 * 1024},
        report.EMB_INT8_RSS: {"vmhwm_kib": 60 * 1024},
    }
    lines, summary = report.goals(rows, sizes, rss)
    assert lines[0] == (
        "- Speed, goal ≥ 5× dlib with the gate passing: fastest passing: **LiteRT fp32 ×2**, 25.00 ms vs dlib "
        "100.00 ms = 4.00× — **not met**."
    )
    assert lines[1] == "- Size, goal INT8 ≤ 0.27× fp32: ONNX 0.260×, TFLite 0.300× — **not met**."
    assert lines[2] == (
        "- Peak RSS, goal INT8 pipeline ≤ 0.6× fp32: 100.0 / 150.0 MiB = 0.667× — **not met** (above the "
        "no-model baseline of 50.0 MiB: 0.500×; a process with the embedder alone: 0.750×)."
    )
    assert summary["best_speedup"] == 4.0 and summary["rss_ratio_above_baseline"] == 0.5


def test_speed_table_has_a_row_per_contender() -> None:
    rows = [_row("dlib", None, 100.0), _row("ORT fp32 ×1", 1, 20.0, passed=False)]
    table = report.speed_table(rows)
    assert len(table) == 4
    assert table[2].startswith("| dlib | own (see below) | 10 | 200.0 | 100.00 | 90.00–110.00 | 1.00 |")
    assert "| **FAIL** (x) |" in table[3]


def test_bad_arguments_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        fs.main(["--chips", "1"])
    assert exc.value.code == 2
    assert "error: --rounds and --rss-photos must be >= 1 and --chips >= 2" in capsys.readouterr().err


def test_flip_lines_and_load_note() -> None:
    row = {**_row("LiteRT INT8 ×1", 1, 6.0), "flips": [{"chips": [3, 9], "dlib_distance": 0.5987, "distance": 0.6012}]}
    assert report.flip_lines([_row("dlib", None, 100.0), row]) == [
        "- LiteRT INT8 ×1 decides 1 pair(s) otherwise than dlib (threshold 0.6): chips 3–9: dlib 0.5987, ours 0.6012."
    ]
    assert report.load_note(1.5, 2) == ""
    assert report.load_note(8.2, 2).startswith("The 1-minute load average was 8.2 on 2 cores during this run")
