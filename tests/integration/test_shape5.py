"""edge.face.shape5 (numpy) against dlib's own shape_predictor: the same landmarks, pixel for pixel."""

from __future__ import annotations

import dlib
import numpy as np
import pytest

from converters.face.dlib_shape import export_shape_predictor, read_shape_predictor
from converters.face.facedata import make_eval_set
from converters.face.reference import dlib_model_path
from edge.face.shape5 import ShapePredictor

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def predictor(tmp_path_factory):
    path = export_shape_predictor(dlib_model_path("landmarks5"), tmp_path_factory.mktemp("shape5") / "shape5.npz")
    return ShapePredictor(path)


def test_reader_layout():
    arrays = read_shape_predictor(dlib_model_path("landmarks5"))
    assert arrays["initial_shape"].shape == (5, 2)
    assert arrays["split_idx"].shape == (15, 500, 15, 2)  # 15 levels of 500 trees of depth 4
    assert arrays["leaf_values"].shape == (15, 500, 16, 5, 2)
    assert arrays["anchor_idx"].shape == arrays["deltas"].shape[:2] == (15, 800)  # 800 feature pixels a level
    assert arrays["initial_shape"][0] == pytest.approx((0.7762517, 0.3455356))


def test_same_landmarks_as_dlib_on_every_evaluation_face(predictor):
    ref = dlib.shape_predictor(str(dlib_model_path("landmarks5")))
    detector = dlib.get_frontal_face_detector()
    rng = np.random.default_rng(0)
    checked = 0
    for image in make_eval_set(seed=0).images:
        for rect in detector(image.rgb, 1):
            for jitter in (np.zeros(4, int), rng.integers(-8, 9, 4)):  # HOG's box, and a moved one
                box = (rect.left(), rect.top(), rect.right(), rect.bottom()) + jitter
                theirs = ref(image.rgb, dlib.rectangle(*(int(v) for v in box)))
                expected = np.array([[p.x, p.y] for p in theirs.parts()], np.float64)
                assert np.array_equal(predictor.predict(image.rgb, tuple(box)), expected), image.name
                checked += 1
    assert checked >= 100  # measured 116: 58 faces x 2 boxes


def test_vectorised_alignment_equals_the_previous_code_on_every_evaluation_face(predictor):
    """Landmarks and chips of ``predict_many`` + ``align_chip_dlib5`` against the code before vectorisation
    (``benchmarks/harness/align_reference.py``): equal, byte for byte, on every face dlib finds in the evaluation
    images, on HOG's box and on a moved one (the tolerance is zero)."""
    from benchmarks.harness import align_reference as previous
    from edge.face.align import align_chip_dlib5

    detector = dlib.get_frontal_face_detector()
    rng = np.random.default_rng(1)
    checked = 0
    for image in make_eval_set(seed=0).images:
        rects = [(r.left(), r.top(), r.right(), r.bottom()) for r in detector(image.rgb, 1)]
        rects += [tuple(int(v) for v in np.add(r, rng.integers(-8, 9, 4))) for r in rects]
        for rect, points in zip(rects, predictor.predict_many(image.rgb, rects), strict=True):
            expected = previous.predict(predictor, image.rgb, rect)
            assert np.array_equal(points, expected), (image.name, rect)
            chip = align_chip_dlib5(image.rgb, points, exact=True)
            assert np.array_equal(chip, previous.align_chip_dlib5(image.rgb, expected)), (image.name, rect)
            checked += 1
    assert checked >= 100  # measured 116
