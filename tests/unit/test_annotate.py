"""edge.face.annotate: what is drawn, where, checked on the pixels."""

from __future__ import annotations

import numpy as np
import pytest

from edge.errors import InputError
from edge.face.annotate import KNOWN, LANDMARK, TEXT, UNKNOWN, annotate, face_label

GREY = 90


def _face(name, box=(100, 120, 200, 240), distance=0.4123):
    x1, y1, x2, y2 = box
    marks = [[x1 + 30, y1 + 40], [x2 - 30, y1 + 40], [(x1 + x2) / 2, y1 + 70], [x1 + 35, y2 - 30], [x2 - 35, y2 - 30]]
    return {"box": list(box), "score": 0.99, "landmarks": marks, "name": name, "distance": distance}


def _canvas() -> np.ndarray:
    return np.full((360, 480, 3), GREY, np.uint8)


def _is(pixel, colour) -> bool:
    return bool(np.all(np.abs(pixel.astype(int) - np.array(colour)) <= 2))


def test_box_landmarks_and_label_are_drawn_where_the_face_is():
    rgb = _canvas()
    before = rgb.copy()
    face = _face("alice")
    out = annotate(rgb, [face])
    assert np.array_equal(rgb, before)  # the input is left alone
    assert out.shape == rgb.shape and out.dtype == np.uint8
    # the box's edges in the known colour (left edge, bottom edge)
    assert _is(out[180, 100], KNOWN) and _is(out[240, 150], KNOWN)
    # a landmark dot in its colour; the box's inside away from marks untouched
    x, y = face["landmarks"][2]
    assert _is(out[round(y), round(x)], LANDMARK)
    assert _is(out[200, 150], (GREY,) * 3)
    # far from the face nothing changed
    assert np.array_equal(out[300:, 300:], before[300:, 300:])
    # the label: a band of the box's colour right above it, with white text in it
    band = out[95:120, 100:200]
    assert np.mean([_is(p, KNOWN) for p in band.reshape(-1, 3)]) > 0.3
    assert sum(_is(p, TEXT) for p in band.reshape(-1, 3)) > 30


def test_the_name_and_distance_are_what_is_written():
    """Different names give different text pixels; a longer label a wider band."""
    out_a = annotate(_canvas(), [_face("al")])
    out_b = annotate(_canvas(), [_face("bob")])
    out_long = annotate(_canvas(), [_face("bartholomew")])
    band = (slice(95, 120), slice(100, 400))
    assert face_label(_face("al")) == "al 0.412"
    assert not np.array_equal(out_a[band], out_b[band])

    def width(img):
        cols = np.where((np.abs(img[band].astype(int) - KNOWN).sum(axis=2) <= 6).any(axis=0))[0]
        return cols.max() - cols.min()

    assert width(out_long) > width(out_a) + 50


def test_an_unknown_face_is_drawn_in_its_own_colour_and_labelled_unknown():
    face = _face(None, distance=0.71)
    assert face_label(face) == "unknown 0.710"
    assert face_label({**face, "distance": float("inf")}) == face_label({**face, "distance": None}) == "unknown"
    out = annotate(_canvas(), [face])
    assert _is(out[180, 100], UNKNOWN) and not _is(out[180, 100], KNOWN)


def test_a_face_at_the_top_gets_its_label_inside_the_box():
    out = annotate(_canvas(), [_face("alice", box=(100, 0, 200, 120))])
    top = out[2:20, 100:200].reshape(-1, 3)
    assert sum(_is(p, TEXT) for p in top) > 30


def test_no_faces_is_a_copy_and_bad_input_is_refused():
    rgb = _canvas()
    assert np.array_equal(annotate(rgb, []), rgb)
    with pytest.raises(InputError) as err:
        annotate(np.zeros((4, 4), np.uint8), [])
    assert str(err.value) == "image to annotate is uint8 (4, 4); expected uint8 [H, W, 3]"
    with pytest.raises(InputError) as err:
        annotate(rgb, [{"box": [1, 2, 3], "name": None}])
    assert str(err.value) == "face 0: box is [1, 2, 3]; expected [x1, y1, x2, y2]"
