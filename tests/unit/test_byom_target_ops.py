"""``convert model`` asks the target's own runtime to load the model before converting it
(``converters.byom.target_ops``): the host's onnxruntime for the Pi and x86 profiles, the site's onnxruntime-web
under Node.js for the browser. Needs Node.js and ``web/node_modules`` (``scripts/setup_web.sh --page``, which
``scripts/test.sh`` runs up front)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from converters.byom.build import ModelJob, convert_model
from converters.byom.gate import Task
from converters.byom.target_ops import check_target_ops, target_runtime, unsupported_nodes
from converters.package.web import ort_dist
from edge.errors import InputError, MissingDependencyError
from edge.profiles import Precision, load_profile
from testsupport.byom_models import image_pairs, write_embedder, write_npz, write_token_encoder

WEB_VERSION = ort_dist()[1]


def _relu(path: Path, opset: int) -> Path:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="act")],
        "relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 11
    onnx.save(model, str(path))
    return path


def _job(model: Path, out: Path, target: str, data: Path, **kw) -> ModelJob:
    precision, task = kw.pop("precision", Precision.FP32), kw.pop("task", Task.RAW)
    return ModelJob(model, out, load_profile(target), precision, task, data, **kw)


def test_a_newer_opset_runs_on_the_pi_and_is_refused_for_the_browser(tmp_path):
    """onnxruntime-web (1.30 here) takes ai.onnx up to opset 26, the host's onnxruntime (1.32) further."""
    model = _relu(tmp_path / "relu27.onnx", 27)
    data = write_npz(tmp_path / "e.npz", x=np.linspace(-1, 1, 16, dtype=np.float32).reshape(4, 4))
    build = convert_model(_job(model, tmp_path / "pi", "rpi4", data))
    assert build.passed
    report = json.loads((tmp_path / "pi" / "report.json").read_text())
    assert report["target_runtime"]["runtime"] == "onnxruntime"
    assert report["target_runtime"]["loaded"] == ["relu27.fp32.onnx"]
    with pytest.raises(InputError) as err:
        convert_model(_job(model, tmp_path / "web", "browser-wasm", data))
    assert str(err.value) == (
        f"{model}: onnxruntime-web {WEB_VERSION}, the runtime of browser-wasm, cannot load it; onnxruntime-web "
        "says: it takes ai.onnx up to opset 26. Re-export the model without these ops or at an opset the runtime "
        "takes (the model's: ai.onnx 27)"
    )
    assert not (tmp_path / "web").exists() and not [p for p in tmp_path.iterdir() if ".partial-" in p.name]
    build = convert_model(_job(_relu(tmp_path / "relu26.onnx", 26), tmp_path / "web26", "browser-wasm", data))
    assert build.passed  # the same graph at the opset the page takes


def test_every_int8_kind_loads_in_the_browser_runtime(tmp_path):
    """Static QDQ, dynamic INT8 (ConvInteger, MatMulInteger) and weight-only (MatMulNBits): the browser ships
    the .onnx, and each candidate is loaded in onnxruntime-web before its gate."""
    emb, enc = write_embedder(tmp_path / "emb.onnx"), write_token_encoder(tmp_path / "enc.onnx")
    write_npz(tmp_path / "calib.npz", x=image_pairs(0, 8))
    write_npz(tmp_path / "eval.npz", x=image_pairs(1, 8))
    tokens = np.random.default_rng(0).standard_normal((8, 8, 64)).astype(np.float32)
    write_npz(tmp_path / "tok.npz", x=tokens)
    shapes = {"x": (4, 3, 16, 16)}
    kinds = {
        "static": (emb, "eval.npz", {"calibration": tmp_path / "calib.npz", "input_shapes": shapes}),
        "dynamic": (emb, "eval.npz", {"dynamic": True, "input_shapes": shapes}),
        "weight_only": (enc, "tok.npz", {"weight_only": True, "input_shapes": {"x": (4, 8, 64)}}),
    }
    for kind, (model, data, kw) in kinds.items():
        out = tmp_path / kind
        job = _job(model, out, "browser-wasm", tmp_path / data, precision=Precision.INT8, task=Task.EMBEDDING, **kw)
        assert convert_model(job).passed, kind
        checked = json.loads((out / "report.json").read_text())["target_runtime"]
        assert checked["runtime"] == "onnxruntime-web" and checked["version"] == WEB_VERSION, kind
        assert checked["loaded"] == [f"{model.stem}.fp32.onnx", f"{model.stem}.int8.onnx"], kind
        assert f"onnxruntime-web {WEB_VERSION} loads" in (out / "report.md").read_text()


def test_unsupported_nodes_looks_into_subgraphs_and_skips_model_functions(tmp_path):
    inner = helper.make_graph(
        [helper.make_node("Wobble", ["x"], ["z"], name="in_branch", domain="com.example")],
        "branch",
        [],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 4])],
    )
    local = helper.make_function("com.example", "Local", ["a"], ["b"], [helper.make_node("Relu", ["a"], ["b"])],
                                 [helper.make_opsetid("", 17)])  # fmt: skip
    nodes = [
        helper.make_node("If", ["c"], ["y0"], name="branching", then_branch=inner, else_branch=inner),
        helper.make_node("Local", ["y0"], ["y"], name="mine", domain="com.example"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)],
                              functions=[local])  # fmt: skip
    found = unsupported_nodes(proto)
    assert [str(f) for f in found] == ["com.example:Wobble-1 (node 'in_branch', 'in_branch')"]


def test_the_runtime_of_each_profile():
    import onnxruntime

    assert str(target_runtime(load_profile("rpi5"))) == f"onnxruntime {onnxruntime.__version__}"
    assert str(target_runtime(load_profile("browser-wasm"))) == f"onnxruntime-web {WEB_VERSION}"


def test_no_node_modules_names_the_setup_script(tmp_path):
    model = _relu(tmp_path / "relu.onnx", 17)
    with pytest.raises(MissingDependencyError) as err:
        check_target_ops(model, load_profile("browser-wasm"), web_dir=tmp_path / "web")
    assert "onnxruntime-web (npm) is not installed" in str(err.value)
    assert "scripts/setup_web.sh" in str(err.value)
