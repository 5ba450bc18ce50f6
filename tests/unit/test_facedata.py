"""converters.face.facedata: the evaluation set is deterministic, and disjoint from calibration."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from converters.face import facedata
from converters.face.facedata import (
    CALIB_AUGMENT,
    EVAL_AUGMENT,
    EVAL_PHOTOS,
    apply_augmentation,
    calibration_images,
    draw_params,
    make_eval_set,
    package_dir,
)
from edge.errors import InputError, MissingDependencyError


@pytest.fixture(scope="module")
def eval_set():
    return make_eval_set(seed=0)


def _digest(rgb: np.ndarray) -> str:
    return hashlib.sha256(rgb.tobytes()).hexdigest()


def test_counts(eval_set):
    c = eval_set.counts()
    assert c["images"] == len(EVAL_PHOTOS) * (1 + facedata.EVAL_VARIANTS) == 21
    assert c["identities"] == 8  # astronaut, six people of t1.jpg, Tom Hanks
    assert c["same_pairs"] + c["different_pairs"] == c["faces"] * (c["faces"] - 1) // 2
    assert c["faces"] >= 50  # faces pushed out of frame by an augmentation are dropped


def test_same_seed_same_bytes_other_seed_other_images(eval_set):
    again = make_eval_set(seed=0)
    assert [_digest(a.rgb) for a in eval_set.images] == [_digest(b.rgb) for b in again.images]
    assert eval_set.pairs == again.pairs
    other = make_eval_set(seed=1)
    augmented = [i for i, im in enumerate(eval_set.images) if im.params]
    assert all(_digest(eval_set.images[i].rgb) != _digest(other.images[i].rgb) for i in augmented)


def test_pairs_are_labelled_by_identity(eval_set):
    for pair in eval_set.pairs:
        assert pair.same == (eval_set.face(pair.a).identity == eval_set.face(pair.b).identity)
        assert pair.a != pair.b


def test_augmentation_parameters_stay_in_their_ranges(eval_set):
    r = EVAL_AUGMENT
    for im in eval_set.images:
        if not im.params:
            continue
        p = im.params
        assert abs(p["rotation_deg"]) <= r.rotation_deg
        assert r.scale[0] <= p["scale"] <= r.scale[1]
        assert r.jpeg_quality[0] <= p["jpeg_quality"] <= r.jpeg_quality[1]
        assert p["blur_sigma"] == 0.0 or r.blur_sigma[0] <= p["blur_sigma"] <= r.blur_sigma[1]


def test_annotations_follow_the_warp():
    rgb = np.zeros((200, 300, 3), np.uint8)
    rgb[80:120, 130:170] = 255  # a white square where the "face" is
    params = draw_params(np.random.default_rng(5), EVAL_AUGMENT) | {"blur_sigma": 0.0, "brightness": 0.0}
    params["contrast"] = 1.0
    out, hom = apply_augmentation(rgb, params)
    face = facedata.FaceAnnotation("x", (130.0, 80.0, 170.0, 120.0))
    moved = facedata._warp_face(face, hom, out.shape)
    ys, xs = np.nonzero(out[:, :, 0] > 128)
    assert moved.box == pytest.approx((xs.min(), ys.min(), xs.max() + 1, ys.max() + 1), abs=3.0)


def test_annotated_boxes_lie_in_their_images(eval_set):
    for im in eval_set.images:
        h, w = im.rgb.shape[:2]
        for f in im.faces:
            x1, y1, x2, y2 = f.box
            side = max(x2 - x1, y2 - y1)
            assert -0.1 * side <= x1 < x2 <= w + 0.1 * side and -0.1 * side <= y1 < y2 <= h + 0.1 * side


def test_calibration_is_deterministic_and_disjoint_from_evaluation(eval_set):
    cal = calibration_images(40, seed=0)
    assert [n for n, _ in cal] == [n for n, _ in calibration_images(40, seed=0)]
    assert [_digest(x) for _, x in cal] == [_digest(x) for _, x in calibration_images(40, seed=0)]
    eval_sources = {p.name for p in EVAL_PHOTOS}
    assert not any(name.split("/")[-1].split(".")[0] in eval_sources for name, _ in cal)
    eval_digests = {_digest(im.rgb) for im in eval_set.images}
    assert not eval_digests & {_digest(x) for _, x in cal}
    assert CALIB_AUGMENT != EVAL_AUGMENT
    # faces first: three LFW faces, then one scene or mask texture
    assert [n.split("/")[0] for n, _ in cal[:4]] == ["lfw_subset"] * 3 + ["skimage"]


def test_calibration_rejects_n_below_one():
    with pytest.raises(InputError) as err:
        calibration_images(0)
    assert str(err.value) == "calibration_images: n = 0; expected at least 1"


def test_missing_package_is_named():
    with pytest.raises(MissingDependencyError) as err:
        package_dir("no_such_package_for_edge_deploy")
    assert str(err.value) == (
        "package 'no_such_package_for_edge_deploy' is not installed; it ships the photos the evaluation needs; "
        "run scripts/setup.sh in a checkout, or: pip install 'edge-deploy[convert]'"
    )
    assert err.value.exit_code == 9


def test_a_camera_clip_moves_its_annotations_with_the_picture():
    from converters.face.facedata import camera_clip, camera_clip_faces

    photo = next(p for p in EVAL_PHOTOS if p.name == "astronaut")  # 512x512: scaled by 480/512, 80 px left
    frames, faces = camera_clip(photo.load(), 16), camera_clip_faces(photo, 16)
    assert len(frames) == len(faces) == 16 and frames[0].shape == (480, 640, 3)
    x1, y1, x2, y2 = photo.faces[0].box
    s = 480 / 512
    np.testing.assert_allclose(faces[0][0].box, (x1 * s + 80, y1 * s, x2 * s + 80, y2 * s))
    # frame 15 is frame 0 turned 6 degrees, zoomed 9 % about the centre and shifted (37.5, 15): the box's centre
    # goes where that affine takes it
    centre = np.array([(x1 + x2) / 2 * s + 80, (y1 + y2) / 2 * s])
    a, zoom = np.deg2rad(6.0), 1.09
    turn = zoom * np.array([[np.cos(a), np.sin(a)], [-np.sin(a), np.cos(a)]])
    want = turn @ (centre - (320, 240)) + (320, 240) + (37.5, 15.0)
    box = faces[15][0].box
    np.testing.assert_allclose(((box[0] + box[2]) / 2, (box[1] + box[3]) / 2), want, atol=1e-6)
