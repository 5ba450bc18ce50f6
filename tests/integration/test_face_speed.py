"""The face speed race on real models: its correctness check, its rounds and its peak-RSS processes.

Builds the fp32 face models once (about a minute); the INT8 and TFLite builds are covered by their own
tests (test_face_quant, the TFLite tests). Nothing here asserts a time.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from benchmarks import face_speed as fs
from benchmarks.harness.face_speed_models import CHILD, build_fp32, eval_photos, real_chips
from benchmarks.harness.procstat import child_env, child_python
from edge.profiles import load_profile

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def fp32_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_fp32(tmp_path_factory.mktemp("bench"))


@pytest.fixture(scope="module")
def chips(fp32_dir: Path) -> np.ndarray:
    return real_chips(fp32_dir, eval_photos(), 6)


@pytest.fixture(scope="module")
def contenders(fp32_dir: Path, chips: np.ndarray):
    from converters.face.reference import dlib_model_path

    onnx = fp32_dir / "face_embedder.onnx"
    made = [fs._dlib_contender(dlib_model_path("embedder"))]
    made += [fs._ours_contender("ORT fp32", "onnxruntime", "fp32", onnx, t) for t in (1, 2)]
    yield made
    for c in made:
        c.close()


def test_chips_are_real_aligned_faces(chips: np.ndarray) -> None:
    assert chips.shape == (6, 150, 150, 3) and chips.dtype == np.uint8
    assert len({c.tobytes() for c in chips}) == 6  # six different faces, not one repeated
    assert all(c.std() > 20 for c in chips)  # photos, not flat images


def test_ort_fp32_matches_dlib_and_a_wrong_model_fails_the_gate(contenders, chips: np.ndarray) -> None:
    profile = load_profile("rpi4")
    dlib, ort1, _ = contenders
    broken = fs.Contender(
        "ORT INT8", "onnxruntime", "int8", 1, lambda chip: ort1.describe(chip) + np.float32(0.05), lambda: None, None
    )
    checks = fs.check_all([*contenders, broken], chips, profile, quant_passed=True)
    assert checks["dlib"]["gate"] == "reference"
    for label in ("ORT fp32 ×1", "ORT fp32 ×2"):
        assert checks[label]["gate_passed"], checks[label]
        assert checks[label]["max_abs_diff"] < 1e-4
        assert checks[label]["decision_agreement"] == 1.0
    assert not checks["ORT INT8 ×1"]["gate_passed"]
    assert checks["ORT INT8 ×1"]["gate"].startswith("cos 0.")


def test_race_times_every_chip_of_every_round(contenders, chips: np.ndarray) -> None:
    for c in contenders:
        c.times_ms.clear()
        c.cpu_s = c.wall_s = 0.0
    lines: list[str] = []
    fs.race(contenders, chips, 2, lines.append)
    assert lines == ["round 1/2 done", "round 2/2 done"]
    checks = {c.label: {"gate_passed": True} for c in contenders}
    rows = fs.speed_rows(contenders, checks)
    assert [r["samples"] for r in rows] == [12, 12, 12]
    assert rows[0]["speedup_vs_dlib"] == 1.0
    assert rows[1]["vs_fp32"] == 1.0  # ORT fp32 is its own fp32 twin
    assert all(r["ms"] > 0 and r["q1"] <= r["ms"] <= r["q3"] for r in rows)


def test_peak_rss_child_runs_the_pipeline(fp32_dir: Path, tmp_path: Path) -> None:
    photos = [rgb for _name, rgb in eval_photos(2)]
    npz = tmp_path / "photos.npz"
    np.savez(npz, **{f"p{i}": p for i, p in enumerate(photos)})
    out = {}
    for kind, extra in (("baseline", []), ("pipeline", ["--folder", str(fp32_dir)])):
        done = subprocess.run(
            [*child_python(CHILD), kind, str(npz), *extra], capture_output=True, text=True, timeout=300, env=child_env()
        )
        assert done.returncode == 0, done.stderr
        out[kind] = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["baseline"]["faces"] == 0
    assert out["pipeline"]["faces"] >= 2 and out["pipeline"]["photos"] == 2
    # the pipeline's process holds the models and their buffers on top of the same imports
    assert out["pipeline"]["vmhwm_kib"] > out["baseline"]["vmhwm_kib"] + 20 * 1024
