"""``edge-deploy convert face --format tflite`` from the command line, run ONCE for the module: the fp32 face
models plus their TFLite twins (onnx2tf, its own venv), recorded in models.json and the report, each equal to
its ONNX source, and the embedder's twin the one the device runs (models.json ``embedder_runtime``; ``both``
writes the same files without that key).

One CLI run at fp32 (three onnx2tf conversions: embedder, RNet, ONet); the INT8 twins' conversion itself is
covered by tests/integration/test_tflite.py. Tolerance: as test_tflite.py's FP32_TOLERANCE (1e-4; measured
4.0e-7 on descriptors, 6.3e-7 RNet, 7.7e-7 ONet: the same float graph, another summation order).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest

from edge.digest import file_sha256
from edge.face import models as face_models
from testsupport.needs import ONNX2TF, REPO, install_on_first_use

FP32_TOLERANCE = 1e-4
TWIN_ROLES = {
    "tflite.detector.rnet": "detector.rnet",
    "tflite.detector.onet": "detector.onet",
    "tflite.embedder": "embedder",
}


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """The CLI's folder, its stdout (the summary) and its stderr (progress lines)."""
    install_on_first_use(ONNX2TF, "the convert face --format test (tests/integration/test_convert_face_tflite.py)")
    out = tmp_path_factory.mktemp("face-tflite") / "face"
    argv = [sys.executable, "-m", "edge_deploy", "convert", "face", "--target", "rpi4", "--precision", "fp32"]
    argv += ["--format", "tflite", "-o", str(out)]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    return out, done.stdout, done.stderr


def test_models_json_lists_the_twins_beside_the_onnx_models(converted):
    out, _, _ = converted
    data = json.loads((out / face_models.MODELS_FILE).read_text())
    by_role = {m["role"]: m for m in data["models"]}
    # the roles the device pipeline opens still point at the ONNX files ...
    assert {by_role[r]["format"] for r in TWIN_ROLES.values()} == {"onnx"}
    # ... and each twin has its own entry: format, precision, sha256 and size of the file, its source's licence
    for role, onnx_role in TWIN_ROLES.items():
        twin, onnx = by_role[role], by_role[onnx_role]
        assert (twin["format"], twin["precision"]) == ("tflite", "fp32"), role
        assert twin["file"].endswith("_fp32.tflite") and twin["file"].startswith(onnx["file"].removesuffix(".onnx"))
        assert twin["sha256"] == file_sha256(out / twin["file"]) and twin["size"] == (out / twin["file"]).stat().st_size
        assert twin["source"] == onnx["source"] and twin["source"]["licence"] in ("CC0-1.0", "MIT")
    assert "tflite.detector.pnet" not in by_role  # PNet runs at every pyramid size: no fixed-size twin
    assert set(face_models.read_models_folder(out).entries) == {
        *TWIN_ROLES,
        *TWIN_ROLES.values(),
        "detector.pnet",
        "landmarks.shape5",
        "detector.blazeface_full",  # the profile's detector (BlazeFace's ONNX translation and MediaPipe's .tflite)
        "tflite.detector.blazeface_full",
    }


def test_report_and_json_record_the_twins(converted):
    out, stdout, stderr = converted
    report = json.loads((out / "report.json").read_text())
    twins = report["tflite"]
    assert report["passed"] is True and twins["passed"] is True and twins["failures"] == []
    assert json.loads((out / "tflite_report.json").read_text()) == twins
    for net in ("rnet", "onet", "embedder"):
        assert twins["nets"][net]["precision"] == "fp32"
        assert twins["nets"][net]["vs_onnx"]["max_abs_diff"] < FP32_TOLERANCE, net
    gate = twins["nets"]["embedder"]["gate"]
    assert gate["faces"] >= 40 and gate["decisions"]["agreement"] == 1.0 and gate["cosine_min"] > 0.99999
    md = (out / "report.md").read_text()
    assert "## TFLite twins (onnx2tf, run on LiteRT)" in md and "`face_embedder_fp32.tflite`" in md
    assert (out / "tflite_report.md").is_file()
    # progress lines name each onnx2tf run before it starts
    assert "] TFLite twin 3/3: embedder fp32 with onnx2tf" in stderr
    # not a terminal: the timed steps (torch export, onnx2tf) print their numbered lines and no live clock;
    # no line names a temporary folder
    for step in ("exporting MTCNN P/R/O-nets", "onnx2tf: face_embedder.onnx -> TFLite fp32 at [1, 3, 150, 150]"):
        assert re.search(rf"^\[\d+ +\d+\.\ds\] {re.escape(step)}", stderr, re.MULTILINE), step
    assert not re.search(r"\r|\x1b|elapsed|ETA|\.partial|/tmp/(?!pytest)|onnx2tf-", stderr), stderr
    assert f"TFLite twins in {out}:" in stdout and stdout.rstrip().endswith("PASSED")


def test_format_tflite_makes_the_device_run_the_embedder_twin(converted, tmp_path):
    """The pipeline, telemetry and the golden set take the embedder's twin (LiteRT) where models.json says
    ``embedder_runtime = "litert"``; the same folder without the key (what ``both`` writes) runs the ONNX file;
    its descriptors equal the twin's within the fp32 tolerance."""
    import shutil

    from converters.face import facedata
    from converters.package.golden import make_face_golden
    from edge.profiles import load_profile

    out, _, _ = converted
    data = json.loads((out / face_models.MODELS_FILE).read_text())
    assert data[face_models.EMBEDDER_RUNTIME_KEY] == "litert"
    onnx_folder = tmp_path / "onnx"
    shutil.copytree(out, onnx_folder, ignore=shutil.ignore_patterns("onnx2tf"))
    del data[face_models.EMBEDDER_RUNTIME_KEY]
    (onnx_folder / face_models.MODELS_FILE).write_text(json.dumps(data))
    rgb = facedata.make_eval_set(0).images[0].rgb
    with face_models.open_face_pipeline(out) as twin, face_models.open_face_pipeline(onnx_folder) as onnx:
        assert (twin.embedder.backend, onnx.embedder.backend) == ("litert", "onnxruntime")
        assert twin.embedder.model_path.name == "face_embedder_fp32.tflite"
        faces, want = twin.analyze(rgb), onnx.analyze(rgb)
    assert len(faces) == len(want) >= 1
    diffs = [float(np.abs(f.descriptor - w.descriptor).max()) for f, w in zip(faces, want, strict=True)]
    assert max(diffs) < FP32_TOLERANCE
    running = face_models.read_models_folder(out).running()
    assert (running["model"], running["runtime"]) == ("face_embedder_fp32", "litert")
    record = make_face_golden(out, tmp_path / "bundle", load_profile("rpi4"))
    assert record["role"] == "tflite.embedder"
    assert record["model_sha256"] == file_sha256(out / "face_embedder_fp32.tflite")


def test_fp32_twins_equal_onnx_on_the_device_runtimes(converted):
    """Independently of the build's own check: the device's embedder on both files, and the detector nets
    through ``edge.runtime`` (LiteRT for the twin: NHWC, batch 1) on real face crops."""
    from converters.face import facedata
    from edge.face.detect_mtcnn import area_resize, normalise
    from edge.face.embed import FaceEmbedder
    from edge.runtime import open_model

    out, _, _ = converted
    paths = {role: out / e.file for role, e in face_models.read_models_folder(out).entries.items()}
    with face_models.open_face_pipeline(out, 2) as pipeline:
        chips = np.concatenate(
            [
                pipeline.chips(im.rgb, dets)
                for im in facedata.make_eval_set(0).images[:6]
                if (dets := pipeline.detector.detect(im.rgb))
            ]
        )
    assert len(chips) >= 5
    with FaceEmbedder(paths["embedder"]) as onnx, FaceEmbedder(paths["tflite.embedder"]) as tflite:
        assert (onnx.backend, tflite.backend) == ("onnxruntime", "litert")
        diff = float(np.abs(onnx.embed(chips) - tflite.embed(chips)).max())
    assert diff < FP32_TOLERANCE
    for net, side in (("rnet", 24), ("onet", 48)):
        x = normalise(np.stack([area_resize(c, side, side) for c in chips]))
        with open_model(paths[f"detector.{net}"], 1) as onnx, open_model(paths[f"tflite.detector.{net}"], 1) as twin:
            assert twin.backend == "litert" and twin.inputs[0].shape == (1, side, side, 3)
            want = onnx.run({"input": x})
            # LiteRT names the outputs by tensor; each of these nets' outputs has its own size ([1, 4], [1, 2], ...)
            by_size = {spec.shape[1:]: spec.name for spec in twin.outputs}
            assert len(by_size) == len(want) == len(twin.outputs)
            for i, sample in enumerate(np.transpose(x, (0, 2, 3, 1))):
                got = twin.run({twin.inputs[0].name: np.ascontiguousarray(sample[None])})
                for name, value in want.items():
                    assert np.abs(got[by_size[value.shape[1:]]][0] - value[i]).max() < FP32_TOLERANCE, (net, name, i)


def test_build_carries_the_twins_and_the_manifest_lists_them(converted, tmp_path):
    """``build --format tflite``: the face stage's folder with twins goes into the bundle and its manifest, and
    the golden set is the embedder twin's (the one the device runs).

    The stage's cache entry is seeded from the CLI's folder (what the fp32 stage writes: convert_face + the
    twins, onnx2tf's logs left out), so the bundle machinery runs without converting again; the stage's own
    conversion path is the CLI's (``converters.face.build.add_tflite_twins``)."""
    import shutil

    from converters.package.bundle import BuildOptions, build_bundle
    from converters.package.stages import STAGES, ModelKind, face_metrics, face_result
    from edge.bundle import verify_bundle
    from edge.profiles import ModelFormats, Precision, load_profile

    out, _, _ = converted
    profile, cache = load_profile("rpi4"), tmp_path / "cache"
    seeded = cache / "seeded"
    shutil.copytree(out, seeded / "files", ignore=shutil.ignore_patterns("onnx2tf"))
    metrics = face_metrics(json.loads((out / "report.json").read_text()))
    result = face_result(Precision.FP32, seeded / "files", {"method": "none"}, metrics)
    (seeded / "stage.json").write_text(json.dumps(result.to_dict()))
    # the key hashes the stage's code: taken just before the build, as the build takes it
    key = STAGES[ModelKind.FACE].cache_key(profile, Precision.FP32, ModelFormats.TFLITE)
    assert key != STAGES[ModelKind.FACE].cache_key(profile, Precision.FP32)
    (cache / "stages").mkdir()
    seeded.rename(cache / "stages" / f"rpi4-face-tflite-fp32-{key}")
    options = BuildOptions(precision=Precision.FP32, wheels=False, archive=False, formats=ModelFormats.TFLITE)
    bundle = build_bundle(profile, ["face"], tmp_path / "dist", cache, options=options)
    assert bundle.stage_cache_hits == {"face": True}
    (record,) = bundle.manifest["models"]
    assert record["format"] == "npz+onnx+tflite"
    assert record["metrics"]["tflite"]["passed"] is True
    assert record["metrics"]["tflite"]["nets"]["embedder"]["vs_onnx"]["max_abs_diff"] < FP32_TOLERANCE
    assert len(record["sources"]) == 7  # dlib's two files, MTCNN's three nets, BlazeFace's file and its translation
    listed = {f["path"]: f for f in bundle.manifest["files"]}
    for name in ("face_embedder_fp32.tflite", "mtcnn_rnet_fp32.tflite", "mtcnn_onet_fp32.tflite"):
        assert listed[f"models/face/{name}"]["sha256"] == file_sha256(out / name)
    assert not any("onnx2tf" in path for path in listed)
    assert verify_bundle(bundle.folder).files == len(listed)
    golden = json.loads((bundle.folder / "golden" / "golden.json").read_text())["face"]
    assert golden["role"] == "tflite.embedder"
    assert golden["model_sha256"] == file_sha256(out / "face_embedder_fp32.tflite")


def test_a_twin_that_misses_its_threshold_fails_the_build_after_writing_the_report(converted, tmp_path):
    """The gate's failure path without converting again: the CLI's fp32 twins (reused) against a profile whose
    fp32 tolerance no real conversion meets."""
    import dataclasses
    import shutil

    from converters.face.build import twin_inputs
    from converters.face.tflite_twins import raise_if_failed, write_tflite_twins
    from edge.errors import ValidationError
    from edge.profiles import load_profile

    out, _, _ = converted
    profile = load_profile("rpi4")
    strict = dataclasses.replace(
        profile, thresholds=dataclasses.replace(profile.thresholds, embed_max_abs_diff_fp32=1e-9)
    )
    folder = tmp_path / "strict"
    shutil.copytree(
        out, folder, ignore=shutil.ignore_patterns("*_fp32.tflite", "*_int8.tflite", "tflite_report.*", "onnx2tf")
    )
    calibration, reference = twin_inputs(out, strict, 8, lambda _msg: None)
    report = write_tflite_twins(out, folder, strict, calibration, reference)  # fp32 twins: copied from ``out``
    (failure,) = report.failures
    assert failure.startswith("TFLite embedder (face_embedder_fp32.tflite): max |diff| to face_embedder.onnx ")
    assert failure.endswith(" > 1e-09")
    with pytest.raises(ValidationError) as err:
        raise_if_failed(report)
    assert str(err.value) == (
        f"TFLite face models for rpi4 failed their checks (see {folder / 'tflite_report.md'}):\n  {failure}"
    )
    md = (folder / "tflite_report.md").read_text()
    assert "Verdict: **FAILED**" in md and failure in md
    assert "tflite.embedder" in {e.role for e in face_models.read_models_folder(folder).entries.values()}
