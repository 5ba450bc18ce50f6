"""``convert model`` end to end on models made here (onnx.helper), with real onnxruntime quantization and runs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from converters.byom.build import ModelJob, convert_model
from converters.byom.gate import Task
from converters.quantize import op_counts
from edge.digest import file_sha256
from edge.errors import InputError, ValidationError
from edge.face.models import read_models_folder
from edge.profiles import Precision, load_profile
from edge.runtime.ort_session import build_session
from testsupport.byom_models import (
    features,
    image_pairs,
    write_classifier,
    write_embedder,
    write_npz,
    write_token_encoder,
    write_two_inputs,
)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("byom")
    write_embedder(d / "emb.onnx")
    write_classifier(d / "cls.onnx")
    write_npz(d / "emb_calib.npz", x=image_pairs(0, 32))
    write_npz(d / "emb_eval.npz", x=image_pairs(1, 32))
    write_npz(d / "emb_const.npz", x=np.zeros((16, 3, 16, 16), np.float32))
    write_npz(d / "cls_calib.npz", x=features(0, 128))
    write_npz(d / "cls_eval.npz", x=features(1, 200))
    return d


def _job(files: Path, out: Path, **kw) -> ModelJob:
    base: dict = dict(
        model=files / "emb.onnx",
        out_dir=out,
        profile=load_profile("rpi4"),
        precision=Precision.INT8,
        task=Task.EMBEDDING,
        evaluation=files / "emb_eval.npz",
        calibration=files / "emb_calib.npz",
        input_shapes={"x": (4, 3, 16, 16)},
    )
    base.update(kw)
    return ModelJob(**base)


def test_int8_embedder_passes_and_ships_the_ort_file(files, tmp_path):
    out = tmp_path / "out"
    build = convert_model(_job(files, out))
    assert build.passed
    assert sorted(p.name for p in out.iterdir()) == [
        "emb.fp32.onnx", "emb.int8.onnx", "emb.int8.ort", "models.json", "report.json", "report.md",
    ]  # fmt: skip
    e = build.figures["embedding"]
    assert e["samples"] == 64 and e["cosine_mean"] > 0.999 and e["rank_agreement"] == 1.0
    # The structure of the quantized graph: every Conv/Gemm input is quantized, no op fused away.
    ops = op_counts(out / "emb.int8.onnx")
    assert (ops["Conv"], ops["Gemm"], ops["QuantizeLinear"], ops["DequantizeLinear"]) == (2, 1, 5, 11)
    models = json.loads((out / "models.json").read_text())
    entry = models["models"][0]
    assert entry["file"] == "emb.int8.ort" and entry["format"] == "ort" and entry["precision"] == "int8"
    assert entry["sha256"] == file_sha256(out / "emb.int8.ort")
    assert entry["source"] == {
        "path": str(files / "emb.onnx"),
        "sha256": file_sha256(files / "emb.onnx"),
        "format": "onnx",
        "licence": "unknown (user model)",  # said explicitly when --licence is not given
        "licence_given_by": "nobody: no --licence given",
    }
    assert models["task"] == "embedding" and models["gate"]["passed"] is True
    assert models["gate"]["figures"]["embedding"]["cosine_mean"] == e["cosine_mean"]
    assert models["inputs"] == [{"name": "x", "dtype": "float32", "shape": [4, 3, 16, 16]}]
    assert models["int8_arithmetic"].startswith("gate: QDQ .onnx unfused (ORT_DISABLE_ALL)")
    assert read_models_folder(out).entries["model"].file == "emb.int8.ort"  # the face folders' reader accepts it
    build_session(out / "emb.int8.ort", 1)  # onnxruntime loads the ARM ORT-format file here too
    report = json.loads((out / "report.json").read_text())
    assert report["evaluation"]["shared_with_calibration"] == 0 and report["calibration"]["samples"] == 64
    assert report["gate"]["evaluated_as"].startswith("the quantized .onnx with onnxruntime's graph optimisations off")


def test_int8_classifier_passes_on_top1(files, tmp_path):
    job = _job(
        files,
        tmp_path / "cls",
        model=files / "cls.onnx",
        task=Task.CLASSIFICATION,
        evaluation=files / "cls_eval.npz",
        calibration=files / "cls_calib.npz",
        input_shapes={},
        profile=load_profile("rpi5"),
    )
    build = convert_model(job)
    c = build.figures["classification"]
    assert build.passed and c["samples"] == 200 and c["classes"] == 10 and c["top1_agreement"] >= 0.98
    assert "embedding" not in build.figures


def test_fp32_copy_fixes_the_dynamic_batch_and_equals_the_source(files, tmp_path):
    import onnx

    out = tmp_path / "fp32"
    build = convert_model(
        _job(files, out, precision=Precision.FP32, calibration=None, input_shapes={"x": (2, 3, 16, 16)})
    )
    assert build.passed and build.settings is None
    assert sorted(p.name for p in out.iterdir()) == ["emb.fp32.onnx", "models.json", "report.json", "report.md"]
    dims = onnx.load(str(out / "emb.fp32.onnx")).graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_value for d in dims] == [2, 3, 16, 16]
    assert build.figures["fp32_copy"]["outputs"]["emb"]["max_abs"] == 0.0
    assert build.figures["embedding"]["cosine_min"] > 0.999999
    models = json.loads((out / "models.json").read_text())
    assert models["models"][0]["format"] == "onnx" and "int8_arithmetic" not in models
    assert build.calibration == {"samples": 0, "reason": "not needed for fp32"}


def test_browser_int8_ships_the_onnx(files, tmp_path):
    out = tmp_path / "web"
    build = convert_model(_job(files, out, profile=load_profile("browser-wasm")))
    assert build.passed and not (out / "emb.int8.ort").exists()
    assert json.loads((out / "models.json").read_text())["models"][0]["file"] == "emb.int8.onnx"


_NUMBER = r"[0-9.]+"


def test_constant_calibration_fails_the_gate_with_a_readable_message(files, tmp_path):
    out = tmp_path / "broken"
    with pytest.raises(ValidationError) as err:
        convert_model(_job(files, out, calibration=files / "emb_const.npz"))
    message = str(err.value)
    head = (
        f"{files / 'emb.onnx'}: int8 model for rpi4 failed the embedding gate (see {out / 'report.md'}; "
        "no models.json written):\n  "
    )
    assert message.startswith(head)
    lines = message[len(head) :].split("\n  ")
    assert len(lines) == 1
    pattern = rf"embedding: mean cosine to the source ({_NUMBER}) < --min-cosine 0\.99 \(64 samples; min {_NUMBER}\)"
    match = re.fullmatch(pattern, lines[0])
    assert match and float(match[1]) < 0.6, lines[0]
    # The report explains the failure; nothing claims the model is deployable.
    assert sorted(p.name for p in out.iterdir()) == [
        "emb.fp32.onnx", "emb.int8.onnx", "emb.int8.ort", "report.json", "report.md",
    ]  # fmt: skip
    report = json.loads((out / "report.json").read_text())
    assert report["passed"] is False and report["gate"]["failures"] == lines
    assert "FAILED:" in (out / "report.md").read_text()


def test_every_missed_threshold_is_listed(files, tmp_path):
    from converters.byom.gate import GateThresholds

    strict = GateThresholds(max_abs_error=1e-9, max_rel_error=1e-9)
    with pytest.raises(ValidationError) as err:
        convert_model(_job(files, tmp_path / "strict", task=Task.RAW, thresholds=strict))
    lines = str(err.value).split("\n  ")[1:]
    assert len(lines) == 2, lines
    assert re.fullmatch(rf"output 'emb': max abs difference {_NUMBER} > --max-abs-error 1e-09", lines[0]), lines
    assert re.fullmatch(rf"output 'emb': max relative difference {_NUMBER} > --max-rel-error 1e-09", lines[1]), lines


def test_two_inputs_two_outputs_raw_int8(tmp_path):
    model = write_two_inputs(tmp_path / "two.onnx")
    # 1,024 calibration samples: with 64, the evaluation outputs went past the calibrated range (clipped: 0.29)
    calib = write_npz(tmp_path / "c.npz", a=features(0, 1024, 8), b=features(1, 1024, 8))
    evaluation = write_npz(tmp_path / "e.npz", a=features(2, 48, 8), b=features(3, 48, 8))
    job = ModelJob(
        model, tmp_path / "out", load_profile("rpi4"), Precision.INT8, Task.RAW, evaluation, calib,
        {"a": (16, 8), "b": (16, 8)},
    )  # fmt: skip
    build = convert_model(job)
    outputs = build.figures["outputs"]
    assert build.passed and list(outputs) == ["y", "z"]
    assert outputs["y"]["shape"] == [48, 4] and outputs["z"]["shape"] == [48, 8]
    assert all(0 < f["max_rel"] <= 0.05 for f in outputs.values()), outputs
    assert [i["name"] for i in json.loads((tmp_path / "out" / "models.json").read_text())["inputs"]] == ["a", "b"]


def test_weight_only_int8_quantizes_the_matmul_weights_and_gates_in_fp32_arithmetic(files, tmp_path):
    """--weight-only: each constant-weight MatMul becomes an 8-bit MatMulNBits at accuracy level 0 (fp32
    activations), no calibration; the embedding gate passes close to fp32; a model without such a MatMul is
    refused, naming what to use instead."""
    write_token_encoder(tmp_path / "enc.onnx")
    rng = np.random.default_rng(5)
    write_npz(tmp_path / "enc_eval.npz", x=rng.standard_normal((32, 8, 64)).astype(np.float32))
    out = tmp_path / "wo"
    job = _job(files, out, model=tmp_path / "enc.onnx", evaluation=tmp_path / "enc_eval.npz", calibration=None,
               weight_only=True, input_shapes={"x": (4, 8, 64)})  # fmt: skip
    build = convert_model(job)
    assert build.passed and build.settings.mode.value == "int8-weight-only"
    assert build.settings.int4_accuracy_level == 0 and build.settings.int4_block_size == 32
    assert build.quant_ops == {"MatMulNBits": 2, "MatMul": 0}, build.quant_ops
    assert 0.999 < build.figures["embedding"]["cosine_mean"] < 1.0  # 8-bit weights: close, not equal
    models = json.loads((out / "models.json").read_text())
    assert models["models"][0]["file"] == "enc.int8.ort"
    assert models["int8_arithmetic"].startswith("weight-only: MatMulNBits (8-bit blocks) at accuracy level 0")
    assert models["gate"]["evaluated_as"].startswith("the weight-only INT8 .onnx")
    assert build.calibration == {"samples": 0, "reason": "weight-only INT8: activations stay float"}
    with pytest.raises(InputError) as err:  # the test embedder's weights are Conv and Gemm: no MatMul weight
        convert_model(_job(files, tmp_path / "none", calibration=None, weight_only=True))
    assert str(err.value) == (
        f"{files / 'emb.onnx'}: --weight-only quantizes MatMul nodes with a constant 2-D weight, and the model "
        "has none; use static INT8 (--calib) or --dynamic"
    )
    assert not (tmp_path / "none").exists()


def test_dynamic_int8_needs_no_calibration(files, tmp_path):
    out = tmp_path / "dyn"
    build = convert_model(_job(files, out, calibration=None, dynamic=True))
    assert build.passed and build.settings is not None and build.settings.mode.value == "dynamic"
    assert build.quant_ops == {"DynamicQuantizeLinear": 3, "MatMulInteger": 1, "ConvInteger": 2}, build.quant_ops
    assert build.figures["embedding"]["cosine_mean"] > 0.999
    models = json.loads((out / "models.json").read_text())
    assert models["models"][0]["file"] == "emb.int8.ort"
    assert models["int8_arithmetic"].startswith("gate: dynamic-INT8 .onnx unfused")
    assert models["gate"]["evaluated_as"].startswith("the dynamic-INT8 .onnx")
    assert build.calibration == {"samples": 0, "reason": "dynamic INT8: activations quantized at run time"}
