"""``convert model`` with a ``torch.export`` program (.pt2) made here: exported to ONNX, checked against torch."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from converters.byom.build import ModelJob, convert_model
from converters.byom.gate import Task
from edge.errors import InputError
from edge.profiles import Precision, load_profile
from testsupport.byom_models import image_pairs, write_npz


class _Embedder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.proj = torch.nn.Linear(8 * 16 * 16, 32)

    def forward(self, x):
        return self.proj(torch.relu(self.conv(x)).flatten(1))


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("byom-pt2")
    torch.manual_seed(0)
    program = torch.export.export(
        _Embedder().eval(), (torch.zeros(2, 3, 16, 16),), dynamic_shapes={"x": {0: torch.export.Dim("batch")}}
    )
    torch.export.save(program, str(d / "emb.pt2"))
    write_npz(d / "calib.npz", x=image_pairs(0, 16))
    write_npz(d / "eval.npz", x=image_pairs(1, 16))
    return d


def _job(files: Path, out: Path, **kw) -> ModelJob:
    base: dict = dict(
        model=files / "emb.pt2",
        out_dir=out,
        profile=load_profile("rpi4"),
        precision=Precision.INT8,
        task=Task.EMBEDDING,
        evaluation=files / "eval.npz",
        calibration=files / "calib.npz",
        input_shapes={"x": (4, 3, 16, 16)},
    )
    base.update(kw)
    return ModelJob(**base)


def test_int8_from_a_pt2_passes_against_torch(files, tmp_path):
    out = tmp_path / "out"
    build = convert_model(_job(files, out))
    assert build.passed and build.source.format == "pt2"
    assert sorted(p.name for p in out.iterdir()) == [
        "emb.fp32.onnx", "emb.int8.onnx", "emb.int8.ort", "models.json", "report.json", "report.md",
    ]  # fmt: skip
    # The exporter's ONNX against torch itself, on the evaluation data.
    assert build.figures["fp32_copy"]["outputs"]["linear"]["max_abs"] < 1e-5
    assert build.figures["embedding"]["cosine_mean"] > 0.999 and build.figures["embedding"]["rank_agreement"] == 1.0
    source = json.loads((out / "models.json").read_text())["models"][0]["source"]
    assert source["format"] == "pt2" and source["path"] == str(files / "emb.pt2")


def test_dynamic_batch_of_a_pt2_needs_input(files, tmp_path):
    with pytest.raises(InputError) as err:
        convert_model(_job(files, tmp_path / "out", input_shapes={}))
    message = str(err.value)
    assert message.startswith(f"{files / 'emb.pt2'}: input 'x' has dynamic shape ")
    assert message.endswith("x3x16x16; give its shape with --input x=Nx3x16x16")
    assert not (tmp_path / "out").exists()


def test_a_zip_that_is_not_a_program(files, tmp_path):
    import zipfile

    bad = tmp_path / "model.bin"
    with zipfile.ZipFile(bad, "w") as z:
        z.writestr("hello.txt", "not a program")
    with pytest.raises(InputError) as err:
        convert_model(_job(files, tmp_path / "out", model=bad))
    assert str(err.value).startswith(f"{bad}: a zip archive but not a torch.export program (.pt2), or a corrupt one (")


def test_fp32_from_a_pt2(files, tmp_path):
    build = convert_model(_job(files, tmp_path / "out", precision=Precision.FP32, calibration=None))
    assert build.passed and build.figures["fp32_copy"]["outputs"]["linear"]["max_abs"] < 1e-5
    assert np.isclose(build.figures["embedding"]["cosine_min"], 1.0, atol=1e-6)


def test_cli_json_stays_parseable_through_the_exporter(files, tmp_path, capsys):
    from edge_deploy.cli import main

    argv = ["convert", "model", str(files / "emb.pt2"), "-t", "x86_64-host", "--precision", "fp32"]
    argv += ["--eval", str(files / "eval.npz"), "--input", "x=2x3x16x16", "-o", str(tmp_path / "o"), "--json"]
    assert main(argv) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["source"]["format"] == "pt2" and record["passed"] is True
