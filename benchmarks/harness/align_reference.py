"""The alignment as it was before vectorisation (commit 169f001), kept verbatim as the yardstick.

``benchmarks/align_speed.py`` times it beside ``edge.face.align`` / ``edge.face.shape5``, and
``tests/integration/test_shape5.py`` (and ``tests/unit/test_shape5.py``, ``tests/unit/test_align.py``) check that
the vectorised code returns the same landmarks and chips, on real faces and on random ones. Only the hot parts
changed, so only they are kept here: dlib's shape predictor walked tree by tree, and the chip's bilinear sampling
over a float64 copy of the source. The geometry (``chip_to_image``) and the pyramid are shared with
``edge.face.align``.
"""

from __future__ import annotations

import math

import numpy as np

from edge.face.align import DLIB5_TEMPLATE, DLIB_CHIP_PADDING, DLIB_CHIP_SIZE, chip_to_image, pyramid_down_2
from edge.face.shape5 import ShapePredictor


def _similarity_2x2(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    s_c, d_c = src - src.mean(axis=0), dst - dst.mean(axis=0)
    var = (s_c**2).sum() / len(src)
    u, sig, vt = np.linalg.svd(d_c.T @ s_c / len(src))
    fix = np.eye(2)
    if np.linalg.det(u) * np.linalg.det(vt) < 0:
        fix[1, 1] = -1.0
    return ((sig * np.diag(fix)).sum() / var) * (u @ fix @ vt) if var > 0 else np.eye(2)


def _intensities(rgb: np.ndarray, pix: np.ndarray) -> np.ndarray:
    h, w = rgb.shape[:2]
    inside = (pix[:, 0] >= 0) & (pix[:, 0] < w) & (pix[:, 1] >= 0) & (pix[:, 1] < h)
    out = np.zeros(len(pix), np.float32)
    px = rgb[pix[inside, 1], pix[inside, 0]].astype(np.int32)
    out[inside] = px.sum(axis=1) // 3
    return out


def predict(sp: ShapePredictor, rgb: np.ndarray, rect: tuple[int, int, int, int]) -> np.ndarray:
    """The old ``ShapePredictor.predict``: one tree at a time, in a Python loop."""
    split_idx, leaf_values = sp.split_idx, sp.leaf_values
    depth = int(np.log2(split_idx.shape[2] + 1))
    left, top, right, bottom = (int(v) for v in rect)
    origin = np.array([left, top], np.float64)
    extent = np.array([right - left, bottom - top], np.float64)
    shape = sp.initial.copy()
    trees = np.arange(split_idx.shape[1])
    for level in range(split_idx.shape[0]):
        tform = _similarity_2x2(sp.initial.astype(np.float64), shape.astype(np.float64)).astype(np.float32)
        unit = sp.deltas[level] @ tform.T + shape[sp.anchor_idx[level]]
        pix = np.floor(origin + unit.astype(np.float64) * extent + 0.5).astype(np.intp)
        feats = _intensities(rgb, pix)
        node = np.zeros(len(trees), np.intp)
        for _ in range(depth):
            idx = split_idx[level, trees, node]
            left_branch = feats[idx[:, 0]] - feats[idx[:, 1]] > sp.split_thresh[level, trees, node]
            node = np.where(left_branch, 2 * node + 1, 2 * node + 2)
        leaves = leaf_values[level, trees, node - split_idx.shape[2]]
        for leaf in leaves:
            shape += leaf
    return np.floor(origin + shape.astype(np.float64) * extent + 0.5)


def _bilinear(src: np.ndarray, m: np.ndarray, size: int) -> np.ndarray:
    out = np.zeros((size, size, src.shape[2]), np.uint8)
    if src.shape[0] < 2 or src.shape[1] < 2:
        return out
    v, u = np.mgrid[0:size, 0:size].astype(np.float64)
    x = m[0, 0] * u + m[0, 1] * v + m[0, 2]
    y = m[1, 0] * u + m[1, 1] * v + m[1, 2]
    left, top = np.floor(x), np.floor(y)
    inside = (left >= 0) & (top >= 0) & (left + 1 < src.shape[1]) & (top + 1 < src.shape[0])
    li, ti = left[inside].astype(np.intp), top[inside].astype(np.intp)
    fx, fy = (x[inside] - left[inside])[:, None], (y[inside] - top[inside])[:, None]
    s = src.astype(np.float64)
    val = (1 - fy) * ((1 - fx) * s[ti, li] + fx * s[ti, li + 1]) + fy * (
        (1 - fx) * s[ti + 1, li] + fx * s[ti + 1, li + 1]
    )
    out[inside] = np.clip(val, 0, 255).astype(np.uint8)
    return out


def warp_chip(rgb: np.ndarray, chip_to_img: np.ndarray, size: int) -> np.ndarray:
    """The old ``edge.face.align.warp_chip``."""
    scale = math.hypot(chip_to_img[0, 0], chip_to_img[1, 0])
    rect_side = scale * (size - 1) + 1.0
    levels = 0
    while rect_side / 2.0 ** (levels + 1) > size:
        levels += 1
    grow = 2.0
    for _ in range(levels):
        grow = grow * 2 + 2
    half = (rect_side - 1.0) / 2.0
    centre = chip_to_img[:, :2] @ np.full(2, (size - 1) / 2.0) + chip_to_img[:, 2]
    rot = chip_to_img[:, :2] / scale
    img_corners = centre + np.array([[-1, -1], [1, -1], [-1, 1], [1, 1]]) * half @ rot.T
    h, w = rgb.shape[:2]
    x0 = max(0, round(img_corners[:, 0].min() - grow))
    y0 = max(0, round(img_corners[:, 1].min() - grow))
    x1 = min(w, round(img_corners[:, 0].max() + grow) + 1)
    y1 = min(h, round(img_corners[:, 1].max() + grow) + 1)
    if x1 <= x0 or y1 <= y0:
        return np.zeros((size, size, 3), np.uint8)
    src = rgb[y0:y1, x0:x1]
    m = chip_to_img.copy()
    m[:, 2] -= (x0, y0)
    for _ in range(levels):
        src = pyramid_down_2(src)
        m = m / 2.0
        m[:, 2] -= (1.25, 0.75)
    return _bilinear(src, m, size)


def align_chip_dlib5(
    rgb: np.ndarray, points5: np.ndarray, size: int = DLIB_CHIP_SIZE, padding: float = DLIB_CHIP_PADDING
) -> np.ndarray:
    """The old ``edge.face.align.align_chip_dlib5`` (input checks left out)."""
    pts = np.asarray(points5, dtype=np.float64)
    template = (padding + np.array(DLIB5_TEMPLATE)) / (2.0 * padding + 1.0) * size
    return warp_chip(rgb, chip_to_image(template, pts, size), size)
