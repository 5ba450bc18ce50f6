"""edge.face.align against dlib itself: the same chip, bit for bit (``exact``) or within ``CHIP_TOLERANCE``."""

from __future__ import annotations

import cv2
import dlib
import numpy as np
import pytest

from converters.face.facedata import EVAL_PHOTOS
from converters.face.reference import dlib_model_path
from edge.face import align

pytestmark = pytest.mark.integration

# get_face_chip_details' 68-point branch: points 27..54 and 60..64 of the mean face (no brows, no lower lip)
_DLIB68_POINTS = [i for i in range(17, 68) if not (55 <= i <= 59 or 65 <= i <= 67 or 17 <= i <= 26)]


@pytest.fixture(scope="module")
def models():
    return dlib.get_frontal_face_detector(), dlib.shape_predictor(str(dlib_model_path("landmarks68")))


@pytest.mark.parametrize("scale", [1.0, 3.0, 6.0])  # no pyramid, one level, two levels
@pytest.mark.parametrize("photo", ["astronaut", "t1"])
def test_warp_is_bit_exact_with_dlib_get_face_chip(models, photo, scale):
    detector, shape68 = models
    rgb = next(p for p in EVAL_PHOTOS if p.name == photo).load()
    if scale != 1.0:
        rgb = cv2.resize(rgb, None, fx=scale, fy=scale, interpolation=cv2.INTER_CUBIC)
    rects = detector(rgb, 1 if scale == 1.0 else 0)
    assert len(rects) >= 1
    mean = np.stack([align._MEAN_FACE_X, align._MEAN_FACE_Y], axis=1)
    template = (0.25 + mean[[i - 17 for i in _DLIB68_POINTS]]) / 1.5 * 150
    for rect in rects:
        shape = shape68(rgb, rect)
        pts = np.array([[p.x, p.y] for p in shape.parts()], np.float64)[_DLIB68_POINTS]
        ours = align.warp_chip(rgb, align.chip_to_image(template, pts, 150), 150, exact=True)
        theirs = dlib.get_face_chip(rgb, shape, 150, 0.25)
        assert np.array_equal(ours, theirs), (
            f"{photo} x{scale} {rect}: max diff {np.abs(ours.astype(int) - theirs).max()}"
        )


def test_five_point_chip_describes_the_face_like_dlibs_own_chip(models):
    """Our 5-point alignment (from dlib's 68 landmarks) vs dlib's 68-point chip: same person, always."""
    detector, shape68 = models
    encoder = dlib.face_recognition_model_v1(str(dlib_model_path("embedder")))
    rgb = next(p for p in EVAL_PHOTOS if p.name == "t1").load()
    dists = []
    for rect in detector(rgb, 1):
        shape = shape68(rgb, rect)
        five = align.five_points_from_68(np.array([[p.x, p.y] for p in shape.parts()], np.float64))
        ours = np.array(encoder.compute_face_descriptor(align.align_chip(rgb, five)))
        theirs = np.array(encoder.compute_face_descriptor(dlib.get_face_chip(rgb, shape, 150, 0.25)))
        dists.append(float(np.linalg.norm(ours - theirs)))
    print("5-point (ours) vs 68-point (dlib) descriptor distances:", np.round(dists, 4))
    assert len(dists) == 6
    assert max(dists) < 0.3  # same-person threshold is 0.6


def test_dlib5_chip_is_bit_exact_with_dlib(models):
    detector, _ = models
    shape5 = dlib.shape_predictor(str(dlib_model_path("landmarks5")))
    faces = {}
    for photo in EVAL_PHOTOS:
        rgb = photo.load()
        rects = detector(rgb, 1)
        faces[photo.name] = len(rects)
        for rect in rects:
            shape = shape5(rgb, rect)
            pts = np.array([[p.x, p.y] for p in shape.parts()], np.float64)
            assert np.array_equal(
                align.align_chip_dlib5(rgb, pts, exact=True), dlib.get_face_chip(rgb, shape, 150, 0.25)
            ), f"{photo.name} {rect}"
    assert faces == {"astronaut": 2, "t1": 6, "tom_hanks": 1}  # every face HOG finds, each one compared


def test_default_chip_is_within_the_stated_tolerance_of_dlibs_on_every_evaluation_face():
    """The pipeline's chip (OpenCV's bilinear, truncated) vs dlib.get_face_chip on every face HOG finds in the
    evaluation set (58 faces, originals and augmentations): at most ``CHIP_TOLERANCE``, and some chips differ
    (else the tolerance would be stated for nothing); a chip leaving the image takes the exact path."""
    from converters.face.facedata import make_eval_set

    detector = dlib.get_frontal_face_detector()
    shape5 = dlib.shape_predictor(str(dlib_model_path("landmarks5")))
    worst, differing, values, faces = 0, 0, 0, 0
    for image in make_eval_set(seed=0).images:
        for rect in detector(image.rgb, 1):
            shape = shape5(image.rgb, rect)
            pts = np.array([[p.x, p.y] for p in shape.parts()], np.float64)
            diff = align.align_chip_dlib5(image.rgb, pts).astype(int) - dlib.get_face_chip(image.rgb, shape, 150, 0.25)
            worst, differing = max(worst, int(np.abs(diff).max())), differing + int(np.count_nonzero(diff))
            values, faces = values + diff.size, faces + 1
    levels, share = align.CHIP_TOLERANCE
    print(f"{faces} faces: {differing} of {values} values differ, by at most {worst}")
    assert faces >= 50  # measured 58
    assert worst <= levels and differing / values <= share
    assert differing > 0  # measured 26: the two paths are not the same code


def test_a_chip_leaving_the_image_is_exact():
    rgb = next(p for p in EVAL_PHOTOS if p.name == "astronaut").load()
    chip_to_img = np.array([[1.0, 0.0, -40.0], [0.0, 1.0, 300.0]])  # rows 300..449, columns -40..109
    fast, exact = align.warp_chip(rgb, chip_to_img, 150), align.warp_chip(rgb, chip_to_img, 150, exact=True)
    assert np.array_equal(fast, exact)
    assert not fast[:, :40].any() and fast[:, 41:].any()
