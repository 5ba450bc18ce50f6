"""``convert model`` with a ``.tflite`` source: MediaPipe's BlazeFace short-range detector (the mediapipe 0.10.21
wheel, Apache-2.0; downloaded once into the build cache by ``converters.face.blazeface.fetch_blazeface``) as a
user would bring it: translated to ONNX (``converters.tflite.frontend``), the translation checked against the
``.tflite`` run on LiteRT on the user's data, gated, bundled; INT8 on random data misses the raw gate."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from edge_deploy.cli import main

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    from converters.face.blazeface import fetch_blazeface

    d = tmp_path_factory.mktemp("byom-tflite")
    shutil.copyfile(fetch_blazeface(), d / "blaze.tflite")
    rng = np.random.default_rng(0)
    np.savez(d / "eval.npz", input=rng.uniform(-1, 1, (16, 128, 128, 3)).astype(np.float32))
    np.savez(d / "calib.npz", input=rng.uniform(-1, 1, (32, 128, 128, 3)).astype(np.float32))
    return d


def _argv(files: Path, out: Path, *extra: str) -> list[str]:
    return ["convert", "model", str(files / "blaze.tflite"), "--target", "rpi4", "--eval", str(files / "eval.npz"),
            "--task", "raw", "--licence", "Apache-2.0", "-o", str(out), "--json", *extra]  # fmt: skip


def test_fp32_translation_equals_the_tflite_on_litert_and_is_bundled(files, tmp_path, capsys):
    out = tmp_path / "net"
    assert main(_argv(files, out, "--precision", "fp32")) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["passed"] is True and record["shipped"] == "blaze.fp32.onnx"
    assert record["inputs"] == [{"name": "input", "dtype": "float32", "shape": [1, 128, 128, 3]}]
    copy = record["gate"]["figures"]["fp32_copy"]["outputs"]
    assert set(copy) == {"regressors", "classificators"}
    assert all(o["max_abs"] < 1e-3 for o in copy.values()), copy  # measured 7.6e-5 on box offsets up to ~140
    source = json.loads((out / "models.json").read_text())["models"][0]["source"]
    assert source["format"] == "tflite" and source["licence"] == "Apache-2.0"
    assert main(["build", "--model", str(out), "-o", str(tmp_path / "dist"), "--no-wheels", "--json"]) == 0
    bundle = json.loads(capsys.readouterr().out)
    assert main(["verify", bundle["folder"]]) == 0


def test_int8_on_random_data_misses_the_raw_gate(files, tmp_path, capsys):
    out = tmp_path / "net8"
    argv = _argv(files, out, "--precision", "int8", "--calib", str(files / "calib.npz"))
    assert main(argv) == 5
    err = capsys.readouterr().err
    assert "int8 model for rpi4 failed the raw gate" in err and "> rpi4.toml thresholds.model_max_rel_error 0.05" in err
    assert not (out / "models.json").exists() and (out / "report.md").is_file()


def test_a_tflite_shape_cannot_be_changed(files, tmp_path, capsys):
    assert main(_argv(files, tmp_path / "x", "--precision", "fp32", "--input", "input=2x128x128x3")) == 3
    err = capsys.readouterr().err
    assert (
        err
        == f"Error: --input input=2x128x128x3: dimension 0 is fixed to 1 in {files / 'blaze.tflite'} (1x128x128x3)\n"
    )


def test_a_damaged_tflite_is_one_line_naming_the_file(files, tmp_path, capsys):
    bad = tmp_path / "bad.tflite"
    bad.write_bytes((files / "blaze.tflite").read_bytes()[:5000])
    argv = ["convert", "model", str(bad), "--target", "rpi4", "--precision", "fp32", "--eval", str(files / "eval.npz"),
            "--task", "raw", "-o", str(tmp_path / "out")]  # fmt: skip
    assert main(argv) == 3
    assert (
        capsys.readouterr().err
        == f"Error: {bad}: LiteRT could not load the model (The model is not a valid Flatbuffer buffer)\n"
    )
    assert not (tmp_path / "out").exists()
