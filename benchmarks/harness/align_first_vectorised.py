"""The first vectorised numpy alignment (labelled ``first vectorised`` in the tables), kept verbatim as the yardstick of
issue 13's "alignment in ~1 ms a face" step.

``benchmarks/align_speed.py`` times it beside ``edge.face`` now and checks, every round, that both give the same
landmarks and chip bytes (the tests compare ``edge.face`` with ``benchmarks/harness/align_reference.py``). Only the
parts that changed are kept: the shape predictor's tables and cascade walk, and the chip's geometry and bilinear
sampling. ``pyramid_down_2`` is shared with ``edge.face.align`` (unchanged).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from edge.errors import InputError
from edge.face.align import DLIB5_TEMPLATE, DLIB_CHIP_PADDING, DLIB_CHIP_SIZE, pyramid_down_2
from edge.face.shape5 import LUT_MAX_SPLITS, ShapePredictor, leaf_table


class ShapePredictorA94(ShapePredictor):
    """``edge.face.shape5.ShapePredictor`` as first vectorised (same model file, same public methods)."""

    def _build_tables(self) -> None:
        """Flat copies of the model for the vectorised walk (``predict_many``)."""
        levels, trees, splits, _ = self.split_idx.shape
        self._pair_a = np.ascontiguousarray(self.split_idx[..., 0].reshape(levels, -1))
        self._pair_b = np.ascontiguousarray(self.split_idx[..., 1].reshape(levels, -1))
        # For a whole number d (a difference of two intensities), d > t exactly when d > floor(t); beyond
        # +-1024 every difference falls on the same side, and a NaN threshold is never passed, as in dlib.
        thresh = np.nan_to_num(self.split_thresh.astype(np.float64), nan=1024.0)
        self._thresh = np.clip(np.floor(thresh), -1024, 1024).astype(np.int32).reshape(levels, -1)
        # row ``tree * (splits + 1) + leaf`` of a level's leaves
        self._leaf_rows = self.leaf_values.reshape(levels, trees * (splits + 1), -1)
        self._leaf_base = np.arange(trees, dtype=np.intp) * (splits + 1)
        self._leaf_of_code = leaf_table(self.depth).astype(np.uint8) if splits <= LUT_MAX_SPLITS else None
        self._bit_values = (2.0 ** np.arange(splits)).astype(np.float32)  # a tree's outcomes -> its code
        # The similarity fit from the mean shape to the current one, as one product (see _fit_transposed).
        src = self.initial.astype(np.float64)
        centred = src - src.mean(axis=0)
        var = float((centred**2).sum()) / len(src)
        rot = np.stack([-centred[:, 1], centred[:, 0]], axis=1)  # b = sum(d_y s_x - d_x s_y)
        self._fit = np.stack([centred.ravel(), rot.ravel()], axis=1) / (len(src) * var) if var > 0 else None

    def predict_many(self, rgb: np.ndarray, rects: Sequence[tuple[int, int, int, int]]) -> np.ndarray:
        """Landmarks of several faces of one image at once: ``predict`` for each rect, in one pass.

        Every level walks all trees of all faces together: one comparison of every split node of every tree
        (a few thousand pixel pairs), then the leaf each tree's outcomes lead to, then the leaves added tree by
        tree in float32, in dlib's order, so the sums round as in dlib's loop.

        Args:
            rgb: uint8 [H, W, 3] (a view that is not C-contiguous, e.g. a crop, is copied once).
            rects: (left, top, right, bottom) per face, inclusive pixel coordinates.

        Returns:
            float64 [len(rects), P, 2], each as ``predict`` returns it.

        Raises:
            InputError: if the image is not uint8 [H, W, 3], or a rect is not four numbers.
        """
        if not isinstance(rgb, np.ndarray) or rgb.dtype != np.uint8 or rgb.ndim != 3 or rgb.shape[2] != 3:
            desc = f"{rgb.dtype} {rgb.shape}" if isinstance(rgb, np.ndarray) else type(rgb).__name__
            raise InputError(f"shape predictor: image is {desc}; expected uint8 array [H, W, 3] (RGB)")
        box = np.asarray(rects, dtype=np.float64)
        if box.size == 0:
            return np.zeros((0, self.num_points, 2))
        if box.ndim != 2 or box.shape[1] != 4:
            raise InputError(
                f"shape predictor: rects have shape {box.shape}; expected [N, 4] (left, top, right, bottom)"
            )
        box = np.trunc(box)  # dlib rectangles hold whole pixels
        origin = box[:, None, :2]
        extent = box[:, None, 2:] - origin  # unit box -> rect corners, as dlib
        shape = np.repeat(self.initial[None], len(box), axis=0)
        pixels = np.ascontiguousarray(rgb).reshape(-1, 3)
        for level in range(self.split_idx.shape[0]):
            unit = self.deltas[level] @ self._fit_transposed(shape) + shape.take(self.anchor_idx[level], axis=1)
            pix = np.floor(origin + unit.astype(np.float64) * extent + 0.5)
            leaf = self._walk(level, _intensities(pixels, rgb.shape[:2], pix))
            steps = self._leaf_rows[level].take(leaf.T, axis=0).reshape(leaf.shape[1], -1)  # [trees, F * P * 2]
            both = np.concatenate([shape.reshape(1, -1), steps])
            # Summing down the rows of a C-ordered array, numpy adds row after row (its pairwise summation is
            # only along the contiguous axis): each point gets its trees' leaves one by one in float32, as
            # dlib's loop (tests/unit/test_shape5.py checks the order on values where it matters).
            shape = np.add.reduce(both, axis=0).reshape(shape.shape)
        return np.floor(origin + shape.astype(np.float64) * extent + 0.5)

    def _fit_transposed(self, shape: np.ndarray) -> np.ndarray:
        """Transposed rotation+scale of the least-squares similarity fit initial -> shape[f] (as dlib's).

        In 2-D the best rotation times scale is ``[[a, -b], [b, a]]`` with ``a + ib`` the sum of
        ``conj(s) * d`` over the centred points divided by n * var(s): the matrix Umeyama's SVD route gives
        (reflections refused). The mean shape is centred, so the current one need not be.

        Args:
            shape: float32 [F, P, 2].

        Returns:
            float32 [F, 2, 2], ``tform.T`` per face.
        """
        if self._fit is None:  # a mean shape without spread: dlib's fit is the identity
            return np.repeat(np.eye(2, dtype=np.float32)[None], len(shape), axis=0)
        a, b = (shape.reshape(len(shape), -1).astype(np.float64) @ self._fit).T
        return np.stack([a, b, -b, a], axis=1).astype(np.float32).reshape(-1, 2, 2)

    def _walk(self, level: int, feats: np.ndarray) -> np.ndarray:
        """Row of ``_leaf_rows[level]`` [F, trees] that every tree of ``level`` reaches on each face.

        Args:
            level: cascade level.
            feats: int32 [F, features] pixel intensities.
        """
        splits = self.split_idx.shape[2]
        pairs = np.take(feats, self._pair_a[level], axis=1) - np.take(feats, self._pair_b[level], axis=1)
        went_left = (pairs > self._thresh[level]).reshape(len(feats), -1, splits)  # [F, trees, splits]
        if self._leaf_of_code is not None:  # a tree's outcomes as one number (exact in float32) -> its leaf
            code = (went_left.astype(np.float32) @ self._bit_values).astype(np.intp)
            return self._leaf_base + self._leaf_of_code[code]
        node = np.zeros(went_left.shape[:2], np.intp)
        for _ in range(self.depth):
            node = 2 * node + 2 - np.take_along_axis(went_left, node[..., None], axis=2)[..., 0].astype(np.intp)
        return self._leaf_base + node - splits


def _intensities(pixels: np.ndarray, size: tuple[int, int], pix: np.ndarray) -> np.ndarray:
    """dlib's get_pixel_intensity of an rgb_pixel, (r + g + b) / 3 truncated; 0 outside the image.

    Args:
        pixels: the image's uint8 pixels [H * W, 3], row by row.
        size: (H, W).
        pix: whole-pixel (x, y) [..., 2], float.

    Returns:
        int32 [...].
    """
    h, w = size
    xy = pix.astype(np.intp)
    fits = xy.view(np.uintp) < np.array([w, h], np.uintp)  # a negative is a huge uintp
    outside = ~(fits[..., 0] & fits[..., 1])
    index = xy[..., 1] * w + xy[..., 0]
    index[outside] = 0
    px = pixels.take(index, axis=0).astype(np.int32)
    grey = (px[..., 0] + px[..., 1] + px[..., 2]) // 3
    grey[outside] = 0
    return grey


def similarity_transform(src: np.ndarray, dst: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Least-squares similarity transform (rotation, uniform scale, translation; no reflection).

    Umeyama's method, as dlib's ``find_similarity_transform``, optionally with per-point weights.

    Args:
        src: array [N, 2] of points, N >= 2.
        dst: array [N, 2] of the points they should map to.
        weights: optional non-negative [N]; equal weights by default.

    Returns:
        float64 matrix [2, 3] ``M`` with ``dst ~= M[:, :2] @ src + M[:, 2]``.
    """
    src = np.asarray(src, dtype=np.float64)
    dst = np.asarray(dst, dtype=np.float64)
    w = np.ones(len(src)) if weights is None else np.asarray(weights, dtype=np.float64)
    w = w / w.sum()
    mu_s, mu_d = w @ src, w @ dst
    s_c, d_c = src - mu_s, dst - mu_d
    var_s = float(w @ (s_c**2).sum(axis=1))
    cov = (d_c * w[:, None]).T @ s_c
    u, sig, vt = np.linalg.svd(cov)
    fix = np.eye(2)
    if np.linalg.det(u) * np.linalg.det(vt) < 0:  # would be a reflection: flip the weakest axis
        fix[1, 1] = -1.0
    rot = u @ fix @ vt
    scale = float((sig * np.diag(fix)).sum() / var_s) if var_s > 0 else 1.0
    out = np.empty((2, 3))
    out[:, :2] = scale * rot
    out[:, 2] = mu_d - scale * rot @ mu_s
    return out


def _chip_to_image(template: np.ndarray, pts: np.ndarray, size: int, weights: np.ndarray | None = None) -> np.ndarray:
    """Affine map from chip pixels to image pixels, built exactly as dlib's ``chip_details`` does."""
    tform = similarity_transform(template, pts, weights)
    scale = math.hypot(tform[0, 0], tform[1, 0])
    cos, sin = tform[0, 0] / scale, tform[1, 0] / scale
    centre = tform[:, :2] @ np.array([size / 2.0, size / 2.0]) + tform[:, 2]
    # dlib builds rect = centered_drect(centre, size * scale, ...), whose width is size * scale - 1
    # (centered_drect decrements it), then maps chip pixel 0 to its left edge and pixel size-1 to its
    # right edge: one chip pixel spans (size * scale - 1) / (size - 1) image pixels. Measured on real
    # faces, this cut dlib-vs-ours mean pixel error from 3.5 (plain similarity) to 0.5.
    step = (size * scale - 1.0) / (size - 1)
    half = (size - 1) / 2.0
    lin = step * np.array([[cos, -sin], [sin, cos]])
    out = np.empty((2, 3))
    out[:, :2] = lin
    out[:, 2] = centre - lin @ np.array([half, half])
    return out


def warp_chip(rgb: np.ndarray, chip_to_img: np.ndarray, size: int) -> np.ndarray:
    """Sample a ``size`` x ``size`` chip through an affine chip-to-image map, as dlib's extract_image_chips.

    When one chip pixel spans more than two image pixels, the source is first halved with dlib's own
    pyramid_down<2> (5x5 [1 4 6 4 1] Gaussian, integer maths) until it spans at most two; plain bilinear
    sampling of a much larger face aliases. Coordinates go down the pyramid through dlib's point_down,
    which carries its small, known bias (x - 0.5, y + 0.5 source pixels per level) into the chip: we keep
    it because the embedder was trained on dlib's chips.

    Args:
        rgb: uint8 image [H, W, 3].
        chip_to_img: float matrix [2, 3] mapping chip pixel (u, v) to image pixel (x, y).
        size: chip side in pixels.

    Returns:
        uint8 array [size, size, 3]; black where the chip leaves the image.
    """
    scale = math.hypot(chip_to_img[0, 0], chip_to_img[1, 0])
    rect_side = scale * (size - 1) + 1.0  # width of dlib's chip rectangle, see _chip_to_image
    levels = 0
    while rect_side / 2.0 ** (levels + 1) > size:
        levels += 1
    # dlib crops the source to the chip's rotated rectangle grown by 2, 6, 14, ... pixels (grow*2 + 2 per
    # level) before building the pyramid; the crop's origin decides which pixels the pyramid samples.
    grow = 2.0
    for _ in range(levels):
        grow = grow * 2 + 2
    half = (rect_side - 1.0) / 2.0  # rect is centred on chip pixel (size-1)/2 with width rect_side - 1
    centre = chip_to_img[:, :2] @ np.full(2, (size - 1) / 2.0) + chip_to_img[:, 2]
    rot = chip_to_img[:, :2] / scale
    img_corners = centre + np.array([[-1, -1], [1, -1], [-1, 1], [1, 1]]) * half @ rot.T
    h, w = rgb.shape[:2]
    x0 = max(0, round(img_corners[:, 0].min() - grow))
    y0 = max(0, round(img_corners[:, 1].min() - grow))
    x1 = min(w, round(img_corners[:, 0].max() + grow) + 1)
    y1 = min(h, round(img_corners[:, 1].max() + grow) + 1)
    if x1 <= x0 or y1 <= y0:  # the chip lies wholly outside the image
        return np.zeros((size, size, 3), np.uint8)
    src = rgb[y0:y1, x0:x1]
    m = chip_to_img.copy()
    m[:, 2] -= (x0, y0)
    for _ in range(levels):
        src = pyramid_down_2(src)
        m = m / 2.0
        m[:, 2] -= (1.25, 0.75)  # dlib's pyramid_down<2>::point_down
    return _bilinear(src, m, size)


def _bilinear(src: np.ndarray, m: np.ndarray, size: int) -> np.ndarray:
    """dlib's interpolate_bilinear: double maths, truncation to uint8, black if a neighbour is outside.

    Every chip pixel is computed (neighbours clamped into the image, the outside ones blacked afterwards),
    with dlib's expression in dlib's order, so the doubles and hence the truncated bytes are dlib's. The
    arithmetic runs on colour planes: numpy is several times faster on long rows than on pixels of three.
    """
    rows, cols, channels = src.shape
    if rows < 2 or cols < 2:
        return np.zeros((size, size, channels), np.uint8)
    grid = np.arange(size, dtype=np.float64)
    x = (m[0, 0] * grid)[None, :] + (m[0, 1] * grid)[:, None] + m[0, 2]
    y = (m[1, 0] * grid)[None, :] + (m[1, 1] * grid)[:, None] + m[1, 2]
    left, top = np.floor(x), np.floor(y)
    fx, fy = (x - left).ravel(), (y - top).ravel()
    outside = None
    if left.min() < 0 or top.min() < 0 or left.max() + 1 >= cols or top.max() + 1 >= rows:
        outside = ((left < 0) | (top < 0) | (left + 1 >= cols) | (top + 1 >= rows)).ravel()
        # there any neighbour will do: those pixels are blacked below
        left, top = np.clip(left, 0, cols - 2), np.clip(top, 0, rows - 2)
    corner = (top * cols + left).astype(np.intp).ravel()  # whole numbers far below 2**53: exact
    planes = src.transpose(2, 0, 1).reshape(channels, rows * cols)
    neighbours = corner + np.array([0, 1, cols, cols + 1])[:, None]  # top-left, top-right, bottom-left, -right
    tl, tr, bl, br = planes.take(neighbours, axis=1).astype(np.float64).transpose(1, 0, 2)
    # (1 - fy) * ((1 - fx) * tl + fx * tr) + fy * ((1 - fx) * bl + fx * br), in place (fresh arrays of this
    # size cost page faults): the same products and sums, so the same doubles
    gx = 1 - fx
    tl *= gx
    tr *= fx
    tl += tr
    bl *= gx
    br *= fx
    bl += br
    tl *= 1 - fy
    bl *= fy
    val = np.add(tl, bl, out=tl)
    # A convex mix of bytes lies in [0, 255 + a few ulps]: truncation gives dlib's clamped byte without a clip.
    out = np.ascontiguousarray(val.astype(np.uint8).reshape(channels, size, size).transpose(1, 2, 0))
    if outside is not None:
        out.reshape(size * size, channels)[outside] = 0
    return out


def align_chip_dlib5(
    rgb: np.ndarray, points5: np.ndarray, size: int = DLIB_CHIP_SIZE, padding: float = DLIB_CHIP_PADDING
) -> np.ndarray:
    """``edge.face.align.align_chip_dlib5`` as first vectorised (input checks left out)."""
    pts = np.asarray(points5, dtype=np.float64)
    template = (padding + np.array(DLIB5_TEMPLATE)) / (2.0 * padding + 1.0) * size
    return warp_chip(rgb, _chip_to_image(template, pts, size), size)
