"""``converters.package.face_folder``: which convert face folders ``build --model FOLDER`` takes, and the clear
refusals (gate not passed, files changed, another target or precision). The bundle of a real folder is
``tests/integration/test_user_embedder.py::test_the_folder_is_bundled_with_the_daemon_and_its_golden_set``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from converters.package.face_folder import check_target, is_face_folder, read_face_folder
from edge.errors import InputError
from edge.face import models as face_models
from edge.profiles import Precision, load_profile


def _folder(root: Path, precision: str = "fp32", passed: object = True) -> Path:
    """A folder shaped as convert face writes it: model files (bytes only), models.json with their sizes and
    sha256s, the gate's report; an int8 one keeps its fp32 report in fp32/ and each .ort's .onnx beside it."""
    root.mkdir()
    source = {"package": "test", "licence": "CC0-1.0"}
    suffix = ".onnx" if precision == "fp32" else ".ort"
    entries = []
    for role, name in (("embedder", "e"), ("detector.pnet", "p"), ("landmarks.shape5", "s")):
        file = root / (name + (".npz" if role.startswith("landmarks") else suffix))
        file.write_bytes(name.encode() * 64)
        if file.suffix == ".ort":
            file.with_suffix(".onnx").write_bytes(b"graph the gate ran")
        fmt, prec = file.suffix.lstrip("."), precision if role == "embedder" else "fp32"
        entries.append(face_models.describe(file, role, fmt, prec, source))
    face_models.write_models_file(root, entries, "rpi4", "0.1.0")
    report = "report.json" if precision == "fp32" else "quant_report.json"
    (root / report).write_text(json.dumps({"passed": passed}))
    if precision != "fp32":
        (root / "fp32").mkdir()
        (root / "fp32" / "report.json").write_text(json.dumps({"passed": True}))
    return root


def test_a_gated_fp32_folder_ships_its_listed_files_and_reports(tmp_path):
    face = read_face_folder(_folder(tmp_path / "f"))
    assert is_face_folder(face.folder) and face.target == "rpi4" and face.precision is Precision.FP32
    assert face.ship == ("e.onnx", "models.json", "p.onnx", "report.json", "s.npz")


def test_an_int8_folder_ships_the_onnx_the_gate_ran_beside_each_ort(tmp_path):
    face = read_face_folder(_folder(tmp_path / "f", "int8"))
    assert face.precision is Precision.INT8 and face.fp32_report == {"passed": True}
    assert face.ship == ("e.onnx", "e.ort", "models.json", "p.onnx", "p.ort", "quant_report.json", "s.npz")
    check_target(face, load_profile("rpi4"), Precision.INT8)
    with pytest.raises(InputError, match=r"^--precision fp32: .* holds int8 face models; convert it again with --precision fp32$"):
        check_target(face, load_profile("rpi4"), Precision.FP32)
    with pytest.raises(InputError, match=r"^--target rpi5: .* was converted and gated for rpi4; convert it again"):
        check_target(face, load_profile("rpi5"), None)


def test_a_folder_whose_gate_did_not_pass_or_has_no_report_is_refused(tmp_path):
    with pytest.raises(InputError, match=r"quant_report.json: passed = False; only a gated face folder is bundled"):
        read_face_folder(_folder(tmp_path / "failed", "int8", passed=False))
    folder = _folder(tmp_path / "no-report")
    (folder / "report.json").unlink()
    with pytest.raises(InputError, match=r"no-report: no report.json; expected the report 'edge-deploy convert face'"):
        read_face_folder(folder)
    folder = _folder(tmp_path / "no-fp32", "int8")
    (folder / "fp32" / "report.json").unlink()
    with pytest.raises(InputError, match=r"no-fp32/fp32: no report.json"):
        read_face_folder(folder)


def test_a_file_changed_after_the_conversion_is_refused(tmp_path):
    folder = _folder(tmp_path / "f")
    (folder / "e.onnx").write_bytes(b"E" * 64)  # same size, other bytes
    with pytest.raises(InputError, match=r"models\[0\].file = 'e.onnx': sha256 .* but models.json says"):
        read_face_folder(folder)
    (folder / "e.onnx").unlink()
    with pytest.raises(InputError, match=r"models\[0\].file = 'e.onnx' is missing"):
        read_face_folder(folder)


def test_only_a_folder_listing_an_embedder_is_a_face_folder(tmp_path):
    assert not is_face_folder(tmp_path)  # no models.json
    (tmp_path / "models.json").write_text("{not json")
    assert not is_face_folder(tmp_path)
    (tmp_path / "models.json").write_text(json.dumps({"models": [{"role": "model", "file": "m.onnx"}]}))
    assert not is_face_folder(tmp_path)  # a convert model folder
