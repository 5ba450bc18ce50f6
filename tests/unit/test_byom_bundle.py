"""``edge-deploy build --model OUT_DIR``: a passed ``convert model`` folder bundled, signed and verified."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from converters.byom.build import ModelJob, convert_model
from converters.byom.gate import Task
from converters.package.bundle import BuildOptions, build_model_bundle
from converters.package.user_model import read_model_folder
from edge.bundle import MANIFEST_FILE, verify_bundle
from edge.digest import file_sha256
from edge.errors import BundleError, InputError, ValidationError
from edge.profiles import Precision, load_profile
from edge.signing import generate_keypair, load_trusted_keys
from edge_deploy.cli import main
from testsupport.byom_models import write_embedder_files


def _convert(d: Path, out: Path, target: str = "rpi4", calib: str = "calib.npz", **kw) -> Path:
    job = ModelJob(
        model=d / "emb.onnx",
        out_dir=out,
        profile=load_profile(target),
        precision=Precision.INT8,
        task=Task.EMBEDDING,
        evaluation=d / "eval.npz",
        calibration=d / calib,
        input_shapes={"x": (4, 3, 16, 16)},
        **kw,
    )
    convert_model(job)
    return out


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    d = write_embedder_files(tmp_path_factory.mktemp("byom-bundle"))
    _convert(d, d / "net", licence="Apache-2.0")
    _convert(d, d / "plain")
    (d / "keys").mkdir()
    generate_keypair(d / "keys" / "release.key")
    return d


def _build(files: Path, dist: Path, folder: str = "net", **kw):
    opts = BuildOptions(wheels=False, sign_key=files / "keys" / "release.key")
    return build_model_bundle(load_profile("rpi4"), files / folder, dist, dist / "cache", options=opts, **kw)


def test_a_passed_folder_is_bundled_signed_and_verifies(files, tmp_path):
    bundle = _build(files, tmp_path / "dist")
    assert bundle.folder == tmp_path / "dist" / "rpi4-model-net" and bundle.archive is not None
    trusted = load_trusted_keys([files / "keys" / "release.pub"])
    for what in (bundle.folder, bundle.archive):
        report = verify_bundle(what, trusted)
        assert report.models == ("model",) and report.signed_by and report.target == "rpi4"
    manifest = json.loads((bundle.folder / MANIFEST_FILE).read_text())
    (model,) = manifest["models"]
    assert model["kind"] == "model" and model["folder"] == "models/model" and model["precision"] == "int8"
    # Shipped: the .ort, the .onnx the gate ran, models.json and the reports; not the fp32 copy.
    assert model["files"] == ["emb.int8.onnx", "emb.int8.ort", "models.json", "report.json", "report.md"]
    # No daemon service or config: the daemon serves our face/text models, and its config would name models/face.
    assert (bundle.folder / "install.sh").is_file() and (bundle.folder / "profile" / "rpi4.toml").is_file()
    assert not (bundle.folder / "systemd").exists() and not (bundle.folder / "config").exists()
    assert model["sources"] == [
        {
            "model": "emb.onnx",
            "file": str(files / "emb.onnx"),
            "sha256": file_sha256(files / "emb.onnx"),
            "format": "onnx",
            "licence": "Apache-2.0",
            "licence_given_by": "edge-deploy convert model --licence",
        }
    ]
    assert model["metrics"]["passed"] is True and model["metrics"]["task"] == "embedding"
    listed = {f["path"]: f["sha256"] for f in manifest["files"]}
    assert listed["models/model/emb.int8.ort"] == file_sha256(files / "net" / "emb.int8.ort")
    assert {"install.sh", "README.md", "profile/rpi4.toml", "models/model/models.json"} <= set(listed)
    assert not any(p.startswith("golden/") or "fp32" in p for p in listed)
    assert manifest["wheelhouse"] is None


def test_the_licence_is_recorded_explicitly(files, tmp_path):
    (model,) = _build(files, tmp_path / "a", "plain").manifest["models"]
    assert model["sources"][0]["licence"] == "unknown (user model)"
    assert model["sources"][0]["licence_given_by"] == "nobody: no --licence given"
    (model,) = _build(files, tmp_path / "b", "plain", licence="MIT").manifest["models"]
    assert (model["sources"][0]["licence"], model["sources"][0]["licence_given_by"]) == (
        "MIT",
        "edge-deploy build --licence",
    )


def test_a_tampered_bundle_is_refused(files, tmp_path):
    bundle = _build(files, tmp_path / "dist")
    trusted = load_trusted_keys([files / "keys" / "release.pub"])
    ort = bundle.folder / "models" / "model" / "emb.int8.ort"
    data = bytearray(ort.read_bytes())
    data[len(data) // 2] ^= 0xFF
    ort.write_bytes(bytes(data))
    with pytest.raises(BundleError) as err:
        verify_bundle(bundle.folder)
    assert str(err.value).startswith(
        f"{bundle.folder}: 1 file does not match manifest.json:\n  models/model/emb.int8.ort: sha256 "
    )
    # The attack that rewrites the manifest's hash too is caught by the signature.
    manifest = json.loads((bundle.folder / MANIFEST_FILE).read_text())
    for f in manifest["files"]:
        if f["path"] == "models/model/emb.int8.ort":
            f["sha256"] = file_sha256(ort)
    (bundle.folder / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n")
    verify_bundle(bundle.folder)  # consistent again without a trusted key...
    with pytest.raises(BundleError, match="does not verify"):
        verify_bundle(bundle.folder, trusted)  # ...but not signed by it


def test_a_failed_gate_has_no_models_json_and_is_refused(files, tmp_path):
    out = tmp_path / "failed"
    with pytest.raises(ValidationError):
        _convert(files, out, calib="const.npz")
    assert (out / "report.md").is_file() and not (out / "models.json").exists()
    with pytest.raises(InputError) as err:
        build_model_bundle(load_profile("rpi4"), out, tmp_path / "dist", tmp_path / "cache")
    assert str(err.value) == (
        f"--model {out}: no models.json; convert model writes it only when the gate passed (see {out / 'report.md'}): "
        "only gated models are bundled"
    )
    assert not (tmp_path / "dist").exists()


def test_a_folder_changed_after_the_gate_is_refused(files, tmp_path):
    folder = shutil.copytree(files / "net", tmp_path / "net")
    with (folder / "emb.int8.onnx").open("ab") as fh:
        fh.write(b"\0")
    with pytest.raises(InputError, match=r"emb.int8.onnx has sha256 .*, report.json recorded .* \(the folder changed"):
        build_model_bundle(load_profile("rpi4"), folder, tmp_path / "dist", tmp_path / "cache")
    # reached through another flag, or a folder given on its own (emulate FOLDER), the error names it so
    for given_as, named in (("--search", f"--search {folder}"), ("", str(folder))):
        with pytest.raises(InputError) as err:
            read_model_folder(folder, given_as=given_as)
        assert str(err.value).startswith(f"{named}: emb.int8.onnx has sha256 ")
    models = json.loads((folder / "models.json").read_text())
    models["models"][0]["file"] = "../net/emb.int8.ort"
    (folder / "models.json").write_text(json.dumps(models))
    with pytest.raises(InputError, match=r"models.json names file '../net/emb.int8.ort'; expected a file name in the"):
        build_model_bundle(load_profile("rpi4"), folder, tmp_path / "dist", tmp_path / "cache")
    shutil.copy2(files / "net" / "models.json", folder / "models.json")
    (folder / "emb.int8.ort").unlink()
    with pytest.raises(InputError, match=r"emb.int8.ort is named in models.json but missing"):
        build_model_bundle(load_profile("rpi4"), folder, tmp_path / "dist", tmp_path / "cache")


def test_another_target_precision_or_kind_of_folder_is_refused(files, tmp_path):
    with pytest.raises(InputError) as err:
        build_model_bundle(load_profile("rpi5"), files / "net", tmp_path / "dist", tmp_path / "cache")
    assert str(err.value) == (
        f"--target rpi5: {files / 'net'} was converted and gated for rpi4; convert it again for rpi5, or build "
        "with --target rpi4"
    )
    opts = BuildOptions(precision=Precision.FP32, wheels=False)
    with pytest.raises(InputError, match=r"--precision fp32: .* holds a int8 model; convert it again"):
        build_model_bundle(load_profile("rpi4"), files / "net", tmp_path / "dist", tmp_path / "cache", options=opts)
    face = tmp_path / "face"
    face.mkdir()
    (face / "models.json").write_text(json.dumps({"models": [{"role": "embedder", "file": "e.onnx"}]}))
    # a folder listing an embedder is read as a convert face folder (tests/unit/test_face_folder.py)
    with pytest.raises(InputError, match=r"models.json: schema_version = None; expected 1"):
        build_model_bundle(load_profile("rpi4"), face, tmp_path / "dist", tmp_path / "cache")
    (face / "models.json").write_text(json.dumps({"models": [{"role": "detector.pnet", "file": "p.onnx"}]}))
    with pytest.raises(InputError, match=r"role 'detector.pnet', not a convert model folder"):
        build_model_bundle(load_profile("rpi4"), face, tmp_path / "dist", tmp_path / "cache")


def test_cli_build_and_verify(files, tmp_path, capsys):
    dist = tmp_path / "dist"
    key = files / "keys" / "release.key"
    argv = ["build", "--model", str(files / "net"), "-o", str(dist), "--no-wheels", "--sign-key", str(key), "-q"]
    assert main(argv) == 0  # the target is the folder's
    out = capsys.readouterr().out
    assert out.startswith(f"bundle for rpi4: {dist / 'rpi4-model-net'} (")
    assert f"model int8  5 files (from {files / 'net'}); licences Apache-2.0" in out
    pub = str(files / "keys" / "release.pub")
    assert main(["verify", str(dist / "rpi4-model-net.tar.gz"), "--trust", pub]) == 0
    assert "models model" in capsys.readouterr().out
    assert main(["build", "--model", str(tmp_path / "nowhere"), "-o", str(dist), "-q"]) == 3
    assert capsys.readouterr().err == (
        f"Error: --model {tmp_path / 'nowhere'}: no such folder; expected face, slm, all or a convert model output "
        "folder\n"
    )
    assert main(["build", "--model", "face", "-o", str(dist), "-q"]) == 3
    assert "Error: --model face: give the target with --target (one of " in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["build", "--help"])
    assert "edge-deploy build --model out/net -o dist/ --sign-key keys/release.key" in capsys.readouterr().out


def test_a_non_arm_target_is_refused_as_for_our_bundles(files, tmp_path):
    out = _convert(files, tmp_path / "x86", target="x86_64-host")
    with pytest.raises(BundleError, match=r"cpu.arch = 'x86_64'; 'edge-deploy build' makes bundles for aarch64"):
        build_model_bundle(load_profile("x86_64-host"), out, tmp_path / "dist", tmp_path / "cache")
