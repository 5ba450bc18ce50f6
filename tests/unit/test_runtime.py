"""edge.runtime: format detection from bytes, the backend registry, open_model, input checks, ORT runs.

Real onnxruntime on small real ONNX models built with onnx.helper (fast); LiteRT on a real .tflite is in
tests/integration/test_litert.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from edge.errors import InferenceError, InputError, MissingDependencyError
from edge.profiles import load_profile
from edge.runtime import (
    Backend,
    LoadOptions,
    Model,
    ModelFormat,
    Optimization,
    TensorSpec,
    available_backends,
    default_threads,
    detect_format,
    get_backend,
    open_model,
)
from edge.runtime.litert_backend import import_interpreter
from tests.unit.runtime_models import (
    conv_relu_reference,
    write_add,
    write_conv_relu,
    write_embedding,
    write_unknown_op,
)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("models")
    return {
        "conv": write_conv_relu(d / "conv.onnx"),
        "emb": write_embedding(d / "emb.onnx"),
        "add": write_add(d / "add.onnx"),
        "unknown_op": write_unknown_op(d / "unknown_op.onnx"),
    }


@pytest.fixture()
def conv(models):
    with open_model(models["conv"], threads=1) as model:
        yield model


# --- format detection ------------------------------------------------------------------------------------


def test_onnx_is_told_from_its_bytes_whatever_its_name(models, tmp_path):
    renamed = tmp_path / "weights.tflite"
    renamed.write_bytes(models["conv"].read_bytes())
    assert detect_format(models["conv"]) is ModelFormat.ONNX
    assert detect_format(renamed) is ModelFormat.ONNX


def test_tflite_and_ort_flatbuffers_are_told_by_their_identifier(tmp_path):
    tfl = tmp_path / "model.onnx"  # a misleading name on purpose
    tfl.write_bytes(b"\x1c\x00\x00\x00TFL3" + bytes(64))
    ort = tmp_path / "model.bin"
    ort.write_bytes(b"\x14\x00\x00\x00ORTM" + bytes(64))
    assert detect_format(tfl) is ModelFormat.TFLITE
    assert detect_format(ort) is ModelFormat.ORT


def test_neither_format_names_the_file_and_shows_the_first_bytes(tmp_path):
    path = tmp_path / "x.bin"
    path.write_bytes(bytes(range(16)))
    with pytest.raises(InputError) as err:
        detect_format(path)
    assert str(err.value) == (
        f"{path}: not an ONNX or TFLite model (first bytes 00 01 02 03 04 05 06 07; "
        "expected an ONNX protobuf, or 'TFL3' at offset 4)"
    )


def test_onnx_from_a_newer_ir_with_unknown_fields_is_still_onnx(models, tmp_path):
    newer = tmp_path / "newer.onnx"
    # field 30, wire type 2 (not in ModelProto today), holding 3 bytes: a newer writer's addition
    tag = 30 << 3 | 2
    newer.write_bytes(models["conv"].read_bytes() + bytes([tag & 0x7F | 0x80, tag >> 7, 3]) + b"abc")
    assert detect_format(newer) is ModelFormat.ONNX


def test_a_text_file_and_a_truncated_onnx_are_not_models(models, tmp_path):
    text = tmp_path / "readme.onnx"
    text.write_text("hello, this is not a model\n")
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(models["conv"].read_bytes()[:200])
    for path in (text, cut):
        with pytest.raises(InputError, match=r"not an ONNX or TFLite model \(first bytes "):
            detect_format(path)


def test_empty_missing_and_directory_paths(tmp_path):
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    cases = {
        empty: f"{empty}: empty file; expected an ONNX or TFLite model",
        tmp_path / "nope.onnx": f"{tmp_path / 'nope.onnx'}: no such model file",
        tmp_path: f"{tmp_path}: is a directory; expected an ONNX or TFLite model file",
    }
    for path, message in cases.items():
        with pytest.raises(InputError) as err:
            open_model(path)
        assert str(err.value) == message


# --- registry and open_model -----------------------------------------------------------------------------


def test_registry_lists_and_finds_backends_by_name():
    assert available_backends() == ["litert", "onnxruntime"]
    assert all(isinstance(get_backend(name), Backend) for name in available_backends())
    assert get_backend("onnxruntime").name == "onnxruntime"
    assert get_backend("litert").formats == frozenset({ModelFormat.TFLITE})
    with pytest.raises(InferenceError) as err:
        get_backend("tvm")
    assert str(err.value) == "unknown backend 'tvm'; expected one of litert, onnxruntime"


def test_a_forced_backend_must_read_the_format(models):
    with pytest.raises(InputError) as err:
        open_model(models["conv"], backend="litert")
    assert str(err.value) == f"{models['conv']}: is in ONNX format; backend 'litert' reads only TFLite"


def test_threads_come_from_the_profile_unless_overridden(models):
    rpi4 = load_profile("rpi4")
    with open_model(models["conv"], profile=rpi4) as model:
        assert (model.backend, model.threads) == ("onnxruntime", rpi4.runtime.threads) == ("onnxruntime", 4)
    with open_model(models["conv"], threads=1, profile=rpi4) as model:
        assert model.threads == 1
    with open_model(models["conv"]) as model:
        assert model.threads == default_threads() == len(__import__("os").sched_getaffinity(0))


def test_a_bad_thread_count_is_refused(models):
    for bad in (0, -2, 1.5, True):
        with pytest.raises(InferenceError) as err:
            open_model(models["conv"], threads=bad)
        assert str(err.value) == f"threads = {bad!r}; expected a whole number >= 1"


def test_a_model_onnxruntime_cannot_load_is_an_inference_error(models):
    path = models["unknown_op"]
    assert detect_format(path) is ModelFormat.ONNX  # well-formed protobuf ...
    with pytest.raises(InferenceError) as err:
        open_model(path)
    message = str(err.value)  # ... that onnxruntime refuses; its own words follow ours
    assert message.startswith(f"{path}: onnxruntime cannot load the model (")
    assert "NoSuchOperator" in message


def test_load_options_reach_the_onnxruntime_session_and_its_errors(models):
    from edge.cpu import int8_session_config

    options = LoadOptions(Optimization.NONE, precise_int8=True, what="this MTCNN model")
    with open_model(models["conv"], threads=1, options=options) as model:
        session_options = model.session.get_session_options()
        assert session_options.graph_optimization_level.name == "ORT_DISABLE_ALL"
        assert session_options.enable_cpu_mem_arena and session_options.enable_mem_pattern  # onnxruntime's defaults
        for key, value in int8_session_config():  # x86 without VNNI: session.x64quantprecision=1; else nothing
            assert session_options.get_session_config_entry(key) == value
    with pytest.raises(InferenceError) as err:
        open_model(models["unknown_op"], options=options)
    assert str(err.value).startswith(f"{models['unknown_op']}: onnxruntime cannot load this MTCNN model (")


@pytest.mark.parametrize(
    ("options", "settings"),
    [
        (LoadOptions(Optimization.NONE), "NONE, precise_int8 = True"),
        (LoadOptions(precise_int8=False), "ALL, precise_int8 = False"),
    ],
)
def test_litert_refuses_onnxruntime_settings_rather_than_ignore_them(tmp_path, options, settings):
    path = tmp_path / "m.tflite"  # refused before the file is read
    with pytest.raises(InputError) as err:
        get_backend("litert").load(path, 1, options)
    assert str(err.value) == (
        f"{path}: optimization = {settings} are onnxruntime settings; LiteRT runs a TFLite model as it is "
        "(use the .onnx for the unfused gate)"
    )


# --- specs, runs and input checks ------------------------------------------------------------------------


def test_specs_report_names_shapes_and_dtypes(conv, models):
    assert isinstance(conv, Model)
    assert conv.inputs == (TensorSpec("x", ("batch", 3, 16, 16), np.dtype(np.float32)),)
    assert conv.outputs == (TensorSpec("y", ("batch", 4, 16, 16), np.dtype(np.float32)),)
    assert conv.inputs[0].describe() == "float32 (batch, 3, 16, 16)"
    assert TensorSpec("t", (None,), np.dtype(np.int8)).shape_text() == "(?,)"
    with open_model(models["emb"], threads=1) as emb:
        assert emb.inputs == (TensorSpec("ids", (1, "seq"), np.dtype(np.int64)),)


def test_run_matches_a_numpy_reference_for_any_batch(conv):
    rng = np.random.default_rng(7)
    for batch in (1, 3):
        x = rng.standard_normal((batch, 3, 16, 16)).astype(np.float32)
        y = conv.run({"x": x})
        assert list(y) == ["y"]
        assert y["y"].shape == (batch, 4, 16, 16)
        np.testing.assert_allclose(y["y"], conv_relu_reference(x), atol=1e-5)
        assert (y["y"] == 0).any() and (y["y"] > 0).any()  # the ReLU really clipped something


def test_prepare_runs_the_same_as_run(conv):
    x = np.random.default_rng(1).standard_normal((2, 3, 16, 16)).astype(np.float32)
    call = conv.prepare({"x": x})
    np.testing.assert_array_equal(call()["y"], conv.run({"x": x})["y"])


def test_integer_inputs_run(models):
    with open_model(models["emb"], threads=1) as emb:
        out = emb.run({"ids": np.array([[3, 0, 99]], dtype=np.int64)})
    np.testing.assert_array_equal(out["emb"][0, :, 0], [24.0, 0.0, 792.0])


@pytest.mark.parametrize(
    ("feeds", "message"),
    [
        ({}, "conv.onnx: missing input 'x'; expected float32 (batch, 3, 16, 16)"),
        (
            {"x": np.zeros((1, 3, 16, 16), np.float32), "z": np.zeros(1)},
            "conv.onnx: unknown input 'z'; the model's inputs are x",
        ),
        (
            {"x": np.zeros((1, 3, 16, 16), np.float64)},
            "conv.onnx: input 'x' has dtype float64; expected float32 (batch, 3, 16, 16)",
        ),
        (
            {"x": np.zeros((1, 3, 15, 16), np.float32)},
            "conv.onnx: input 'x' has shape (1, 3, 15, 16); expected float32 (batch, 3, 16, 16)",
        ),
        (
            {"x": np.zeros((3, 16, 16), np.float32)},
            "conv.onnx: input 'x' has shape (3, 16, 16); expected float32 (batch, 3, 16, 16)",
        ),
        (
            {"x": [[0.0]]},
            "conv.onnx: input 'x' is a list; expected a numpy array float32 (batch, 3, 16, 16)",
        ),
    ],
    ids=["missing", "unknown", "dtype", "shape", "rank", "not-an-array"],
)
def test_wrong_feeds_name_the_input_and_what_was_expected(conv, feeds, message):
    for call in (conv.run, conv.prepare):
        with pytest.raises(InputError) as err:
            call(feeds)
        assert str(err.value) == message


def test_a_runtime_failure_is_an_inference_error(models):
    with open_model(models["add"], threads=1) as add:
        assert add.run({"a": np.ones(3, np.float32), "b": np.ones(3, np.float32)})["z"].tolist() == [2, 2, 2]
        with pytest.raises(InferenceError) as err:
            add.run({"a": np.ones(3, np.float32), "b": np.ones(2, np.float32)})
    assert str(err.value).startswith("add.onnx: onnxruntime failed to run the model (")


def test_a_closed_model_refuses_to_run(models):
    with open_model(models["conv"], threads=1) as model:
        pass
    with pytest.raises(InferenceError) as err:
        model.run({"x": np.zeros((1, 3, 16, 16), np.float32)})
    assert str(err.value) == "conv.onnx: the model is closed"


def test_ort_format_runs_like_the_onnx_it_came_from(models, tmp_path):
    src = tmp_path / "conv.onnx"
    src.write_bytes(models["conv"].read_bytes())
    subprocess.run(
        [sys.executable, "-m", "onnxruntime.tools.convert_onnx_models_to_ort", str(src)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    ort_file = tmp_path / "conv.ort"
    assert detect_format(ort_file) is ModelFormat.ORT
    x = np.random.default_rng(3).standard_normal((1, 3, 16, 16)).astype(np.float32)
    with open_model(ort_file, threads=1) as model:
        assert model.backend == "onnxruntime"
        np.testing.assert_allclose(model.run({"x": x})["y"], conv_relu_reference(x), atol=1e-5)


# --- LiteRT import -----------------------------------------------------------------------------------------


def test_litert_interpreter_comes_from_ai_edge_litert():
    from ai_edge_litert.interpreter import Interpreter

    assert import_interpreter() is Interpreter


def test_no_tflite_interpreter_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ai_edge_litert.interpreter", None)
    monkeypatch.setitem(sys.modules, "tflite_runtime.interpreter", None)
    with pytest.raises(MissingDependencyError) as err:
        import_interpreter()
    assert str(err.value) == (
        "The LiteRT backend needs ai-edge-litert (or tflite-runtime) but neither imports ("
        "ai_edge_litert.interpreter: import of ai_edge_litert.interpreter halted; None in sys.modules; "
        "tflite_runtime.interpreter: import of tflite_runtime.interpreter halted; None in sys.modules); "
        "install it with: pip install 'edge-deploy[device]'"
    )


def test_varying_shapes_turn_off_onnxruntimes_per_shape_memory(models):
    """MTCNN's pyramid and the embedder's face batches change shape every call: no arena, no memory patterns."""
    with open_model(models["conv"], threads=1, options=LoadOptions(varying_shapes=True)) as model:
        session_options = model.session.get_session_options()
        assert not session_options.enable_cpu_mem_arena and not session_options.enable_mem_pattern
