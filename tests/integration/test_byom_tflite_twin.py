"""``convert model --format tflite``: the fp32 TFLite twin of a user's model by onnx2tf (``.venv-onnx2tf``,
created by scripts/setup_onnx2tf.sh if missing), checked on LiteRT against the fp32 copy on the evaluation
data, recorded in the report and shipped by ``build --model``. The model is the test embedder of
tests/unit/byom_models.py (Conv, ReLU, Gemm), fed at 1 x 3 x 16 x 16."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from edge_deploy.cli import main
from tests.integration.needs import ONNX2TF, install_on_first_use

pytestmark = pytest.mark.integration

pytest.importorskip("onnx")
pytest.importorskip("ai_edge_litert")


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    from tests.unit.byom_models import write_embedder_files

    install_on_first_use(ONNX2TF, "the user-model TFLite twin test (tests/integration/test_byom_tflite_twin.py)")
    d = write_embedder_files(tmp_path_factory.mktemp("byom-twin"))
    argv = ["convert", "model", str(d / "emb.onnx"), "--target", "rpi4", "--precision", "fp32", "--eval",
            str(d / "eval.npz"), "--task", "embedding", "--input", "x=1x3x16x16", "--format", "tflite",
            "-o", str(d / "net"), "--json"]  # fmt: skip
    assert main(argv) == 0
    return d


def test_the_twin_equals_the_fp32_copy_on_litert_and_is_recorded(converted):
    from edge.runtime import open_model

    net = converted / "net"
    report = json.loads((net / "report.json").read_text())
    twin = report["gate"]["figures"]["tflite"]
    assert twin["samples"] == 32 and twin["max_abs_diff"] <= 1e-4 and twin["min_cosine"] > 0.99999, twin
    assert report["files"]["tflite"]["file"] == "emb.fp32.tflite" and (net / "emb.fp32.tflite").is_file()
    assert "TFLite twin (LiteRT) vs fp32 copy on 32 samples" in (net / "report.md").read_text()
    with open_model(net / "emb.fp32.tflite", threads=1) as model:  # NHWC in, as onnx2tf writes it
        assert model.inputs[0].shape == (1, 16, 16, 3)
        out = model.run({model.inputs[0].name: np.zeros((1, 16, 16, 3), np.float32)})
        assert next(iter(out.values())).shape == (1, 32)


def test_build_ships_the_twin(converted, tmp_path, capsys):
    capsys.readouterr()
    assert main(["build", "--model", str(converted / "net"), "-o", str(tmp_path), "--no-wheels", "--json"]) == 0
    bundle = json.loads(capsys.readouterr().out)
    manifest = json.loads((Path(bundle["folder"]) / "manifest.json").read_text())
    assert any(f["path"].endswith("emb.fp32.tflite") for f in manifest["files"])


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--precision", "int8", "--dynamic"], "--format tflite with --precision int8: the TFLite twin of a user's "
         "model is fp32 (an INT8 TFLite of it is not built yet)"),
        (["--precision", "fp32", "--input", "x=4x3x16x16"], "--format tflite: EMB has inputs x=4x3x16x16 float32; "
         "the TFLite twin (onnx2tf) takes one float32 NCHW image input of batch 1 (give --input NAME=1xCxHxW for a "
         "dynamic batch)"),
    ],
)  # fmt: skip
def test_what_the_twin_cannot_take_is_refused_before_any_work(converted, tmp_path, capsys, extra, message):
    argv = ["convert", "model", str(converted / "emb.onnx"), "--target", "rpi4", "--eval", str(converted / "eval.npz"),
            "--task", "embedding", "--format", "tflite", "-o", str(tmp_path / "x"), *extra]  # fmt: skip
    assert main(argv) == 3
    assert capsys.readouterr().err == "Error: " + message.replace("EMB", str(converted / "emb.onnx")) + "\n"
    assert not (tmp_path / "x").exists()
