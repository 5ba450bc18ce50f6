"""edge.face.pipeline as ``open_face_pipeline`` builds it, on the converted fp32 face folder: one face per person."""

from __future__ import annotations

import dataclasses
import json
import shutil

import numpy as np
import pytest

from converters.face.boxes import iou
from converters.face.facedata import EVAL_PHOTOS, package_dir
from edge.errors import InputError
from edge.face.gallery import Gallery
from edge.face.models import Detector, ModelEntry, open_face_pipeline, read_models_folder
from edge_deploy.cli import main

pytestmark = pytest.mark.integration


def test_threads_reach_opencv_and_are_checked(face_fp32_models):
    """The pipeline's threads are OpenCV's too (its pool would otherwise take every core for the chip's warp)."""
    import cv2

    from edge.errors import InferenceError

    before = cv2.getNumThreads()
    try:
        for threads in (1, 2):
            with open_face_pipeline(face_fp32_models, threads=threads) as pipeline:
                assert cv2.getNumThreads() == threads
                assert len(pipeline.analyze(next(p for p in EVAL_PHOTOS if p.name == "t1").load())) == 6
        with pytest.raises(InferenceError) as err:
            open_face_pipeline(face_fp32_models, threads=0)
        assert str(err.value) == "threads = 0; expected a whole number >= 1"
    finally:
        cv2.setNumThreads(before)


def test_t1_gives_one_face_per_person(face_fp32_models):
    """insightface's t1.jpg has 6 people. MTCNN (facenet-pytorch's thresholds) also passes two things that are
    not faces, a fist holding a poker chip and a metal bowl, at 0.87 and 0.86: not duplicates of a face (no NMS
    question: neither overlaps one). ``open_face_pipeline`` leaves out what scores below 0.9, as the daemon and
    the browser page do; every real face of the evaluation set scores >= 0.96."""
    photo = next(p for p in EVAL_PHOTOS if p.name == "t1")
    rgb = photo.load()
    with open_face_pipeline(face_fp32_models) as pipeline:
        faces = pipeline.analyze(rgb)
    with open_face_pipeline(face_fp32_models, min_score=0.0) as pipeline:
        everything = pipeline.analyze(rgb)
    assert len(faces) == len(photo.faces) == 6
    for person in photo.faces:
        assert sum(iou(f.detection.box, person.box) > 0.5 for f in faces) == 1, person.identity
    extra = [f for f in everything if all(iou(f.detection.box, p.box) < 0.05 for p in photo.faces)]
    assert len(everything) == 8 and len(extra) == 2
    assert all(0.85 < f.detection.score < 0.9 for f in extra), [f.detection.score for f in extra]
    assert min(f.detection.score for f in faces) > 0.95


def test_blazeface_as_the_detector_describes_the_same_faces(face_fp32_models, tmp_path, capsys):
    """``convert blazeface`` (``add_blazeface``) puts the full-range detector into a copy of the folder
    (models.json role ``detector.blazeface_full``); ``detector='blazeface-full'`` (``face recognize --detector``)
    then finds 5 of t1.jpg's 6 people (benchmarks/detector_quality.py), ``blazeface-full-tiled`` all 6, and each
    descriptor is near MTCNN's pipeline's for the same face (the shape predictor runs on BlazeFace's box mapped to
    a HOG box: measured distances 0-0.18, same person below 0.6)."""
    from converters.face.boxes import match_boxes

    folder = tmp_path / "face"
    shutil.copytree(face_fp32_models, folder)
    before = read_models_folder(folder).entries
    assert main(["convert", "blazeface", str(folder), "--range", "full", "--json"]) == 0
    entry = ModelEntry(**json.loads(capsys.readouterr().out))
    after = read_models_folder(folder).entries  # sizes and sha256 of every file checked again
    assert set(after) == set(before) | {"detector.blazeface_full", "tflite.detector.blazeface_full"}
    original = after["tflite.detector.blazeface_full"]  # MediaPipe's file as published, listed beside it
    assert (original.file, original.format, original.precision, original.source["licence"]) == (
        "face_detection_full_range_sparse.tflite", "tflite", "fp16", "Apache-2.0"
    )  # fmt: skip
    assert (entry.file, entry.format, entry.source["package"], entry.source["licence"]) == (
        "face_detection_full_range_sparse.onnx", "onnx", "mediapipe", "Apache-2.0"
    )  # fmt: skip
    assert entry.source["max_abs_diff_vs_tflite"] <= entry.source["tolerance"]
    t1 = package_dir("insightface") / "data" / "images" / "t1.jpg"
    gallery = Gallery().save(tmp_path / "g.npz")
    assert (
        main(["face", "recognize", str(folder), str(t1), "-g", str(gallery), "--detector", "blazeface-full", "--json"])
        == 0
    )
    [result] = json.loads(capsys.readouterr().out)
    assert len(result["faces"]) == 5 and all(0.6 <= f["score"] < 0.95 for f in result["faces"])  # BlazeFace's own cut
    tiled_args = ["face", "recognize", str(folder), str(t1), "-g", str(gallery), "--detector", "blazeface-full-tiled"]
    assert main([*tiled_args, "--json"]) == 0
    [tiled] = json.loads(capsys.readouterr().out)
    assert len(tiled["faces"]) == 6  # the person the whole-frame pass misses is found on a tile
    for photo in EVAL_PHOTOS:
        rgb = photo.load()
        with open_face_pipeline(folder) as pipeline:
            want = pipeline.analyze(rgb)
        for detector, least in (("blazeface-full", len(photo.faces) - 1), ("blazeface-full-tiled", len(photo.faces))):
            with open_face_pipeline(folder, detector=detector) as pipeline:
                got = pipeline.analyze(rgb)
            pairs = match_boxes([f.detection.box for f in want], [f.detection.box for f in got], 0.5)
            assert len(got) == len(pairs) >= least, (photo.name, detector)
            for i, j, _ in pairs:
                assert np.linalg.norm(want[i].descriptor - got[j].descriptor) < 0.25, (photo.name, detector)


def test_the_folder_s_default_detector_is_what_face_and_the_daemon_run(face_fp32_models, tmp_path, capsys):
    """``convert blazeface --default-detector`` writes models.json ``detector``; ``face recognize`` without
    ``--detector`` and the daemon's face service without ``face.detector`` then run it (on t1.jpg the
    whole-frame full-range pass finds 5 people, all below MTCNN's 0.9 cut-off, so the cut-off is the
    detector's own: 0); ``face.detector`` in the daemon config overrides the folder."""
    from edge.daemon.config import FaceSettings
    from edge.daemon.face_service import FaceService

    folder = tmp_path / "face"
    shutil.copytree(face_fp32_models, folder)
    args = ["convert", "blazeface", str(folder), "--range", "full", "--default-detector", "blazeface-full"]
    assert main(args) == 0
    assert "runs blazeface-full when no --detector is asked for" in capsys.readouterr().out
    assert json.loads((folder / "models.json").read_text())["detector"] == "blazeface-full"
    t1 = package_dir("insightface") / "data" / "images" / "t1.jpg"
    rgb = next(p for p in EVAL_PHOTOS if p.name == "t1").load()
    gallery = Gallery().save(tmp_path / "g.npz")
    assert main(["face", "recognize", str(folder), str(t1), "-g", str(gallery), "--json"]) == 0
    [result] = json.loads(capsys.readouterr().out)
    assert len(result["faces"]) == 5 and all(0.6 <= f["score"] < 0.95 for f in result["faces"])
    settings = FaceSettings(folder, gallery, enroll_dir=None, threshold=None, min_score=None, detector=None, threads=1)
    with FaceService(settings, threads=1) as service:
        assert (service.detector, service.min_score) == (Detector.BLAZEFACE_FULL, 0.0)
        faces = service.recognize(rgb)
        assert len(faces) == 5 and all(0.6 <= f["score"] < 0.95 for f in faces)
    with FaceService(dataclasses.replace(settings, detector=Detector.MTCNN), threads=1) as service:
        assert (service.detector, service.min_score) == (Detector.MTCNN, 0.9)
        faces = service.recognize(rgb)
        assert len(faces) == 6 and min(f["score"] for f in faces) > 0.95  # MTCNN's (test_t1_gives_...)
    assert main(["convert", "blazeface", str(folder), "--range", "short", "--default-detector", "mtcnn"]) == 0
    assert "detector" not in json.loads((folder / "models.json").read_text())


def test_runtime_litert_runs_the_tflite_original(face_fp32_models, tmp_path, capsys):
    """``convert blazeface --runtime litert`` (models.json ``detector_runtime``) makes the folder's BlazeFace
    run MediaPipe's .tflite on LiteRT, for ``face recognize`` and ``open_face_pipeline`` alike, unfused too (the
    emulated-Pi check's reference); it finds the faces the ONNX translation finds (the translation is proven
    equal to it within 1e-3 on the network's outputs); ``--runtime onnxruntime`` goes back."""
    from edge.face.models import read_models_folder

    folder = tmp_path / "face"
    shutil.copytree(face_fp32_models, folder)
    args = ["convert", "blazeface", str(folder), "--range", "full", "--default-detector", "blazeface-full"]
    assert main([*args, "--runtime", "litert"]) == 0
    assert "BlazeFace runs on litert (models.json detector_runtime)" in capsys.readouterr().out
    assert json.loads((folder / "models.json").read_text())["detector_runtime"] == "litert"
    assert (
        read_models_folder(folder).detector_file(Detector.BLAZEFACE_FULL)
        == folder / "face_detection_full_range_sparse.tflite"
    )
    t1 = package_dir("insightface") / "data" / "images" / "t1.jpg"
    gallery = Gallery().save(tmp_path / "g.npz")
    assert main(["face", "recognize", str(folder), str(t1), "-g", str(gallery), "--json"]) == 0
    [result] = json.loads(capsys.readouterr().out)
    rgb = next(p for p in EVAL_PHOTOS if p.name == "t1").load()
    boxes = {}
    for label, unfused in (("litert", False), ("litert unfused", True)):
        with open_face_pipeline(folder, unfused=unfused) as pipeline:
            assert pipeline.detector.backend == "litert", label
            boxes[label] = np.array([f.detection.box for f in pipeline.analyze(rgb)])
    assert main(["convert", "blazeface", str(folder), "--range", "full", "--runtime", "onnxruntime"]) == 0
    assert "detector_runtime" not in json.loads((folder / "models.json").read_text())
    with open_face_pipeline(folder) as pipeline:
        assert pipeline.detector.backend == "onnxruntime"
        boxes["onnxruntime"] = np.array([f.detection.box for f in pipeline.analyze(rgb)])
    assert len(result["faces"]) == len(boxes["onnxruntime"]) == 5
    for label in ("litert", "litert unfused"):
        np.testing.assert_allclose(boxes[label], boxes["onnxruntime"], atol=1.0, err_msg=label)  # pixels


@pytest.mark.parametrize(
    ("detector", "role", "command"),
    [
        ("blazeface", "detector.blazeface", "edge-deploy convert blazeface MODELS"),
        ("blazeface-full-tiled", "detector.blazeface_full", "edge-deploy convert blazeface MODELS --range full"),
    ],
)
def test_a_missing_blazeface_role_is_named(face_fp32_models, detector, role, command):
    with pytest.raises(InputError) as err:
        open_face_pipeline(face_fp32_models, detector=detector)
    assert str(err.value) == (
        f"{face_fp32_models / 'models.json'}: no model with role '{role}' for detector '{detector}'; "
        f"add it with '{command}' (converters.face.blazeface.add_blazeface), or pass detector_model"
    )


def test_unfused_runs_an_onnx_blazeface_unfused_and_leaves_its_tflite_to_litert(face_fp32_models, tmp_path):
    """``open_face_pipeline(unfused=True)`` (the gate's arithmetic) opens an ONNX BlazeFace with onnxruntime's
    graph optimisations off, as it does MTCNN and the embedder; a ``.tflite`` BlazeFace named by
    ``detector_model`` runs on LiteRT as it is (LiteRT has no such levels). fp32 either way: the same boxes."""
    import onnxruntime as ort

    from converters.face.blazeface import FULL_RANGE, add_blazeface

    levels = {"fused": ort.GraphOptimizationLevel.ORT_ENABLE_ALL, "unfused": ort.GraphOptimizationLevel.ORT_DISABLE_ALL}
    folder = tmp_path / "face"
    shutil.copytree(face_fp32_models, folder)
    add_blazeface(folder, FULL_RANGE)
    rgb = next(p for p in EVAL_PHOTOS if p.name == "t1").load()
    boxes = {}
    for label, unfused, model in (("fused", False, None), ("unfused", True, None),
                                  ("tflite", True, folder / FULL_RANGE.name)):  # fmt: skip
        with open_face_pipeline(folder, detector="blazeface-full", unfused=unfused, detector_model=model) as pipeline:
            detector = pipeline.detector
            boxes[label] = np.array([d.box for d in detector.detect(rgb)])
            assert detector.backend == ("litert" if label == "tflite" else "onnxruntime")
            if label in levels:  # what onnxruntime itself was asked for
                level = detector._model.session.get_session_options().graph_optimization_level
                assert level == levels[label], label
    assert boxes["fused"].shape == boxes["unfused"].shape == boxes["tflite"].shape == (5, 4)
    np.testing.assert_allclose(boxes["unfused"], boxes["fused"], atol=1e-2)
    np.testing.assert_allclose(boxes["tflite"], boxes["fused"], atol=1e-2)


def test_a_tight_face_crop_enrols_with_the_pi_s_default_detector(face_fp32_models, tmp_path):
    """A gallery photo that is a tight face crop (insightface's 112x112 Tom Hanks): BlazeFace, the Pi profiles'
    default, finds no face touching the frame; enrolment looks again with a border and takes it."""
    from converters.face.blazeface import add_profile_detector
    from edge.face.gallery import with_border
    from edge.imageio import load_image
    from edge.profiles import load_profile

    folder = tmp_path / "face"
    shutil.copytree(face_fp32_models, folder)
    profile = load_profile("rpi4").runtime
    add_profile_detector(folder, profile.face_detector, runtime=profile.face_detector_runtime.value)
    crop = package_dir("insightface") / "data" / "images" / "Tom_Hanks_54745.png"
    (tmp_path / "people" / "tom").mkdir(parents=True)
    shutil.copy(crop, tmp_path / "people" / "tom" / "tom.png")
    gallery = Gallery()
    with open_face_pipeline(folder, 1) as pipeline:
        assert pipeline.analyze(load_image(crop)) == []  # why the border is needed
        (face,) = pipeline.analyze(with_border(load_image(crop)))
        report = gallery.enroll_folder(tmp_path / "people", pipeline)
    assert (report.enrolled, report.skipped) == ({"tom": 1}, [])
    assert np.array_equal(gallery.descriptors("tom")[0], face.descriptor)
