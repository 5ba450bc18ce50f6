"""edge_deploy's Python API: one import, names loaded on first use, the device side free of the host side."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import edge_deploy as ed
from edge.errors import InputError, ProfileError

REPO = Path(__file__).resolve().parents[2]

#: What a Pi (the device extra) never has, so never imports.
HOST_ONLY = {"converters", "fleet", "torch", "onnx", "onnxscript", "tensorflow", "transformers", "psycopg", "dlib"}

DEVICE_NAMES = ["open_face_pipeline", "Gallery", "load_image", "recognize_image", "TextGenerator", "SamplingConfig",
                "load_profile", "StepProgress", "EdgeDeployError", "InputError"]  # fmt: skip


def _modules_after(code: str) -> set[str]:
    script = f"import json, sys\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    run = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    return {name.split(".")[0] for name in json.loads(run.stdout.splitlines()[-1])}


def test_importing_the_api_and_its_device_names_loads_nothing_of_the_host_side():
    names = ", ".join(f"ed.{name}" for name in [*DEVICE_NAMES, "convert_face", "convert_slm", "convert_model"])
    loaded = _modules_after(f"import edge_deploy as ed\n{names}")
    assert loaded & HOST_ONLY == set()
    assert "edge_deploy" in loaded


def test_the_checker_sees_a_host_module():
    assert "converters" in _modules_after("import edge_deploy as ed\nimport converters.byom.build")


def test_every_public_name_resolves_to_its_home():
    from edge.face.gallery import Gallery
    from edge.text.generator import TextGenerator
    from fleet.store import open_store

    assert set(ed.__all__) == {"__version__", *ed._HOMES} and set(ed.__all__) <= set(dir(ed))
    for name in ed.__all__:
        assert getattr(ed, name) is not None, name
    assert (ed.Gallery, ed.TextGenerator, ed.open_store) == (Gallery, TextGenerator, open_store)
    with pytest.raises(AttributeError, match="module 'edge_deploy' has no attribute 'Galery'"):
        ed.Galery  # noqa: B018


def test_a_bad_choice_is_an_input_error_naming_the_choices(tmp_path: Path):
    with pytest.raises(InputError) as err:
        ed.convert_model("net.onnx", "rpi4", tmp_path, evaluation="eval.npz", precision="int3")
    assert str(err.value) == "precision = 'int3'; expected one of fp32, fp16, int8, int4"
    with pytest.raises(InputError) as err:
        ed.convert_model("net.onnx", "rpi4", tmp_path, evaluation="eval.npz", task="ranking")
    assert str(err.value) == "task = 'ranking'; expected one of embedding, classification, raw"
    with pytest.raises(ProfileError):
        ed.convert_face("rpi9", tmp_path)
