"""edge.face.align: dlib's chip geometry from five landmarks."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from edge.errors import InputError
from edge.face import align
from edge.face.align import align_chip, five_points_from_68, pyramid_down_2, similarity_transform, template_points


def _smooth_texture(size: int, seed: int = 0) -> np.ndarray:
    """A low-frequency colour texture: survives resampling, but every region differs."""
    small = np.random.default_rng(seed).integers(0, 256, (8, 8, 3), dtype=np.uint8)
    return cv2.resize(small, (size, size), interpolation=cv2.INTER_CUBIC)


def test_template_comes_from_dlibs_mean_face():
    t = template_points(150, 0.25)
    # image-left eye: mean of points 36-41 of dlib's mean face, mapped with (0.25 + p) / 1.5 * 150
    left_x = np.mean([0.121737, 0.187122, 0.265825, 0.334606, 0.260918, 0.182743])
    left_y = np.mean([0.216423, 0.178758, 0.179852, 0.231733, 0.245099, 0.244077])
    assert t[0] == pytest.approx(((0.25 + left_x) / 1.5 * 150, (0.25 + left_y) / 1.5 * 150), abs=1e-9)
    # the mean face is mirror-symmetric about x = 0.490127: so are the eyes and mouth corners
    assert t[0, 1] == pytest.approx(t[1, 1]) and t[3, 1] == pytest.approx(t[4, 1])
    mid = (0.25 + 0.490127) / 1.5 * 150
    assert (t[0, 0] + t[1, 0]) / 2 == pytest.approx(mid, abs=1e-4)
    assert (t[3, 0] + t[4, 0]) / 2 == pytest.approx(mid, abs=1e-4)
    assert t[2] == pytest.approx(((0.25 + 0.490127) / 1.5 * 150, (0.25 + (0.515625 + 0.628106) / 2) / 1.5 * 150))


def test_five_points_from_68_uses_the_same_points_as_the_template():
    mean68 = np.zeros((68, 2))
    mean68[17:] = np.stack([align._MEAN_FACE_X, align._MEAN_FACE_Y], axis=1)
    five = five_points_from_68(mean68)
    assert np.allclose((0.25 + five) / 1.5 * 150, template_points())
    with pytest.raises(InputError) as err:
        five_points_from_68(np.zeros((5, 2)))
    assert str(err.value) == "68-point landmarks: shape (5, 2); expected (68, 2)"


def test_similarity_transform_recovers_a_known_one_and_never_reflects():
    src = np.random.default_rng(1).normal(size=(5, 2)) * 30
    a = np.deg2rad(25.0)
    m = 1.7 * np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
    dst = src @ m.T + (40.0, -12.0)
    got = similarity_transform(src, dst)
    assert np.allclose(got[:, :2], m) and np.allclose(got[:, 2], (40.0, -12.0))
    mirrored = dst * (-1, 1)
    assert np.linalg.det(similarity_transform(src, mirrored)[:, :2]) > 0


def test_weights_change_the_fit():
    src = template_points()
    dst = src.copy()
    dst[3:] += (0.0, 12.0)  # mouth corners 12 px lower
    equal = similarity_transform(src, dst)
    eyes_only = similarity_transform(src, dst, np.array([1, 1, 1, 0, 0]))
    assert np.allclose(eyes_only, [[1, 0, 0], [0, 1, 0]], atol=1e-9)
    assert not np.allclose(equal, eyes_only, atol=1e-3)


def test_identity_alignment_follows_dlibs_half_pixel_convention():
    img = np.random.default_rng(4).integers(0, 256, (150, 150, 3), dtype=np.uint8)  # noise: no slack
    chip = align_chip(img, template_points())
    # Landmarks on the template: scale 1, but dlib puts the template's centre (75, 75) on chip pixel
    # (74.5, 74.5), so chip pixel (u, v) samples the image at (u + 0.5, v + 0.5): the truncated mean of
    # four pixels. dlib's bilinear needs both neighbours inside the image, else the pixel is black.
    four = img[:-1, :-1].astype(int) + img[1:, :-1] + img[:-1, 1:] + img[1:, 1:]
    diff = chip[:149, :149].astype(int) - four // 4
    assert np.abs(diff).max() <= 1  # float noise of the fit (~1e-17) can tip a truncation by one
    assert (diff != 0).mean() < 0.3
    assert not chip[149].any() and not chip[:, 149].any()


def test_recovers_a_face_rotated_and_enlarged_three_times():
    chip_true = _smooth_texture(150, seed=2)
    a = np.deg2rad(30.0)
    m = 3.0 * np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
    t = np.array([300.0, 120.0])
    big = cv2.warpAffine(chip_true, np.c_[m, t], (800, 800), flags=cv2.INTER_CUBIC)
    landmarks = template_points() @ m.T + t
    got = align_chip(big, landmarks).astype(int)
    diff = np.abs(got[4:-4, 4:-4] - chip_true[4:-4, 4:-4].astype(int)).mean()
    assert diff < 6.0  # dlib's half-pixel shift, (s*150-1)/149 step and pyramid bias; 3.9 measured
    swapped = landmarks[[1, 0, 2, 4, 3]]  # left/right swapped: a 180-degree misalignment
    wrong = np.abs(align_chip(big, swapped).astype(int)[4:-4, 4:-4] - chip_true[4:-4, 4:-4]).mean()
    assert wrong > 20.0


def test_pyramid_down_matches_dlibs_integer_filter():
    img = np.random.default_rng(3).integers(0, 256, (21, 30, 3), dtype=np.uint8)
    out = pyramid_down_2(img)
    assert out.shape == ((21 - 3) // 2, (30 - 3) // 2, 3)
    k = np.array([1, 4, 6, 4, 1])
    r, c = 4, 7  # output pixel (r, c) is centred on input (2r + 2, 2c + 2)
    window = img[2 * r : 2 * r + 5, 2 * c : 2 * c + 5].astype(np.int64)
    expected = (np.einsum("i,j,ijc->c", k, k, window)) // 256
    assert np.array_equal(out[r, c], expected)
    assert np.array_equal(pyramid_down_2(np.full((40, 40, 3), 77, np.uint8)), np.full((18, 18, 3), 77))
    assert pyramid_down_2(np.zeros((8, 50, 3), np.uint8)).shape == (0, 0, 3)


def test_chip_outside_the_image_is_black():
    img = _smooth_texture(100)
    assert not align_chip(img, template_points() + 5000.0).any()


def test_errors_name_what_is_wrong():
    img = np.zeros((10, 10, 3), np.uint8)
    with pytest.raises(InputError) as err:
        align_chip(img, np.zeros((4, 2)))
    assert str(err.value) == "align_chip: landmarks have shape (4, 2); expected (5, 2) in LANDMARK_NAMES order"
    with pytest.raises(InputError) as err:
        align_chip(img.astype(np.float32), np.zeros((5, 2)))
    assert str(err.value) == "align_chip: image is float32 (10, 10, 3); expected uint8 array [H, W, 3] (RGB)"
    with pytest.raises(InputError) as err:
        align_chip(img, np.full((5, 2), np.nan))
    assert str(err.value).startswith("align_chip: landmarks contain NaN or infinity")
    with pytest.raises(InputError) as err:
        align_chip(np.zeros((0, 10, 3), np.uint8), np.zeros((5, 2)))
    assert str(err.value) == "align_chip: image has zero size (0, 10, 3)"


def _random_warps(seed: int, count: int):
    """Sources and chip->source maps of every kind: inside, partly or wholly outside, flat, on the half pixel."""
    rng = np.random.default_rng(seed)
    for i in range(count):
        rows, cols = (int(v) for v in rng.integers(2, 220, 2))
        src = rng.integers(0, 256, (rows, cols, 3), dtype=np.uint8)
        if i % 3 == 0:
            src[:] = rng.integers(0, 256)  # flat: every mix is a whole number, where double rounding shows
        elif i % 3 == 1:
            src = src // 85 * 85
        size = int(rng.integers(2, 80))
        angle = 0.0 if i % 4 == 0 else rng.uniform(-np.pi, np.pi)
        scale = rng.uniform(0.1, 1.5)
        lin = scale * np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
        shift = rng.uniform(-30, (cols, rows)) if i % 2 else rng.uniform(0, (cols, rows)) * 0.5
        if i % 5 == 0:
            shift = np.round(shift) + 0.5
        yield src, np.c_[lin, shift], size


def test_bilinear_equals_the_previous_code_byte_for_byte():
    """_bilinear against the code before vectorisation (float64 copy of the source, pixel by pixel)."""
    from benchmarks.harness.align_reference import _bilinear as previous_bilinear

    inside = 0
    for src, m, size in _random_warps(seed=5, count=600):
        got = align._bilinear(src, m, size)
        assert np.array_equal(got, previous_bilinear(src, m, size)), (src.shape, m.tolist(), size)
        inside += align._surely_inside(m, size, *src.shape[:2])
    assert 100 < inside < 500  # both branches ran


def test_surely_inside_never_claims_a_pixel_that_is_outside():
    claimed, inside = 0, 0
    for src, m, size in _random_warps(seed=6, count=600):
        rows, cols = src.shape[:2]
        grid = np.arange(size, dtype=np.float64)
        x = (m[0, 0] * grid)[None, :] + (m[0, 1] * grid)[:, None] + m[0, 2]
        y = (m[1, 0] * grid)[None, :] + (m[1, 1] * grid)[:, None] + m[1, 2]
        all_in = (np.floor(x) >= 0).all() and (np.floor(y) >= 0).all()
        all_in = all_in and (np.floor(x) + 1 < cols).all() and (np.floor(y) + 1 < rows).all()
        inside += bool(all_in)
        if align._surely_inside(m, size, rows, cols):
            claimed += 1
            assert all_in, (src.shape, m.tolist(), size)
    # the claim was put to the test (measured: 239 of the 239 warps inside), not vacuously true by never claiming
    print(f"{claimed} of the {inside} warps wholly inside claimed, of 600")
    assert claimed >= 100 and claimed >= 0.9 * inside, (claimed, inside)
