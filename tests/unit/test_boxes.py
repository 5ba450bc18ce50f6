"""converters.face.boxes: IoU and greedy one-to-one matching."""

from __future__ import annotations

import pytest

from converters.face.boxes import iou, match_boxes


def test_iou():
    assert iou((0, 0, 10, 10), (0, 0, 10, 10)) == 1.0
    assert iou((0, 0, 10, 10), (5, 0, 15, 10)) == pytest.approx(50 / 150)
    assert iou((0, 0, 10, 10), (20, 20, 30, 30)) == 0.0
    assert iou((0, 0, 0, 0), (0, 0, 0, 0)) == 0.0


def test_match_boxes_is_greedy_one_to_one():
    left = [(0, 0, 10, 10), (100, 100, 110, 110)]
    right = [(3, 3, 13, 13), (2, 0, 12, 10), (300, 300, 310, 310)]
    got = match_boxes(left, right, min_iou=0.3)
    assert [(i, j) for i, j, _ in got] == [(0, 1)]  # (0,1) overlaps more than (0,0); box 1 has no partner
    assert got[0][2] == pytest.approx(iou(left[0], right[1]))
