"""The LiteRT backend on a real model: BlazeFace short-range from the mediapipe 0.10.21 wheel (Apache-2.0).

The wheel is downloaded with pip (PyPI) once into the build cache by converters.face.blazeface (later runs reuse
it); each run extracts from a copy in a fresh folder. The model finds the astronaut's face in skimage's photo,
and it runs through run_bench.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import cv2
import numpy as np
import pytest

from converters.face.blazeface import (
    FULL_RANGE,
    OUTPUTS,
    SHA256,
    SHORT_RANGE,
    download_wheel,
    fetch_blazeface,
    verify_blazeface,
)
from edge.bench import make_inputs, run_bench
from edge.errors import ConversionError, InferenceError, InputError
from edge.profiles import load_profile
from edge.runtime import ModelFormat, TensorSpec, detect_format, open_model

pytestmark = pytest.mark.integration

NAME = "face_detection_short_range.tflite"


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """A fresh cache folder holding only the mediapipe wheel (copied from the build cache)."""
    folder = tmp_path_factory.mktemp("blazeface-cache")
    wheel = download_wheel()
    shutil.copyfile(wheel, folder / wheel.name)
    return folder


@pytest.fixture(scope="module")
def blazeface(cache) -> Path:
    return fetch_blazeface(cache)


@pytest.fixture(scope="module")
def model(blazeface):
    with open_model(blazeface, threads=2) as m:
        yield m


def _anchors() -> np.ndarray:
    """BlazeFace short-range anchor centres (x, y) in [0, 1]: 16x16 cells x 2, then 8x8 cells x 6."""
    out = []
    for grid, per_cell in ((16, 2), (8, 6)):
        for y in range(grid):
            for x in range(grid):
                out += [((x + 0.5) / grid, (y + 0.5) / grid)] * per_cell
    return np.array(out)


def _best_face(outputs: dict[str, np.ndarray]) -> tuple[float, float, float, float]:
    """(score, centre x, centre y, box width) of the best detection, in the 128x128 input's [0, 1] frame."""
    logits = outputs["classificators"].reshape(-1).astype(np.float64)
    best = int(logits.argmax())
    reg = outputs["regressors"][0, best]
    ax, ay = _anchors()[best]
    score = 1.0 / (1.0 + np.exp(-np.clip(logits[best], -80, 80)))
    return float(score), ax + reg[0] / 128, ay + reg[1] / 128, float(reg[2] / 128)


def _as_input(rgb: np.ndarray) -> np.ndarray:
    small = cv2.resize(rgb, (128, 128), interpolation=cv2.INTER_AREA).astype(np.float32)
    return (small / 127.5 - 1.0)[None]


def test_fetch_extracts_the_verified_model_and_its_licence_once(cache, blazeface):
    assert blazeface == cache / NAME
    assert hashlib.sha256(blazeface.read_bytes()).hexdigest() == SHA256
    licence = (cache / "face_detection_short_range.LICENSE").read_text()
    assert "Apache License" in licence and "Version 2.0" in licence
    wheels = sorted(cache.glob("mediapipe-0.10.21-*.whl"))
    assert len(wheels) == 1
    stamp = blazeface.stat().st_mtime_ns
    assert fetch_blazeface(cache) == blazeface  # second call: no download, no re-extraction
    assert sorted(cache.glob("mediapipe-0.10.21-*.whl")) == wheels
    assert blazeface.stat().st_mtime_ns == stamp


def test_litert_is_picked_from_the_bytes_not_the_name(blazeface, tmp_path):
    disguised = tmp_path / "face.onnx"
    disguised.write_bytes(blazeface.read_bytes())
    assert detect_format(disguised) is ModelFormat.TFLITE
    with open_model(disguised, profile=load_profile("rpi4")) as m:
        assert (m.backend, m.threads) == ("litert", 4)


def test_specs(model):
    assert model.inputs == (TensorSpec("input", (1, 128, 128, 3), np.dtype(np.float32)),)
    assert {s.name: s.shape for s in model.outputs} == OUTPUTS
    assert all(s.dtype == np.float32 for s in model.outputs)


def test_it_finds_the_astronauts_face(model):
    from skimage import data

    photo = data.astronaut()  # 512x512 RGB; Eileen Collins' face is left of centre, in the upper third
    score, cx, cy, width = _best_face(model.run({"input": _as_input(photo)}))
    assert score > 0.85
    assert 180 < cx * 512 < 280 and 80 < cy * 512 < 180
    assert 60 < width * 512 < 140
    blank_score, *_ = _best_face(model.run({"input": np.zeros((1, 128, 128, 3), np.float32)}))
    assert blank_score < 0.2


def test_wrong_inputs_name_the_input_and_what_was_expected(model):
    cases = {
        "shape": ({"input": np.zeros((1, 64, 64, 3), np.float32)}, "has shape (1, 64, 64, 3)"),
        "dtype": ({"input": np.zeros((1, 128, 128, 3), np.uint8)}, "has dtype uint8"),
    }
    for feeds, what in cases.values():
        with pytest.raises(InputError) as err:
            model.run(feeds)
        assert str(err.value) == f"{NAME}: input 'input' {what}; expected float32 (1, 128, 128, 3)"


def test_onnxruntime_cannot_be_forced_on_a_tflite_file(blazeface):
    with pytest.raises(InputError) as err:
        open_model(blazeface, backend="onnxruntime")
    assert str(err.value) == f"{blazeface}: is in TFLite format; backend 'onnxruntime' reads only ONNX and ORT"


def test_a_truncated_tflite_is_an_inference_error(blazeface, tmp_path):
    cut = tmp_path / "cut.tflite"
    cut.write_bytes(blazeface.read_bytes()[:4096])
    assert detect_format(cut) is ModelFormat.TFLITE
    with pytest.raises(InferenceError) as err:
        open_model(cut)
    assert str(err.value).startswith(f"{cut}: LiteRT could not load the model (")


def test_verification_catches_a_changed_file(blazeface, tmp_path):
    changed = tmp_path / NAME
    data = bytearray(blazeface.read_bytes())
    data[-1] ^= 0xFF
    changed.write_bytes(bytes(data))
    digest = hashlib.sha256(bytes(data)).hexdigest()
    with pytest.raises(ConversionError) as err:
        verify_blazeface(changed)
    assert str(err.value) == f"{changed}: sha256 {digest}; expected {SHA256} (mediapipe 0.10.21's file)"


def test_a_broken_cached_wheel_is_reported(tmp_path):
    wheel = tmp_path / "mediapipe-0.10.21-cp311-cp311-manylinux_2_28_x86_64.whl"
    wheel.write_bytes(b"not a zip")
    with pytest.raises(ConversionError) as err:
        fetch_blazeface(tmp_path)
    assert str(err.value) == (
        f"{wheel}: cannot extract mediapipe/modules/face_detection/{NAME} (File is not a zip file)"
    )


def test_bench_through_litert(model, tmp_path):
    result = run_bench(model, make_inputs(model.inputs, seed=3), count=30, warmup=3)
    assert (result.backend, result.threads, result.runs) == ("litert", 2, 30)
    s = result.stats
    assert 0 < s.min <= s.p50 <= s.p90 <= s.p99 <= s.max
    assert result.model_sha256 == SHA256
    data = json.loads(json.dumps(result.to_dict()))
    assert data["inputs"][0]["fed_shape"] == [1, 128, 128, 3]
    png = result.plot_png(tmp_path / "blazeface.png")
    assert cv2.imread(str(png)).shape == (600, 1280, 3)


def test_the_fp16_hint_is_metadata_litert_keeps_and_runs(blazeface, model, tmp_path):
    """benchmarks/arm_frame_levers.py's fp16 lever: the same network, one more metadata entry (the model's own
    kept), loadable by LiteRT with the same tensors. (Whether it runs in fp16 depends on the core: counted on
    the emulated A76 by that benchmark, not asserted here.)"""
    from ai_edge_litert import schema_py_generated as schema

    from benchmarks.arm_frame_levers import FP16_KEY, FP16_VALUE, with_fp16_hint

    hinted = with_fp16_hint(blazeface, tmp_path / "hinted.tflite")
    before = schema.ModelT.InitFromPackedBuf(bytearray(blazeface.read_bytes()), 0)
    after = schema.ModelT.InitFromPackedBuf(bytearray(hinted.read_bytes()), 0)
    entries = {m.name.decode(): bytes(after.buffers[m.buffer].data).decode(errors="replace") for m in after.metadata}
    assert entries[FP16_KEY] == FP16_VALUE
    assert {m.name.decode() for m in before.metadata} | {FP16_KEY} == set(entries)
    with open_model(hinted, threads=1) as m:
        assert m.inputs == model.inputs and m.outputs == model.outputs
        out = m.run({m.inputs[0].name: np.zeros(m.inputs[0].shape, np.float32)})
        assert {k: v.shape for k, v in out.items()} == {o.name: tuple(o.shape) for o in m.outputs}


@pytest.mark.parametrize("variant", [SHORT_RANGE, FULL_RANGE], ids=["short-range", "full-range-sparse"])
def test_the_dense_copy_is_the_same_network_on_fp32_weights(cache, variant, tmp_path):
    """benchmarks/blazeface_int8.py's ``dense_copy`` (what ai-edge-quantizer is given): no DENSIFY or DEQUANTIZE
    left, every weight an fp32 constant, a ``serving_default`` signature, and on a real photo's letterbox the raw
    outputs of the original within float rounding (``DENSE_TOLERANCE``)."""
    from ai_edge_litert import schema_py_generated as schema
    from ai_edge_litert.interpreter import Interpreter
    from skimage import data

    from benchmarks.blazeface_int8 import DENSE_TOLERANCE, SIGNATURE, SIGNATURE_INPUT, check_dense, dense_copy
    from edge.face.detect_blazeface import letterbox

    source = fetch_blazeface(cache, variant)
    dense = dense_copy(source, tmp_path / "dense.tflite")
    tree = schema.ModelT.InitFromPackedBuf(bytearray(dense.read_bytes()), 0)
    codes = [max(c.builtinCode, c.deprecatedBuiltinCode) for c in tree.operatorCodes]
    used = {codes[op.opcodeIndex] for op in tree.subgraphs[0].operators}
    assert not used & {schema.BuiltinOperator.DENSIFY, schema.BuiltinOperator.DEQUANTIZE}
    graph = tree.subgraphs[0]
    convs = {schema.BuiltinOperator.CONV_2D, schema.BuiltinOperator.DEPTHWISE_CONV_2D}
    weights = [graph.tensors[t] for op in graph.operators if codes[op.opcodeIndex] in convs for t in op.inputs[1:]]
    assert weights and all(w.type == schema.TensorType.FLOAT32 and w.sparsity is None for w in weights)
    assert Interpreter(model_path=str(dense)).get_signature_list() == {
        SIGNATURE: {"inputs": [SIGNATURE_INPUT], "outputs": ["output_0", "output_1"]}
    }
    with open_model(source, threads=1) as original, open_model(dense, threads=1) as copy:
        assert [(i.shape, i.dtype) for i in copy.inputs] == [(i.shape, i.dtype) for i in original.inputs]
        assert sorted(o.shape for o in copy.outputs) == sorted(o.shape for o in original.outputs)
        tensor, _ = letterbox(data.astronaut(), original.inputs[0].shape[1])
    assert check_dense(source, dense, tensor) <= DENSE_TOLERANCE
