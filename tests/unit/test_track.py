"""edge.face.track without models: how a followed face's detection moves, and the frame count it accepts (the
tracker on real models and a camera-like clip: tests/integration/test_track.py)."""

from __future__ import annotations

import numpy as np
import pytest

from edge.errors import InputError
from edge.face.track import MAX_SCALE_STEP, _moved, check_detect_every, chip_change
from edge.face.types import Detection

POINTS = np.array([[120.0, 100.0], [108.0, 100.0], [80.0, 100.0], [92.0, 100.0], [100.0, 125.0]])
FACE = Detection(
    box=(70.0, 80.0, 130.0, 150.0),
    score=0.93,
    landmarks=np.array([[86, 100], [114, 100], [100, 118], [88, 135], [112, 135]], np.float32),
)


def test_a_face_that_moves_and_grows_carries_its_box_and_landmarks_along():
    new = (POINTS - 100.0) * 1.2 + (110.0, 95.0)  # 20 % larger, centred 10 px right and 5 px up
    moved = _moved(FACE, POINTS, new, (480, 640, 3))
    assert moved is not None and moved.score == FACE.score
    # the box centre (100, 115) goes to (110, 113), its 60 x 70 sides to 72 x 84
    np.testing.assert_allclose(moved.box, (74.0, 71.0, 146.0, 155.0), atol=1e-9)
    want = (FACE.landmarks.astype(np.float64) - 100.0) * 1.2 + (110.0, 95.0)
    np.testing.assert_allclose(moved.landmarks, want, atol=1e-4)
    assert moved.landmarks.dtype == np.float32


def test_a_turned_face_keeps_an_upright_box_of_the_same_size():
    turn = np.array([[0.0, -1.0], [1.0, 0.0]])  # 90 degrees about (100, 100)
    moved = _moved(FACE, POINTS, (POINTS - 100.0) @ turn.T + 100.0, (480, 640, 3))
    assert moved is not None
    # the box's centre (100, 115) turns to (85, 100); its sides keep their lengths
    np.testing.assert_allclose(moved.box, (55.0, 65.0, 115.0, 135.0), atol=1e-9)


@pytest.mark.parametrize(
    ("new", "why"),
    [
        ((POINTS - 100.0) * (MAX_SCALE_STEP * 1.01) + 100.0, "grew too fast"),
        ((POINTS - 100.0) / (MAX_SCALE_STEP * 1.01) + 100.0, "shrank too fast"),
        (POINTS + (600.0, 0.0), "left the image"),
        (POINTS - (0.0, 120.0), "left the image at the top"),
    ],
)
def test_a_face_that_jumps_is_lost(new, why):
    assert _moved(FACE, POINTS, new, (480, 640, 3)) is None, why


@pytest.mark.parametrize("value", [0, -1, 1001, 2.0, "4", True, None])
def test_detect_every_is_a_whole_number_of_frames(value):
    with pytest.raises(InputError) as err:
        check_detect_every(value, "face.detect_every")
    assert str(err.value) == (
        f"face.detect_every = {value!r}; expected a whole number of frames from 1 (the detector on every frame) to 1000"
    )


def test_detect_every_accepts_numpy_integers():
    assert check_detect_every(np.int64(4)) == 4 and type(check_detect_every(np.int64(4))) is int


def test_chip_change_is_the_mean_absolute_grey_level_difference_without_wrapping():
    a = np.zeros((150, 150, 3), np.uint8)
    b = a.copy()
    b[:75] = 255  # half the values 255 apart: uint8 arithmetic would wrap to 1
    assert chip_change(a, b) == chip_change(b, a) == 127.5
    assert chip_change(a, a) == 0.0


def test_chip_change_equals_numpys_int16_mean_bit_for_bit():
    rng = np.random.default_rng(7)
    for _ in range(20):
        a, b = (rng.integers(0, 256, (150, 150, 3), dtype=np.uint8) for _ in range(2))
        assert chip_change(a, b) == float(np.abs(a.astype(np.int16) - b.astype(np.int16)).mean())


def test_chip_change_refuses_chips_of_two_shapes():
    with pytest.raises(InputError, match=r"\(150, 150, 3\) and \(112, 112, 3\)"):
        chip_change(np.zeros((150, 150, 3), np.uint8), np.zeros((112, 112, 3), np.uint8))
