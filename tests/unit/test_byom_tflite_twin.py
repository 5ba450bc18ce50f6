"""``convert model --format tflite``: what the TFLite twin (onnx2tf) cannot take is refused before any work,
with the exact text users see (no onnx2tf needed: nothing is converted). The conversions themselves are in
tests/integration/test_byom_tflite_twin.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from edge_deploy.cli import main
from testsupport.byom_models import write_embedder, write_embedder_files, write_token_encoder


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    d = write_embedder_files(tmp_path_factory.mktemp("byom-twin-refusals"))
    write_embedder(d / "nhwc.onnx", nhwc=True)
    write_embedder(d / "u8.onnx", uint8=True)
    write_token_encoder(d / "tok.onnx")
    return d


INT8 = ["--precision", "int8", "--calib", "CALIB"]


@pytest.mark.parametrize(
    ("model", "extra", "message"),
    [
        ("emb", ["--precision", "int8", "--dynamic"], "--format tflite with --dynamic: the INT8 TFLite twin is full "
         "integer, calibrated on --calib (static INT8); drop --dynamic and give --calib, or drop --format tflite"),
        ("emb", ["--precision", "int8", "--weight-only"], "--format tflite with --weight-only: the INT8 TFLite twin "
         "is full integer, calibrated on --calib (static INT8); drop --weight-only and give --calib, or drop "
         "--format tflite"),
        ("emb", [*INT8, "--input", "x=4x3x16x16"], "--format tflite: MODEL has inputs x=4x3x16x16 float32; the "
         "TFLite twin (onnx2tf) takes inputs of batch 1 and dtype float32, int64 or int32 (give --input NAME=1x... "
         "for a dynamic batch)"),
        ("emb", ["--precision", "fp32", "--input", "x=4x3x16x16"], "--format tflite: MODEL has inputs x=4x3x16x16 "
         "float32; the TFLite twin (onnx2tf) takes inputs of batch 1 and dtype float32, int64 or int32 (give "
         "--input NAME=1x... for a dynamic batch)"),
        ("u8", [*INT8, "--input", "x=1x3x16x16"], "--format tflite: MODEL has inputs x=1x3x16x16 uint8; the TFLite "
         "twin (onnx2tf) takes inputs of batch 1 and dtype float32, int64 or int32 (give --input NAME=1x... for a "
         "dynamic batch)"),
        ("u8", ["--precision", "fp32", "--input", "x=1x3x16x16"], "--format tflite: MODEL has inputs x=1x3x16x16 "
         "uint8; the TFLite twin (onnx2tf) takes inputs of batch 1 and dtype float32, int64 or int32 (give --input "
         "NAME=1x... for a dynamic batch)"),
        ("tok", ["--precision", "fp32", "--input", "x=2x8x64"], "--format tflite: MODEL has inputs x=2x8x64 float32; "
         "the TFLite twin (onnx2tf) takes inputs of batch 1 and dtype float32, int64 or int32 (give --input "
         "NAME=1x... for a dynamic batch)"),
        # the fp32 twin takes a token encoder; the INT8 twin stays image-only
        ("tok", [*INT8, "--input", "x=1x8x64"], "--format tflite --precision int8: MODEL has inputs x=1x8x64 float32; "
         "the INT8 TFLite twin (onnx2tf, full integer) takes one float32 NCHW image input of batch 1 with 3 channels "
         "(onnx2tf calibrates 3-channel images only); use --precision fp32 for this model's TFLite twin"),
        ("nhwc", [*INT8, "--input", "x=1x16x16x3"], "--format tflite --precision int8: MODEL has inputs x=1x16x16x3 "
         "float32; the INT8 TFLite twin (onnx2tf, full integer) takes one float32 NCHW image input of batch 1 with "
         "3 channels (onnx2tf calibrates 3-channel images only); use --precision fp32 for this model's TFLite twin"),
    ],
)  # fmt: skip
def test_what_the_twin_cannot_take_is_refused_before_any_work(files, tmp_path, capsys, model, extra, message):
    extra = [str(files / "calib.npz") if e == "CALIB" else e for e in extra]  # refused before the data is read
    argv = ["convert", "model", str(files / f"{model}.onnx"), "--target", "rpi4", "--eval", str(files / "eval.npz"),
            "--task", "embedding", "--format", "tflite", "-o", str(tmp_path / "x"), *extra]  # fmt: skip
    assert main(argv) == 3
    assert capsys.readouterr().err == "Error: " + message.replace("MODEL", str(files / f"{model}.onnx")) + "\n"
    assert not (tmp_path / "x").exists()
    assert [p.name for p in tmp_path.iterdir()] == []  # no .partial folder either: refused before any work


def test_both_refuses_what_tflite_refuses(files, tmp_path, capsys):
    argv = ["convert", "model", str(files / "emb.onnx"), "--target", "rpi4", "--precision", "int8", "--dynamic",
            "--eval", str(files / "eval.npz"), "--format", "both", "-o", str(tmp_path / "x")]  # fmt: skip
    assert main(argv) == 3
    assert capsys.readouterr().err.startswith("Error: --format tflite with --dynamic: ")
