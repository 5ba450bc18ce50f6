"""Calibration helpers of the face quantization (no models run here)."""

from __future__ import annotations

import numpy as np

from converters.face.calibration import CalibrationSet, _feeds, constant_calibration, pnet_windows


def test_pnet_windows_are_receptive_fields_at_cell_positions():
    level = np.arange(3 * 16 * 14, dtype=np.float32).reshape(3, 16, 14)
    windows, cells = pnet_windows([level], cap=100, rng=np.random.default_rng(0))
    assert cells == 3 * 2  # rows 0, 2, 4 and columns 0, 2 of a 16x14 level
    assert len(windows) == 6 and all(w.shape == (3, 12, 12) for w in windows)
    starts = sorted((int(w[0, 0, 0]) // 14, int(w[0, 0, 0]) % 14) for w in windows)
    assert starts == [(0, 0), (0, 2), (2, 0), (2, 2), (4, 0), (4, 2)]
    for w in windows:
        r, c = divmod(int(w[0, 0, 0]), 14)
        np.testing.assert_array_equal(w, level[:, r : r + 12, c : c + 12])


def test_pnet_windows_are_drawn_in_proportion_to_cells():
    big = np.zeros((3, 12 + 2 * 29, 12 + 2 * 29), np.float32)  # 30 x 30 cells
    small = np.ones((3, 12 + 2 * 9, 12 + 2 * 9), np.float32)  # 10 x 10 cells
    windows, cells = pnet_windows([big, small], cap=100, rng=np.random.default_rng(0))
    assert cells == 1000 and len(windows) == 100
    assert sum(float(w.mean()) == 1.0 for w in windows) == 10  # 100 of 1000 cells come from the small level


def test_feeds_are_equal_batches():
    samples = [np.full((3, 24, 24), i, np.float32) for i in range(10)]
    feeds = _feeds(samples, 4, "input")
    assert [f["input"].shape for f in feeds] == [(4, 3, 24, 24), (4, 3, 24, 24)]
    assert [f["input"].shape for f in _feeds(samples[:3], 8, "input")] == [(3, 3, 24, 24)]


def test_constant_calibration_keeps_shapes_and_says_so():
    calib = CalibrationSet({"embedder": [{"chip": np.zeros((2, 3, 150, 150), np.float32)}]}, 5, 0, {"embedder": 2})
    grey = constant_calibration(calib, 127.5)
    assert grey.feeds["embedder"][0]["chip"].shape == (2, 3, 150, 150)
    assert np.all(grey.feeds["embedder"][0]["chip"] == 127.5)
    assert grey.to_dict()["image_sources"] == {"constant 127.5": 5}
