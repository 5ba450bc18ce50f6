"""edge.face.pipeline as ``open_face_pipeline`` builds it, on the converted fp32 face folder: one face per person."""

from __future__ import annotations

import pytest

from converters.face.boxes import iou
from converters.face.facedata import EVAL_PHOTOS
from edge.face.models import open_face_pipeline

pytestmark = pytest.mark.integration


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
