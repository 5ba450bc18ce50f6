"""BlazeFace's numpy half: anchors, decoding, weighted NMS, letterbox, the five landmarks (no model needed)."""

from __future__ import annotations

import numpy as np
import pytest

from edge.errors import InputError
from edge.face.detect_blazeface import (
    FULL_RANGE,
    SHORT_RANGE,
    decode,
    five_points,
    letterbox,
    letterbox_window,
    ssd_anchors,
    weighted_nms,
)
from edge.face.detect_mtcnn import integral_image
from edge.face.models import Detector, open_face_pipeline


def test_short_range_anchors_follow_mediapipes_order():
    anchors = ssd_anchors(SHORT_RANGE)
    assert anchors.shape == (896, 2) and anchors.dtype == np.float32
    # 16x16 cells x 2 anchors (stride 8), then 8x8 cells x 6 (the three stride-16 layers merged), row by row
    assert np.array_equal(anchors[0], anchors[1]) and np.allclose(anchors[0], [0.5 / 16, 0.5 / 16])
    assert np.allclose(anchors[2], [1.5 / 16, 0.5 / 16])
    assert np.allclose(anchors[32], [0.5 / 16, 1.5 / 16])
    assert np.allclose(anchors[512:518], [0.5 / 8, 0.5 / 8]) and np.allclose(anchors[518], [1.5 / 8, 0.5 / 8])
    assert np.allclose(anchors[-1], [7.5 / 8, 7.5 / 8])


def test_full_range_anchors_are_one_per_cell_of_48x48():
    anchors = ssd_anchors(FULL_RANGE)
    assert anchors.shape == (2304, 2)
    assert np.allclose(anchors[:2], [[0.5 / 48, 0.5 / 48], [1.5 / 48, 0.5 / 48]])


def test_decode_scales_by_the_input_and_adds_the_anchor():
    anchors = np.array([[0.5, 0.25]], np.float32)
    raw = np.zeros((1, 16), np.float32)
    raw[0, :4] = [12.8, -12.8, 64.0, 32.0]  # centre offset (0.1, -0.1), size (0.5, 0.25) of 128
    raw[0, 4:6] = [6.4, 0.0]
    boxes, points, scores = decode(raw, np.array([0.0, 200.0, -200.0], np.float32)[:1], anchors, 128)
    assert np.allclose(boxes[0], [0.6 - 0.25, 0.15 - 0.125, 0.6 + 0.25, 0.15 + 0.125])
    assert np.allclose(points[0, 0], [0.55, 0.25]) and np.allclose(points[0, 1:], [[0.5, 0.25]] * 5)
    assert scores.tolist() == [0.5]
    _, _, clipped = decode(
        np.zeros((2, 16), np.float32), np.array([500.0, -500.0], np.float32), anchors.repeat(2, 0), 128
    )
    assert clipped[0] == 1.0 and 0 <= clipped[1] < 1e-40  # logits clipped to +-100, no overflow


def test_weighted_nms_averages_each_cluster_by_score():
    boxes = np.array([[0, 0, 10, 10], [1, 1, 11, 11], [50, 50, 60, 60], [0, 0, 10, 10]], np.float32)
    points = np.arange(4 * 6 * 2, dtype=np.float32).reshape(4, 6, 2)
    scores = np.array([0.9, 0.6, 0.7, 0.3], np.float32)
    out_boxes, out_points, out_scores = weighted_nms(boxes, points, scores, 0.3)
    assert out_scores.tolist() == pytest.approx([0.9, 0.7])
    w = np.array([0.9, 0.6, 0.3])
    assert np.allclose(out_boxes[0], (boxes[[0, 1, 3]] * w[:, None]).sum(0) / w.sum())
    assert np.allclose(out_points[0], (points[[0, 1, 3]] * w[:, None, None]).sum(0) / w.sum())
    assert np.allclose(out_boxes[1], boxes[2]) and np.allclose(out_points[1], points[2])
    empty = weighted_nms(np.zeros((0, 4), np.float32), np.zeros((0, 6, 2), np.float32), np.zeros(0, np.float32))
    assert [a.shape for a in empty] == [(0, 4), (0, 6, 2), (0,)]


def test_letterbox_centres_the_image_on_black():
    rgb = np.full((50, 100, 3), 255, np.uint8)
    tensor, place = letterbox(rgb, 128)
    assert tensor.shape == (1, 128, 128, 3) and tensor.dtype == np.float32
    assert (place.scale, place.pad_x, place.pad_y) == (1.28, 0.0, 32.0)
    assert np.all(tensor[0, :32] == -1.0) and np.all(tensor[0, 96:] == -1.0)
    assert np.allclose(tensor[0, 32:96], 1.0)
    tall, place = letterbox(np.zeros((100, 50, 3), np.uint8), 128)  # black image: -1 inside the borders too
    assert (place.pad_x, place.pad_y) == (32.0, 0.0) and np.all(tall == -1.0)
    tensor, _ = letterbox(np.full((100, 50, 3), 255, np.uint8), 128)
    assert np.all(tensor[0, :, :32] == -1.0) and np.all(tensor[0, :, 96:] == -1.0)
    assert np.allclose(tensor[0, :, 32:96], 1.0)


def test_five_points_orders_the_eyes_and_estimates_the_mouth_corners():
    six = np.array([[[60, 40], [40, 40], [50, 50], [50, 60], [30, 45], [70, 45]]], np.float32)  # eyes swapped
    five = five_points(six)
    assert five.shape == (1, 5, 2) and five.dtype == np.float32
    assert five[0, 0].tolist() == [40, 40] and five[0, 1].tolist() == [60, 40] and five[0, 2].tolist() == [50, 50]
    left, right = five[0, 3], five[0, 4]
    assert left[1] == right[1] == 60 and (left[0] + right[0]) / 2 == 50
    assert 10 < right[0] - left[0] < 20  # about 0.8 of the 20-pixel eye distance (dlib's mean face)


def test_an_unknown_detector_name_is_refused(tmp_path):
    with pytest.raises(InputError) as err:
        open_face_pipeline(tmp_path, detector="yolo")
    assert str(err.value) == (
        "face detector 'yolo' is unknown; expected one of 'mtcnn', 'blazeface', 'blazeface-full', "
        "'blazeface-full-tiled'"
    )
    assert [d.value for d in Detector] == ["mtcnn", "blazeface", "blazeface-full", "blazeface-full-tiled"]


def test_letterbox_of_a_whole_frame_equals_the_letterbox_of_its_integral_image():
    """``letterbox`` (no integral image; what ``detect`` runs without tiles) and ``letterbox_window`` over the
    integral image (what tiled detection runs) give the same network input, bit for bit, and placement."""
    rng = np.random.default_rng(13)
    for shape in ((480, 640, 3), (512, 600, 3), (93, 211, 3)):
        rgb = rng.integers(0, 256, shape, dtype=np.uint8)
        tensor, place = letterbox(rgb, 192)
        want, where = letterbox_window(integral_image(rgb), (0, shape[0], 0, shape[1]), 192)
        assert np.array_equal(tensor.view(np.uint32), want.view(np.uint32)) and place == where
