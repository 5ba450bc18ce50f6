"""A real rpi4 face bundle: real models, real aarch64 wheels from PyPI, verification, cache, install.sh.

The build cache lives in ``.cache/test_build/`` at the repository root (gitignored) and is reused across runs:
the first run converts the face models (~2-3 min on 2 busy cores) and downloads ~100 MB of wheels; later runs
take the stages and wheels from the cache. Which build hit the cache is asserted from the returned Bundle's
flags, never from timings.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from converters.face.blazeface import VERSION as BLAZEFACE_WHEEL_VERSION
from converters.package.bundle import BuildOptions, build_bundle
from converters.package.stages import STAGES
from converters.package.wheelhouse import WheelhouseSpec, _check_platform_tags, check_offline
from edge.bundle import extract_bundle, verify_bundle
from edge.digest import file_sha256
from edge.errors import BundleError
from edge.profiles import Precision, load_profile, load_profile_file
from edge_deploy.build_commands import add_build, add_verify

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache" / "test_build"
# The face stage at the profile's int8 needs converters/face/quantize.py; the bundle machinery is the same at fp32.
OPTIONS = BuildOptions(precision=Precision.FP32)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _keys(bundle) -> tuple[str, str]:
    """The face stage's cache key and the hash of the sources edge-deploy's wheel was built from."""
    return bundle.manifest["models"][0]["cache_key"], bundle.manifest["wheelhouse"]["edge_deploy_wheel"]["sources_hash"]


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """Two consecutive builds with the same inputs: (earlier, later).

    Other work may edit the sources between two builds (this tree is shared); a build whose keys changed
    must miss, and is followed by another, until two consecutive builds have the same keys (at most 3 tries).
    """
    out = tmp_path_factory.mktemp("dist")
    profile = load_profile("rpi4")
    earlier = build_bundle(profile, ["face"], out, CACHE, options=OPTIONS)
    for _ in range(3):
        later = build_bundle(profile, ["face"], out, CACHE, options=OPTIONS)
        if _keys(later) == _keys(earlier):
            return earlier, later
        assert later.stage_cache_hits == {"face": False} or later.wheel_cache_hit is False
        earlier = later
    pytest.fail("the sources kept changing between builds; run again on a quiet tree")


@pytest.fixture(scope="module")
def bundle(builds):
    return builds[1]


def test_bundle_and_archive_verify(bundle) -> None:
    assert bundle.folder.name == "rpi4-face" and bundle.archive.name == "rpi4-face.tar.gz"
    folder_report = verify_bundle(bundle.folder)
    archive_report = verify_bundle(bundle.archive)
    assert folder_report.files == archive_report.files == len(bundle.manifest["files"])
    assert folder_report.total_bytes == bundle.total_bytes
    assert folder_report.models == ("face",)


def test_second_build_comes_from_the_cache(builds) -> None:
    first, second = builds
    assert second.stage_cache_hits == {"face": True}
    assert second.wheel_cache_hit is True
    files = lambda b: {f["path"]: f["sha256"] for f in b.manifest["files"]}  # noqa: E731
    assert files(first) == files(second)


def test_cache_key_follows_the_profile_file(tmp_path: Path) -> None:
    profile = load_profile("rpi4")
    copy = tmp_path / "rpi4.toml"
    copy.write_text(Path(profile.source).read_text() + "\n# edited\n")
    stage = STAGES["face"]
    key = stage.cache_key(profile, Precision.FP32)
    assert key == stage.cache_key(profile, Precision.FP32)
    assert key != stage.cache_key(load_profile_file(copy), Precision.FP32)
    assert key != stage.cache_key(profile, Precision.INT8)


def test_cache_key_follows_the_library_versions(monkeypatch) -> None:
    """A folder built under another opencv is built again: the installed versions key the cache."""
    from converters.package import stages
    from converters.versions import library_versions

    profile, stage = load_profile("rpi4"), STAGES["face"]
    key = stage.cache_key(profile, Precision.FP32)
    other = {**library_versions(), "opencv-python-headless": "4.14.0.0"}
    monkeypatch.setattr(stages, "library_versions", lambda: other)
    assert key != stage.cache_key(profile, Precision.FP32)


def test_manifest_records_sources_licences_hashes_and_metrics(bundle) -> None:
    m = bundle.manifest
    assert (m["schema_version"], m["format"], m["target"], m["tool"]) == (
        1,
        "edge-deploy-bundle",
        "rpi4",
        "edge-deploy",
    )
    assert m["profile"]["sha256"] == _sha(REPO / "firmware_configs" / "rpi4.toml")
    (face,) = m["models"]
    assert (face["kind"], face["precision"], face["format"], face["folder"]) == (
        "face",
        "fp32",
        "npz+onnx+tflite",  # the profile runs BlazeFace on LiteRT: its .tflite ships
        "models/face",
    )
    licences = {s["package"]: (s["licence"], s["version"]) for s in face["sources"]}
    assert licences == {
        "face-recognition-models": ("CC0-1.0", importlib.metadata.version("face-recognition-models")),
        "facenet-pytorch": ("MIT", importlib.metadata.version("facenet-pytorch")),
        "mediapipe": ("Apache-2.0", BLAZEFACE_WHEEL_VERSION),  # the profile's detector, BlazeFace
    }
    assert face["metrics"]["passed"] is True
    assert face["metrics"]["onnx_vs_source_max_abs_diff"] < 1e-5
    assert face["quantization"] == {"method": "none"}
    listed = {f["path"]: f for f in m["files"]}
    for path, entry in listed.items():
        real = bundle.folder / path
        assert (real.stat().st_size, _sha(real)) == (entry["size"], entry["sha256"]), path
    models_json = json.loads((bundle.folder / "models/face/models.json").read_text())
    for model in models_json["models"]:
        assert listed[f"models/face/{model['file']}"]["sha256"] == model["sha256"]
    for path in ("install.sh", "README.md", "profile/rpi4.toml", "wheels/requirements.txt"):
        assert path in listed


def test_wheelhouse_is_aarch64_and_resolves_offline(bundle) -> None:
    wh = bundle.manifest["wheelhouse"]
    assert wh["python_version"] == "3.11" and wh["abis"] == ["cp311", "abi3", "none"]
    assert "manylinux2014_aarch64" in wh["platforms"] and "manylinux_2_36_aarch64" in wh["platforms"]
    wheels = bundle.folder / "wheels"
    _check_platform_tags(wheels)
    for name in ("numpy", "onnxruntime", "ai_edge_litert", "opencv_python_headless"):
        (wheel,) = wheels.glob(f"{name}-*.whl")
        assert wheel.stem.endswith("aarch64"), wheel.name
    # A fresh offline dry run from the bundle's own folder, as install.sh will resolve it on the Pi.
    spec = WheelhouseSpec(tuple(wh["requirements"]))
    resolved = check_offline(spec, wheels, tuple(wh["install"]))
    assert resolved == wh["resolved"]
    for name in ("edge-deploy", "numpy", "onnxruntime", "ai-edge-litert", "opencv-python-headless", "paho-mqtt"):
        assert name in resolved, name
    # The Pi gets the lock's versions (constraints.txt), the ones the host built and tested with.
    pins = dict(line.split("==") for line in (REPO / "constraints.txt").read_text().splitlines() if "==" in line)
    third = {canonicalize_name(n): v for n, v in resolved.items() if n != "edge-deploy"}
    assert third == {n: pins[n] for n in third}
    assert wh["constraints_sha256"] == file_sha256(REPO / "constraints.txt")
    assert (wheels / "requirements.txt").read_text() == "edge-deploy[device]==0.1.0\n"


def test_tampered_copy_is_refused_naming_the_file(bundle, tmp_path: Path) -> None:
    copy = tmp_path / "rpi4-face"
    shutil.copytree(bundle.folder, copy)
    embedder = copy / "models/face/face_embedder.onnx"
    data = bytearray(embedder.read_bytes())
    data[len(data) // 2] ^= 0xFF
    embedder.write_bytes(bytes(data))
    (copy / "models/face/notes.txt").write_text("stray")
    with pytest.raises(BundleError) as err:
        verify_bundle(copy)
    listed = {f["path"]: f["sha256"] for f in bundle.manifest["files"]}
    assert str(err.value) == (
        f"{copy}: 2 files do not match manifest.json:\n"
        f"  models/face/face_embedder.onnx: sha256 {_sha(embedder)[:12]}… != manifest's "
        f"{listed['models/face/face_embedder.onnx'][:12]}…\n"
        "  models/face/notes.txt: not listed in manifest.json (stray file)"
    )


def test_archive_extracts_to_a_verified_folder(bundle, tmp_path: Path) -> None:
    folder = extract_bundle(bundle.archive, tmp_path / "pi")
    assert folder == tmp_path / "pi" / "rpi4-face"
    assert verify_bundle(folder).files == len(bundle.manifest["files"])
    assert (folder / "install.sh").stat().st_mode & 0o777 == 0o755


def _cli(argv: list[str], capsys) -> tuple[int, str]:
    parser = argparse.ArgumentParser(prog="edge-deploy")
    sub = parser.add_subparsers(dest="command", required=True)
    add_build(sub)
    add_verify(sub)
    args = parser.parse_args(argv)
    code = args.func(args)
    return code, capsys.readouterr().out


def test_cli_build_and_verify(bundle, tmp_path: Path, capsys) -> None:
    argv = ["build", "-t", "rpi4", "-m", "face", "-o", str(tmp_path), "--precision", "fp32", "--no-wheels"]
    code, out = _cli([*argv, "--cache", str(CACHE), "--json", "--quiet"], capsys)
    record = json.loads(out)
    assert code == 0 and record["stage_cache_hits"] == {"face": True} and record["wheel_cache_hit"] is None
    code, out = _cli(["verify", record["archive"], "--json"], capsys)
    assert code == 0
    assert json.loads(out) == {
        "bundle": record["archive"],
        "ok": True,
        "target": "rpi4",
        "tool_version": "0.1.0",
        "files": record["files"],
        "total_bytes": record["total_bytes"],
        "models": ["face"],
        "signed_by": None,  # no --trust: the signature is not checked (issue 16)
    }


def _install(bundle_dir: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = ["sh", str(bundle_dir / "install.sh"), "--python", sys.executable, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_install_sh_dry_run_with_prefix(bundle, tmp_path: Path) -> None:
    prefix = tmp_path / "root"
    done = _install(bundle.folder, "--dry-run", "--prefix", str(prefix))
    assert done.returncode == 0, done.stderr
    n = len(bundle.manifest["files"])
    app = f"{prefix}/opt/edge-deploy"
    lines = done.stdout.splitlines()
    assert f"install.sh: {n} files, {bundle.total_bytes} bytes: all match (target rpi4)" in lines
    assert f"would run: {sys.executable} -m venv {app}/venv" in lines
    assert f"would run: cp -R {bundle.folder} {app}/bundle.new" in lines
    assert (
        f"would run: {app}/venv/bin/python -m pip install --no-index --find-links {app}/bundle/wheels --upgrade "
        f"-r {app}/bundle/wheels/requirements.txt"
    ) in lines
    assert "install.sh: --prefix: skipping the system user, ownership and systemctl" in lines
    assert not prefix.exists()  # a dry run changes nothing


def test_install_sh_refuses_this_host_and_a_tampered_bundle(bundle, tmp_path: Path) -> None:
    done = _install(bundle.folder, "--prefix", str(tmp_path / "root"))
    py = f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert done.returncode == 3
    assert done.stderr.strip() == (
        f"install.sh: error: this machine is x86_64 with Python {py}; the bundle's wheels are for aarch64 and "
        "Python 3.11 (Raspberry Pi OS bookworm, 64-bit)"
    )
    copy = tmp_path / "rpi4-face"
    shutil.copytree(bundle.folder, copy)
    (copy / "profile/rpi4.toml").write_text("tampered")
    done = _install(copy, "--dry-run", "--prefix", str(tmp_path / "root"))
    assert done.returncode == 6
    assert done.stderr.strip().endswith(
        f"{copy}: 1 file does not match manifest.json:\n  profile/rpi4.toml: size 8 bytes != manifest's "
        f"{(bundle.folder / 'profile/rpi4.toml').stat().st_size}"
    )
    assert not (tmp_path / "root").exists()


def test_install_sh_system_dry_run_plans_the_user(bundle) -> None:
    done = _install(bundle.folder, "--dry-run")
    assert done.returncode == 0, done.stderr
    assert (
        "would run: useradd --system --home-dir /var/lib/edge-deploy --no-create-home --shell /usr/sbin/nologin "
        "edge-deploy" in done.stdout.splitlines()
    )
    assert "would run: chown -R edge-deploy:edge-deploy /var/lib/edge-deploy" in done.stdout.splitlines()


def test_the_profile_s_detector_ships_in_the_bundle(bundle) -> None:
    """rpi4 names BlazeFace full range, tiled (``runtime.face_detector``): its bundle's face folder holds that
    model (its source and licence in models.json and the manifest) and names it in models.json ``detector``, on
    rpi4's ``runtime.face_detector_runtime`` (litert: the .tflite original, models.json ``detector_runtime``);
    the bundle's pipeline runs it without being told (t1.jpg: all 6 people, at BlazeFace's scores, which
    MTCNN's all exceed 0.95: test_face_pipeline)."""
    from converters.face.facedata import EVAL_PHOTOS
    from edge.face.models import Detector, open_face_pipeline, read_models_folder

    assert load_profile("rpi4").runtime.face_detector is Detector.BLAZEFACE_FULL_TILED
    built = bundle
    assert verify_bundle(built.folder).files == len(built.manifest["files"])
    folder = built.folder / "models" / "face"
    assert read_models_folder(folder).detector is Detector.BLAZEFACE_FULL_TILED
    (face,) = built.manifest["models"]
    licences = {s["package"]: s["licence"] for s in face["sources"]}
    shipped = {f["path"] for f in built.manifest["files"]}
    assert licences["mediapipe"] == "Apache-2.0" and {
        "models/face/face_detection_full_range_sparse.onnx", "models/face/face_detection_full_range_sparse.tflite"
    } <= shipped  # fmt: skip
    assert json.loads((folder / "models.json").read_text())["detector_runtime"] == "litert"
    report = json.loads((folder / "report.json").read_text())  # the fp32 checks ran the shipped detector
    assert report["dlib_proof"]["chips_from"].startswith("our pipeline's chips (blazeface-full-tiled box")
    assert report["pipeline_agreement"]["decision_agreement"] >= 0.99 and face["metrics"]["passed"] is True
    t1 = next(p for p in EVAL_PHOTOS if p.name == "t1")
    with open_face_pipeline(folder) as pipeline:
        assert pipeline.detector.backend == "litert"
        faces = pipeline.analyze(t1.load())
    assert len(faces) == len(t1.faces) == 6 and min(f.detection.score for f in faces) < 0.95


@pytest.fixture(scope="module")
def int8_bundle(builds, tmp_path_factory):
    """rpi4 at its profile's precision (int8): quantizes over the cached fp32 stage; models only."""
    out = tmp_path_factory.mktemp("dist-int8")
    return build_bundle(load_profile("rpi4"), ["face"], out, CACHE, options=BuildOptions(wheels=False))


def test_int8_bundle_ships_the_gated_quantized_models(int8_bundle) -> None:
    from edge.face import models as face_models

    assert verify_bundle(int8_bundle.archive).files == len(int8_bundle.manifest["files"])
    (face,) = int8_bundle.manifest["models"]
    assert face["precision"] == "int8" and face["metrics"]["passed"] is True
    assert face["quantization"]["mode"] == "static-qdq"
    assert face["metrics"]["embedder"]["cosine_mean"] >= load_profile("rpi4").thresholds.embed_mean_cosine
    folder = int8_bundle.folder / "models" / "face"
    entries = face_models.read_models_folder(folder).entries
    tiled = face_models.Detector.BLAZEFACE_FULL_TILED  # the profile's detector, its ONNX translation and .tflite
    detector = {face_models.BLAZEFACE_ROLES[tiled], face_models.TFLITE_BLAZEFACE_ROLES[tiled]}
    assert set(entries) == set(face_models.FACE_ROLES) | detector
    assert entries[face_models.FaceModel.EMBEDDER.role].precision == "int8"
    shipped = {e.file for e in entries.values()}
    # What models.json names, each .ort file's .onnx twin (the graph the gate ran unfused, which the
    # emulated-Pi check and the golden set run again), and the reports: no other intermediate models.
    twins = {f.removesuffix(".ort") + ".onnx" for f in shipped if f.endswith(".ort")}
    assert twins == {"mtcnn_pnet.onnx", "mtcnn_rnet.onnx", "mtcnn_onet.onnx", "face_embedder.int8.onnx"}
    reports = {"models.json", "quant_report.json", "quant_report.md", "cosine_hist.png", "fp32_report.json"}
    licence = {"face_detection_full_range_sparse.LICENSE"}  # MediaPipe's, beside its .tflite
    assert set(face["files"]) == shipped | twins | reports | licence | {"fp32_report.md"}
    assert int8_bundle.manifest["wheelhouse"] is None


def _astronaut_descriptor(folder: Path):
    from skimage import data

    from edge.face import models as face_models

    with face_models.open_face_pipeline(folder, 1) as pipeline:
        image = data.astronaut()
        detections = pipeline.detector.detect(image)
        assert len(detections) == 1  # at the detector's own cut (BlazeFace 0.6, MTCNN 0.9)
        return pipeline.embedder.embed(pipeline.chips(image, detections))[0].astype(float)


def test_int8_bundle_runs_the_face_pipeline_close_to_fp32(int8_bundle, bundle) -> None:
    int8 = _astronaut_descriptor(int8_bundle.folder / "models" / "face")
    fp32 = _astronaut_descriptor(bundle.folder / "models" / "face")
    cosine = float(int8 @ fp32 / ((int8 @ int8) ** 0.5 * (fp32 @ fp32) ** 0.5))
    assert cosine >= load_profile("rpi4").thresholds.embed_mean_cosine, cosine


@pytest.mark.arm
def test_rpi4_int8_bundle_on_emulated_cortex_a72_equals_the_host(int8_bundle, bundle, tmp_path) -> None:
    """The bundle a Pi 4 owner gets (int8 models) on an emulated Pi 4, installed from a bundle's own
    aarch64 wheelhouse (the install.sh path: pip --no-index --find-links wheels), gives what the accuracy gate
    measured (the host runs the gate's unfused arithmetic: check_face_models does so for quantized nets)."""
    from converters.arm.face import INT8_DESCRIPTOR_TOLERANCE, check_face_models

    comparison = check_face_models(
        int8_bundle.folder / "models" / "face", "cortex-a72", tmp_path, wheel_dir=bundle.folder / "wheels"
    )
    assert comparison.problems(INT8_DESCRIPTOR_TOLERANCE) == []
    assert (comparison.faces_guest, comparison.pairs, comparison.decisions_agree) == (5, 10, 10)


def test_the_bench_example_runs_on_what_the_demo_writes(int8_bundle, tmp_path, capsys) -> None:
    """``bench``'s first example names the embedder ``edge-deploy demo`` bundles: its defaults (rpi4, out/demo)
    build this bundle into out/demo/dist (converters/demo/pi.py)."""
    from edge_deploy.cli import build_parser, main

    demo = build_parser().parse_args(["demo"])
    assert (demo.target, demo.output) == ("rpi4", "out/demo")
    bench = build_parser()._subparsers._group_actions[0].choices["bench"]  # type: ignore[union-attr]
    text = " ".join(bench.epilog.replace("\\\n", " ").split())
    argv = ["bench", *text.split("edge-deploy bench ")[1].split(" # ")[0].split()]
    model = Path(argv[1]).relative_to(Path(demo.output) / "dist")
    assert (int8_bundle.folder.parent / model).is_file()
    argv[1] = str(int8_bundle.folder.parent / model)
    argv[argv.index("--plot") + 1] = str(tmp_path / "latency.png")
    assert main([*argv, "--count", "2", "--warmup", "0", "--min-duration", "0"]) == 0
    assert (tmp_path / "latency.png").is_file() and "p50" in capsys.readouterr().out
