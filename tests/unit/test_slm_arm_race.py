"""Pure helpers of the SmolLM2 ARM race (benchmarks/slm_arm_race.py): no guest, no models."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.slm_arm_race import model_mb


def test_model_mb_is_the_file_the_device_runs_with_its_external_data(tmp_path: Path) -> None:
    spec = {"model_file": "model.onnx", "litert_file": "model_fp32.tflite", "runtime": "onnxruntime"}
    (tmp_path / "generation.json").write_text(json.dumps(spec))
    (tmp_path / "model.onnx").write_bytes(b"x" * 1_000_000)
    (tmp_path / "model_fp32.tflite").write_bytes(b"x" * 3_000_000)
    assert model_mb(tmp_path) == 1.0
    (tmp_path / "model.onnx.data").write_bytes(b"x" * 2_000_000)
    assert model_mb(tmp_path) == 3.0
    (tmp_path / "generation.json").write_text(json.dumps({**spec, "runtime": "litert"}))
    assert model_mb(tmp_path) == 3.0  # the LiteRT twin alone
