"""converters.face.reference is face_recognition.face_encodings, descriptor for descriptor."""

from __future__ import annotations

import importlib.util
import os
import sys
import types

import numpy as np
import pytest

from converters.face.facedata import make_eval_set
from converters.face.reference import ReferencePipeline

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def face_recognition():
    # face_recognition_models looks its files up with pkg_resources, which setuptools >= 81 no longer has:
    # give it the one function it calls, for this test only.
    saved = sys.modules.get("pkg_resources")
    if importlib.util.find_spec("pkg_resources") is None:
        shim = types.ModuleType("pkg_resources")
        shim.resource_filename = lambda pkg, rel: os.path.join(
            os.path.dirname(importlib.util.find_spec(pkg).origin), rel
        )
        sys.modules["pkg_resources"] = shim
    import face_recognition as fr

    yield fr
    if saved is None:
        sys.modules.pop("pkg_resources", None)


def test_same_faces_boxes_and_descriptors_as_face_recognition(face_recognition):
    ref = ReferencePipeline()
    faces = 0
    for image in make_eval_set(seed=0).images[:9]:  # the astronaut and two t1 images: 23 faces
        expected = face_recognition.face_encodings(image.rgb)
        boxes = face_recognition.face_locations(image.rgb)  # (top, right, bottom, left), trimmed to the image
        got = ref.analyze(image.rgb)
        assert len(got) == len(expected), image.name
        h, w = image.rgb.shape[:2]
        for face, enc, (top, right, bottom, left) in zip(got, expected, boxes, strict=True):
            assert np.array_equal(face.descriptor, enc)
            x1, y1, x2, y2 = face.box
            assert (max(x1, 0), max(y1, 0), min(x2 - 1, w), min(y2 - 1, h)) == (left, top, right, bottom)
            faces += 1
    assert faces == 23
