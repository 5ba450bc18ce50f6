"""recognize_image: the cut-off on detection scores is the pipeline's own unless one is asked for."""

from __future__ import annotations

import numpy as np

from edge.face.gallery import Gallery
from edge.face.pipeline import Face
from edge.face.recognize import recognize_image
from edge.face.types import Detection


class _Pipeline:
    """A pipeline that already applied its own cut (a BlazeFace one keeps faces at 0.6 and up)."""

    threshold = 0.6

    def __init__(self, faces: list[Face]) -> None:
        self.faces = faces

    def analyze(self, rgb: np.ndarray) -> list[Face]:
        return self.faces


def _face(score: float, descriptor: np.ndarray) -> Face:
    return Face(Detection((0.0, 0.0, 10.0, 10.0), score, np.zeros((5, 2), np.float32)), descriptor)


def test_without_a_min_score_every_face_the_pipeline_reports_is_named():
    ada, bob = np.zeros(128, np.float32), np.full(128, 0.2, np.float32)
    gallery = Gallery()
    gallery.add("ada", ada)
    pipeline = _Pipeline([_face(0.72, ada), _face(0.95, bob)])
    rgb = np.zeros((10, 10, 3), np.uint8)
    faces = recognize_image(pipeline, gallery, rgb)
    assert [(f["score"], f["name"]) for f in faces] == [(0.72, "ada"), (0.95, None)]
    assert [f["score"] for f in recognize_image(pipeline, gallery, rgb, min_score=0.9)] == [0.95]
