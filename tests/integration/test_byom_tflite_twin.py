"""``convert model --format tflite``: the TFLite twin of a user's model by onnx2tf (``.venv-onnx2tf``,
created by scripts/setup_onnx2tf.sh if missing): at fp32 checked on LiteRT against the fp32 copy on the
evaluation data; at int8 full integer, calibrated on ``--calib`` and put behind the embedding gate against the
source; recorded in the report and shipped by ``build --model``. The model is the test embedder of
testsupport/byom_models.py (Conv, ReLU, Gemm), fed at 1 x 3 x 16 x 16. The refusals (before any work):
tests/unit/test_byom_tflite_twin.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from edge_deploy.cli import main
from testsupport.needs import ONNX2TF, install_on_first_use

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    from testsupport.byom_models import write_embedder_files

    install_on_first_use(ONNX2TF, "the user-model TFLite twin test (tests/integration/test_byom_tflite_twin.py)")
    d = write_embedder_files(tmp_path_factory.mktemp("byom-twin"))
    argv = ["convert", "model", str(d / "emb.onnx"), "--target", "rpi4", "--precision", "fp32", "--eval",
            str(d / "eval.npz"), "--task", "embedding", "--input", "x=1x3x16x16", "--format", "tflite",
            "-o", str(d / "net"), "--json"]  # fmt: skip
    assert main(argv) == 0
    return d


def test_the_twin_equals_the_fp32_copy_on_litert_and_is_recorded(converted):
    """Recomputed here, not read from the converter's report: every evaluation sample through the shipped
    fp32 copy on onnxruntime and the twin on LiteRT (NHWC in, as onnx2tf writes it); then the report says so."""
    from edge.cosine import row_cosines
    from edge.runtime import open_model

    net = converted / "net"
    report = json.loads((net / "report.json").read_text())
    twin = report["gate"]["figures"]["tflite"]
    assert report["files"]["tflite"]["file"] == "emb.fp32.tflite" and twin["against"] == "emb.fp32.onnx"
    samples = np.load(converted / "eval.npz")["x"]
    with open_model(net / "emb.fp32.onnx", threads=1, backend="onnxruntime") as fp32:
        want = np.concatenate([fp32.run({"x": s[None]})["emb"] for s in samples]).astype(np.float64)
    with open_model(net / "emb.fp32.tflite", threads=1, backend="litert") as model:
        (inp,), (out,) = model.inputs, model.outputs
        assert (inp.shape, out.shape) == ((1, 16, 16, 3), (1, 32))
        got = np.concatenate([model.run({inp.name: s[None].transpose(0, 2, 3, 1)})[out.name] for s in samples])
    diff, cosine = float(np.abs(got - want).max()), float(row_cosines(got.astype(np.float64), want).min())
    print(f"twin vs fp32 copy on {len(samples)} samples: max |diff| {diff:.3g}, min cosine {cosine:.9f}")
    assert len(samples) == 32 and diff <= 1e-4 and cosine > 0.99999, (diff, cosine)
    # the report records what was measured (onnxruntime's optimisation level may move the last float bits)
    assert (twin["samples"], twin["max_abs_diff"], twin["min_cosine"]) == (32, pytest.approx(diff, abs=1e-6),
                                                                            pytest.approx(cosine, abs=1e-9))  # fmt: skip
    assert "TFLite twin (LiteRT) vs fp32 copy on 32 samples" in (net / "report.md").read_text()


def test_build_ships_the_twin(converted, tmp_path, capsys):
    capsys.readouterr()
    assert main(["build", "--model", str(converted / "net"), "-o", str(tmp_path), "--no-wheels", "--json"]) == 0
    bundle = json.loads(capsys.readouterr().out)
    manifest = json.loads((Path(bundle["folder"]) / "manifest.json").read_text())
    assert any(f["path"].endswith("emb.fp32.tflite") for f in manifest["files"])


@pytest.fixture(scope="module")
def converted_int8(converted):
    argv = ["convert", "model", str(converted / "emb.onnx"), "--target", "rpi4", "--precision", "int8", "--calib",
            str(converted / "calib.npz"), "--eval", str(converted / "eval.npz"), "--task", "embedding", "--input",
            "x=1x3x16x16", "--format", "both", "-o", str(converted / "net8"), "--json"]  # fmt: skip
    assert main(argv) == 0
    return converted / "net8"


def test_the_int8_twin_is_full_integer(converted_int8):
    from converters.tflite.convert import graph_summary
    from edge.runtime import open_model

    twin = converted_int8 / "emb.int8.tflite"
    with open_model(twin, threads=1, backend="litert") as model:
        (inp,), (out,) = model.inputs, model.outputs
    assert (inp.shape, inp.dtype, out.shape, out.dtype) == ((1, 16, 16, 3), np.int8, (1, 32), np.int8)
    assert inp.quantization is not None and out.quantization is not None
    graph = graph_summary(twin)
    # every conv / dense weight int8 and no float island: no QUANTIZE / DEQUANTIZE op anywhere
    assert graph["weights"] == {"int8": 3}, graph
    assert graph["ops"]["CONV_2D"] == 2 and graph["ops"]["FULLY_CONNECTED"] == 1, graph
    assert "QUANTIZE" not in graph["ops"] and "DEQUANTIZE" not in graph["ops"], graph


def test_the_int8_twin_passes_the_gate_against_the_source(converted_int8):
    report = json.loads((converted_int8 / "report.json").read_text())
    assert report["passed"] is True and (converted_int8 / "models.json").is_file()
    assert report["files"]["tflite"]["file"] == "emb.int8.tflite" and report["shipped"] == "emb.int8.ort"
    twin = report["gate"]["figures"]["tflite"]
    assert (twin["file"], twin["variant"], twin["against"], twin["samples"], twin["passed"]) == (
        "emb.int8.tflite", "int8", "source", 32, True)  # fmt: skip
    emb = twin["embedding"]
    print("int8 twin vs source:", emb, twin["outputs"])
    assert emb["samples"] == 32 and emb["cosine_mean"] >= 0.99 and emb["rank_agreement"] >= 0.9, emb
    assert twin["input"]["dtype"] == "int8" and twin["quantized_outputs"]["emb"]["dtype"] == "int8"
    md = (converted_int8 / "report.md").read_text()
    assert "- TFLite INT8 twin `emb.int8.tflite` (full integer, LiteRT) vs the source on 32 samples: PASSED" in md
    assert f"- TFLite twin: embedding: cosine to the source mean {emb['cosine_mean']:.5f}" in md


def test_the_int8_twin_figures_are_the_device_arithmetic(converted_int8, converted):
    """Run the twin as a device would (quantize the input, dequantize the output) and the source on
    onnxruntime: the report's figures are these (up to the float rounding of the source's threads)."""
    from converters.byom.gate import measure_embedding
    from edge.runtime import open_model

    samples = np.load(converted / "eval.npz")["x"]
    with open_model(converted / "emb.onnx", threads=1) as source:
        want = np.concatenate([source.run({"x": s[None]})["emb"] for s in samples])
    with open_model(converted_int8 / "emb.int8.tflite", threads=1, backend="litert") as model:
        (inp,), (out,) = model.inputs, model.outputs
        (s_in, z_in), (s_out, z_out) = inp.quantization, out.quantization
        got = []
        for s in samples:
            q = np.clip(np.round(s[None].transpose(0, 2, 3, 1).astype(np.float64) / s_in) + z_in, -128, 127)
            y = model.run({inp.name: q.astype(np.int8)})[out.name]
            got.append(s_out * (y.astype(np.int64) - z_out))
    figures = measure_embedding(want, np.concatenate(got).astype(np.float32))
    twin = json.loads((converted_int8 / "report.json").read_text())["gate"]["figures"]["tflite"]
    assert figures == pytest.approx(twin["embedding"], rel=1e-9, abs=1e-9)


def test_a_twin_that_misses_the_gate_is_listed(converted_int8, converted):
    from converters.byom.gate import GateThresholds, Task
    from converters.byom.tflite_twin import gate_twin
    from edge.runtime import open_model

    samples = np.load(converted / "eval.npz")["x"]
    with open_model(converted / "emb.onnx", threads=1) as source:
        want = np.concatenate([source.run({"x": s[None]})["emb"] for s in samples])
    figures, missed = gate_twin(converted_int8 / "emb.int8.tflite", samples, (["emb"], [want]), Task.EMBEDDING,
                                GateThresholds(min_cosine=1.0))  # fmt: skip
    e = figures["embedding"]
    assert figures["passed"] is False
    assert missed == [
        f"TFLite twin emb.int8.tflite: embedding: mean cosine to the source {e['cosine_mean']:.5f} < --min-cosine 1 "
        f"(32 samples; min {e['cosine_min']:.5f})"
    ]


def test_build_ships_the_int8_twin(converted_int8, tmp_path, capsys):
    capsys.readouterr()
    assert main(["build", "--model", str(converted_int8), "-o", str(tmp_path), "--no-wheels", "--json"]) == 0
    bundle = json.loads(capsys.readouterr().out)
    manifest = json.loads((Path(bundle["folder"]) / "manifest.json").read_text())
    shipped = {Path(f["path"]).name for f in manifest["files"]}
    assert {"emb.int8.tflite", "emb.int8.ort", "emb.int8.onnx"} <= shipped, shipped
    (model,) = manifest["models"]
    assert model["metrics"]["figures"]["tflite"]["passed"] is True


# --- models that are not images: inputs kept as the ONNX model has them (onnx2tf -kat) ------------------------


def _write_id_pooler(path: Path, vocab: int = 50, tokens: int = 12, width: int = 16) -> Path:
    """ids [1, tokens] int64 -> Gather from an embedding table [vocab, width] -> Erf -> ReduceMean over tokens ->
    L2-normalised (x / ReduceL2(x)) -> emb [1, width], at opset 18 (axes as inputs): a sentence encoder's ends,
    with the two ops onnx2tf 1.29.24 does not take as they are (Erf becomes a Flex op; ReduceL2 with an axes
    input fails), which ``converters.tflite.keep_layout`` works around."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    table = np.random.default_rng(5).standard_normal((vocab, width)).astype(np.float32)
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["e"], axis=0),
        helper.make_node("Erf", ["e"], ["g"]),
        helper.make_node("ReduceMean", ["g", "tok_axis"], ["m"], keepdims=0),
        helper.make_node("ReduceL2", ["m", "feat_axis"], ["n"], keepdims=1),
        helper.make_node("Div", ["m", "n"], ["emb"]),
    ]
    inits = [numpy_helper.from_array(table, "table"), numpy_helper.from_array(np.array([1], np.int64), "tok_axis"),
             numpy_helper.from_array(np.array([-1], np.int64), "feat_axis")]  # fmt: skip
    graph = helper.make_graph(
        nodes,
        "id_pooler",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, tokens])],
        [helper.make_tensor_value_info("emb", TensorProto.FLOAT, [1, width])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


#: (model, its --input flags, the evaluation input's name, its ONNX shape and dtype)
TENSOR_MODELS = {
    "tok": (["--input", "x=1x8x64"], "x", (1, 8, 64), np.float32),  # testsupport/byom_models.write_token_encoder
    "ids": ([], "ids", (1, 12), np.int64),
}


@pytest.fixture(scope="module", params=sorted(TENSOR_MODELS))
def converted_tensors(request, tmp_path_factory):
    """``convert model --format tflite`` at fp32 of a model that is not an image, with every proxy pointing at a
    closed port: onnx2tf must not download anything (it would fail)."""
    from testsupport.byom_models import write_npz, write_token_encoder

    install_on_first_use(ONNX2TF, "the user-model TFLite twin test (tests/integration/test_byom_tflite_twin.py)")
    name = request.param
    extra, input_name, shape, dtype = TENSOR_MODELS[name]
    d = tmp_path_factory.mktemp(f"byom-twin-{name}")
    rng = np.random.default_rng(11)
    if name == "tok":
        write_token_encoder(d / "tok.onnx")
        samples = rng.standard_normal((32, *shape[1:])).astype(np.float32)
    else:
        _write_id_pooler(d / "ids.onnx")
        samples = rng.integers(0, 50, (32, *shape[1:])).astype(np.int64)
    write_npz(d / "eval.npz", **{input_name: samples})
    argv = ["convert", "model", str(d / f"{name}.onnx"), "--target", "rpi4", "--precision", "fp32", "--eval",
            str(d / "eval.npz"), "--task", "embedding", *extra, "--format", "tflite", "-o", str(d / "net"), "--json"]  # fmt: skip
    with pytest.MonkeyPatch.context() as env:
        for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
            env.setenv(var, "http://127.0.0.1:9")
        env.delenv("NO_PROXY", raising=False)
        env.delenv("no_proxy", raising=False)
        assert main(argv) == 0
    return name, d, TENSOR_MODELS[name]


def test_a_tensor_model_twin_keeps_the_onnx_inputs_and_equals_the_fp32_copy(converted_tensors):
    """The twin's input is the ONNX input (not transposed, same dtype), and on LiteRT, sample by sample, it gives
    the fp32 copy's output on onnxruntime within 1e-4 (run here by hand, and as the report records)."""
    from edge.runtime import open_model

    name, d, (_, input_name, shape, dtype) = converted_tensors
    net = d / "net"
    twin = net / f"{name}.fp32.tflite"
    report = json.loads((net / "report.json").read_text())
    record = report["gate"]["figures"]["tflite"]
    assert report["passed"] is True and report["files"]["tflite"]["file"] == twin.name and twin.is_file()
    assert record["layout"] == "ONNX" and record["samples"] == 32 and record["max_abs_diff"] <= 1e-4, record
    assert [(i["name"], tuple(i["shape"]), i["dtype"]) for i in record["inputs"]] == [
        (input_name, shape, np.dtype(dtype).name)]  # fmt: skip
    samples = np.load(d / "eval.npz")[input_name]
    with open_model(twin, threads=1) as lite, open_model(net / f"{name}.fp32.onnx", threads=1) as ref:
        (inp,), (out,) = lite.inputs, lite.outputs  # LiteRT's tensor names, not the signature's
        assert (tuple(inp.shape), np.dtype(inp.dtype)) == (shape, np.dtype(dtype))
        got = np.concatenate([lite.run({inp.name: s[None]})[out.name] for s in samples])
        want = np.concatenate([ref.run({input_name: s[None]})["emb"] for s in samples])
    print(f"{name}: twin vs fp32 copy, max |difference| {np.abs(got - want).max():.3g} on {len(samples)} samples")
    assert got.shape == want.shape and np.abs(got - want).max() <= 1e-4
    assert "inputs as in the ONNX model" in (net / "report.md").read_text()


def test_build_ships_a_tensor_model_twin(converted_tensors, tmp_path, capsys):
    name, d, _ = converted_tensors
    capsys.readouterr()
    assert main(["build", "--model", str(d / "net"), "-o", str(tmp_path), "--no-wheels", "--json"]) == 0
    bundle = json.loads(capsys.readouterr().out)
    manifest = json.loads((Path(bundle["folder"]) / "manifest.json").read_text())
    assert any(f["path"].endswith(f"{name}.fp32.tflite") for f in manifest["files"])
