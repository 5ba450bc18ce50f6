"""dlib's 5-point shape predictor in numpy and OpenCV: the landmarks face_recognition aligns its chips with.

A cascade of regression-tree forests (Kazemi & Sullivan 2014, dlib/image_processing/shape_predictor.h):
start from the mean shape placed in the face box; at every level, read the intensity of a few hundred
pixels placed relative to the current shape, walk each tree by comparing pixel pairs, and add the leaves.
Run on an MTCNN box mapped to the box dlib's HOG detector would give, it yields dlib's own 5 points, so our
chip is cut like face_recognition's (docs/evaluation.md: agreement 0.988 -> 0.999).

The model is the ``.npz`` written by ``converters.face.dlib_shape.export_shape_predictor``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import cv2
import numpy as np

from edge.errors import InputError

SHAPE5_SCHEMA_VERSION = 1
_KEYS = ("schema_version", "initial_shape", "split_idx", "split_thresh", "leaf_values", "anchor_idx", "deltas")

#: dlib's HOG box of a face, from the MTCNN box (x1, y1, x2, y2): centre shifted by (dx, dy) and side
#: scaled by ``side``, all relative to the MTCNN box's mean side. Measured on the calibration photos
#: (63 LFW faces found by both detectors; never the evaluation set): dx -0.007, dy +0.055, side 0.968.
MTCNN_TO_HOG_BOX = (-0.007, 0.055, 0.968)
#: The same for BlazeFace's boxes, measured the same way (62 faces short range, 35 full range: it finds fewer
#: of the upscaled LFW crops).
BLAZEFACE_SHORT_TO_HOG_BOX = (-0.033, -0.028, 1.004)
BLAZEFACE_FULL_TO_HOG_BOX = (0.004, 0.016, 0.956)

#: OpenCV's remap takes its nearest-pixel coordinates as int16: images up to this many pixels a side have their
#: feature pixels read with it (``_intensities_opencv``), models of up to this many features one face's split
#: pairs (``_differences_opencv``); beyond, numpy reads them.
_REMAP_MAX_SIDE = 32767
#: cv2.transform's row for dlib's grey level: round(r/3 + g/3 + b/3 - 1/3) is (r + g + b) // 3 for every pixel
#: (the rounded value lies at least 1/6 from a half; tests/unit/test_shape5.py checks all 2**24 pixels).
_GREY_ROW = np.array([[1 / 3, 1 / 3, 1 / 3, -1 / 3]])

#: Trees of up to this many split nodes (depth 4: dlib's default, and its 5- and 68-point models) find their
#: leaf in a table of 2 ** splits bytes (32 KiB); deeper trees are walked node by node.
LUT_MAX_SPLITS = 15


def hog_like_rect(
    box: tuple[float, float, float, float], box_map: tuple[float, float, float] = MTCNN_TO_HOG_BOX
) -> tuple[int, int, int, int]:
    """dlib rectangle (left, top, right, bottom; inclusive) that dlib's HOG detector would put on a face
    a detector boxed as ``box``; ``box_map`` is that detector's (dx, dy, side), e.g. ``MTCNN_TO_HOG_BOX``."""
    x1, y1, x2, y2 = (float(v) for v in box)
    mean_side = ((x2 - x1) + (y2 - y1)) / 2.0
    dx, dy, k = box_map
    cx, cy, side = (x1 + x2) / 2 + dx * mean_side, (y1 + y2) / 2 + dy * mean_side, k * mean_side
    left, top = round(cx - side / 2), round(cy - side / 2)
    return left, top, left + max(round(side), 1) - 1, top + max(round(side), 1) - 1


class ShapePredictor:
    """dlib's shape predictor run with numpy and OpenCV (CPU, no dlib)."""

    def __init__(self, model_path: str | Path) -> None:
        """Load the ``.npz``.

        Raises:
            InputError: naming the file (and key) if it is missing, not an npz, of another schema version,
                or a key is missing or of the wrong shape.
        """
        self.model_path = Path(model_path)
        if not self.model_path.is_file():
            raise InputError(f"{self.model_path}: shape predictor not found; export it with converters.face.dlib_shape")
        try:
            with np.load(self.model_path, allow_pickle=False) as npz:
                data = {k: npz[k] for k in npz.files}
        except (OSError, ValueError, EOFError) as exc:
            raise InputError(f"{self.model_path}: not a shape predictor file (expected NumPy .npz: {exc})") from exc
        for key in _KEYS:
            if key not in data:
                raise InputError(f"{self.model_path}: key '{key}' missing; expected {', '.join(_KEYS)}")
        if int(data["schema_version"]) != SHAPE5_SCHEMA_VERSION:
            raise InputError(
                f"{self.model_path}: schema_version = {int(data['schema_version'])}; expected {SHAPE5_SCHEMA_VERSION}"
            )
        self._check_shapes(data)
        self.initial = data["initial_shape"].astype(np.float32)
        self.split_idx = data["split_idx"].astype(np.intp)
        self.split_thresh = data["split_thresh"].astype(np.float32)
        self.leaf_values = data["leaf_values"].astype(np.float32)
        self.anchor_idx = data["anchor_idx"].astype(np.intp)
        self.deltas = data["deltas"].astype(np.float32)
        self.depth = int(np.log2(self.split_idx.shape[2] + 1))
        self._build_tables()

    def _build_tables(self) -> None:
        """Flat copies of the model for the vectorised walk (``predict_many``)."""
        levels, trees, splits, _ = self.split_idx.shape
        self._deltas_t = np.ascontiguousarray(self.deltas.transpose(0, 2, 1))  # [levels, 2, features]: x row, y row
        # both pixels of every split node of a level, node by node across the trees: [levels, 2, splits, trees]
        self._pairs = np.ascontiguousarray(self.split_idx.transpose(0, 3, 2, 1))
        # the same as remap's int16 (x, y) map over one face's row of intensities: [levels, 2 * splits, trees, 2]
        # (None when the feature indices do not fit in int16)
        self._pair_map: np.ndarray | None = None
        if self.deltas.shape[1] <= _REMAP_MAX_SIDE:
            self._pair_map = np.zeros((levels, 2 * splits, trees, 2), np.int16)
            self._pair_map[..., 0] = self._pairs.reshape(levels, 2 * splits, trees)
        # For a whole number d (a difference of two intensities), d > t exactly when d > floor(t); beyond
        # +-1024 every difference falls on the same side, and a NaN threshold is never passed, as in dlib.
        thresh = np.nan_to_num(self.split_thresh.astype(np.float64), nan=1024.0)
        thresh = np.clip(np.floor(thresh), -1024, 1024).astype(np.int16)
        self._thresh = np.ascontiguousarray(thresh.transpose(0, 2, 1))[..., None]  # [levels, splits, trees, 1]
        # row ``tree * (splits + 1) + leaf`` of a level's leaves
        self._leaf_rows = self.leaf_values.reshape(levels, trees * (splits + 1), -1)
        self._leaf_base = np.arange(trees, dtype=np.intp) * (splits + 1)
        self._leaf_of_code = leaf_table(self.depth).astype(np.uint8) if splits <= LUT_MAX_SPLITS else None
        self._bit_values = (2.0 ** np.arange(splits)).astype(np.float32)  # a tree's outcomes -> its code
        # The similarity fit from the mean shape to the current one, as one product (see _similarity).
        src = self.initial.astype(np.float64)
        centred = src - src.mean(axis=0)
        var = float((centred**2).sum()) / len(src)
        rot = np.stack([-centred[:, 1], centred[:, 0]], axis=1)  # b = sum(d_y s_x - d_x s_y)
        self._fit = np.stack([centred.ravel(), rot.ravel()], axis=1) / (len(src) * var) if var > 0 else None
        self._ab_to_matrix = np.array([[1.0, 0.0, 0.0, 1.0], [0.0, -1.0, 1.0, 0.0]])  # (a, b) -> [[a, -b], [b, a]]

    def _check_shapes(self, data: dict[str, np.ndarray]) -> None:
        levels, trees, splits, _ = data["split_idx"].shape
        points = data["initial_shape"].shape[0]
        features = data["deltas"].shape[1]
        expected = {
            "initial_shape": (points, 2),
            "split_thresh": (levels, trees, splits),
            "leaf_values": (levels, trees, splits + 1, points, 2),
            "anchor_idx": (levels, features),
            "deltas": (levels, features, 2),
        }
        for key, shape in expected.items():
            if data[key].shape != shape:
                raise InputError(f"{self.model_path}: key '{key}' has shape {data[key].shape}; expected {shape}")
        if (splits + 1) & splits:
            raise InputError(f"{self.model_path}: key 'split_idx' has {splits} splits per tree; expected 2**d - 1")
        # predict_many gathers with these unchecked (take's "wrap" mode), so they are checked once here
        for key, bound, what in (("anchor_idx", points, "landmarks"), ("split_idx", features, "feature pixels")):
            values = data[key]
            if not np.issubdtype(values.dtype, np.integer):
                raise InputError(f"{self.model_path}: key '{key}' is {values.dtype}; expected integer indices")
            if values.size and (int(values.min()) < 0 or int(values.max()) >= bound):
                raise InputError(
                    f"{self.model_path}: key '{key}' holds indices {int(values.min())}..{int(values.max())}; "
                    f"expected 0..{bound - 1} (the model's {bound} {what})"
                )

    @property
    def num_points(self) -> int:
        """How many landmarks the model predicts (5)."""
        return self.initial.shape[0]

    def predict(self, rgb: np.ndarray, rect: tuple[int, int, int, int]) -> np.ndarray:
        """Landmarks of the face in ``rect``, as dlib's ``shape_predictor(img, rect)``.

        Args:
            rgb: uint8 [H, W, 3].
            rect: (left, top, right, bottom), inclusive pixel coordinates, as a dlib rectangle.

        Returns:
            float64 [P, 2] of whole-pixel (x, y), in the model's point order (dlib's 5-point model: image-
            right eye outer and inner corner, image-left eye outer and inner corner, nose base).

        Raises:
            InputError: if the image is not uint8 [H, W, 3].
        """
        return self.predict_many(rgb, [rect])[0]

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
        faces, trees = len(box), self.split_idx.shape[1]
        # x and y as rows ([face, 2, n]): numpy's loops run along rows of hundreds, not along pairs
        origin = box[:, :2, None]
        extent = box[:, 2:, None] - origin  # unit box -> rect corners, as dlib
        shape = np.repeat(self.initial[None], faces, axis=0)  # [face, point, 2], as the leaves
        rgb = np.ascontiguousarray(rgb)
        # OpenCV reads the feature pixels where its int16 coordinates reach, numpy elsewhere
        by_opencv = max(rgb.shape[:2]) <= _REMAP_MAX_SIDE
        size = np.array([[rgb.shape[1]], [rgb.shape[0]]], np.uintp)  # (W, H) as a column, for _intensities
        steps = np.empty((trees + 1, shape.size), np.float32)  # row 0: the shape, then one row a tree
        # One face's split pairs are read by OpenCV too; several faces' by numpy's take, from the intensities
        # face-minor, [features, faces] padded to 1, 2, 4, 8 or 16 columns: the split nodes' pixels are then rows
        # of 2 to 32 bytes, which take copies several times faster than other sizes (a remap map per face count
        # would cost more to build than it saves).
        pair_map = self._pair_map if faces == 1 else None
        feats = np.zeros((self.deltas.shape[1], _padded(faces)), np.int16)
        # Every take below gets indices in range (the model's, checked at load), so it runs in "wrap" mode, which
        # skips numpy's per-index bounds check.
        for level in range(self.split_idx.shape[0]):
            anchors = shape.transpose(0, 2, 1).take(self.anchor_idx[level], axis=2, mode="wrap")
            # in place, in float64 (the float32 values exactly): no mixed-type loops, no temporaries
            pix = (self._similarity(shape) @ self._deltas_t[level] + anchors).astype(np.float64)
            pix *= extent
            pix += origin
            pix += 0.5
            np.floor(pix, out=pix)
            grey = _intensities_opencv(rgb, pix) if by_opencv else _intensities(rgb.reshape(-1, 3), size, pix)
            if pair_map is not None:
                diffs = _differences_opencv(pair_map[level], grey)
            else:
                feats[:, :faces] = grey.T
                pairs = feats.take(self._pairs[level], axis=0, mode="wrap")
                diffs = pairs[0] - pairs[1]  # the padding too: numpy's loops run on whole contiguous rows
            leaf = self._walk(level, diffs)[:, :faces]
            # (mode: the rows are in range; any mode but "raise" lets take write into ``out`` unbuffered)
            self._leaf_rows[level].take(leaf, axis=0, out=steps[1:].reshape(trees, faces, -1), mode="wrap")
            steps[0] = shape.reshape(-1)
            # Summing down the rows of a C-ordered array, numpy adds row after row (no pairwise summation:
            # that is only along the contiguous axis), so each point gets its trees' leaves one by one in
            # float32, as dlib's loop (tests/unit/test_shape5.py checks the order on values where it matters).
            # einsum runs that loop at about half np.add.reduce's cost a row.
            shape = np.einsum("ij->j", steps).reshape(shape.shape)
        return np.floor(box[:, None, :2] + shape.astype(np.float64) * (box[:, None, 2:] - box[:, None, :2]) + 0.5)

    def _similarity(self, shape: np.ndarray) -> np.ndarray:
        """Rotation+scale of the least-squares similarity fit initial -> shape[f] (as dlib's).

        In 2-D the best rotation times scale is ``[[a, -b], [b, a]]`` with ``a + ib`` the sum of
        ``conj(s) * d`` over the centred points divided by n * var(s): the matrix Umeyama's SVD route gives
        (reflections refused). The mean shape is centred, so the current one need not be.

        Args:
            shape: float32 [F, P, 2].

        Returns:
            float32 [F, 2, 2].
        """
        if self._fit is None:  # a mean shape without spread: dlib's fit is the identity
            return np.repeat(np.eye(2, dtype=np.float32)[None], len(shape), axis=0)
        ab = shape.reshape(len(shape), -1).astype(np.float64) @ self._fit
        return (ab @ self._ab_to_matrix).astype(np.float32).reshape(-1, 2, 2)  # products by 0 and +-1: exact

    def _walk(self, level: int, diffs: np.ndarray) -> np.ndarray:
        """Row of ``_leaf_rows[level]`` [trees, F] that every tree of ``level`` reaches on each face.

        Args:
            level: cascade level.
            diffs: int16 [splits, trees, F], every split node's first pixel's intensity minus its second's.
        """
        splits, trees, faces = diffs.shape
        went_left = diffs > self._thresh[level]  # [splits, trees, F]
        if self._leaf_of_code is not None:  # a tree's outcomes as one number (exact in float32) -> its leaf
            code = (self._bit_values @ went_left.reshape(splits, -1).astype(np.float32)).astype(np.intp)
            return self._leaf_base[:, None] + self._leaf_of_code.take(code.reshape(trees, faces))
        node = np.zeros((trees, faces), np.intp)
        for _ in range(self.depth):
            node = 2 * node + 2 - np.take_along_axis(went_left, node[None], axis=0)[0].astype(np.intp)
        return self._leaf_base[:, None] + node - splits


def _padded(faces: int) -> int:
    """``faces`` rounded up to 1, 2, 4, 8 or 16 (beyond 16: itself)."""
    return 1 << (faces - 1).bit_length() if faces <= 16 else faces


def leaf_table(depth: int) -> np.ndarray:
    """For a tree of ``depth`` (nodes in breadth-first order), the leaf reached for every set of outcomes.

    Bit k of the index is node k's outcome (1: went left, to child 2k + 1; 0: right, to 2k + 2).

    Returns:
        intp [2 ** (2 ** depth - 1)] of leaf numbers 0 .. 2 ** depth - 1.
    """
    splits = 2**depth - 1
    codes = np.arange(2**splits)
    node = np.zeros(len(codes), np.intp)
    for _ in range(depth):
        node = 2 * node + 2 - ((codes >> node) & 1)
    return node - splits


def _differences_opencv(pair_map: np.ndarray, grey: np.ndarray) -> np.ndarray:
    """Every split node's first pixel minus its second, int16 [splits, trees, 1], from one face's ``grey`` uint8
    [1, n] and a level's ``ShapePredictor._pair_map``: the pairs' pixels gathered by ``remap`` (nearest; a whole
    number is itself), subtracted into int16 by ``subtract``. On emulated Cortex-A72 the landmarks of arm_frame's
    face cost 7.48 M instructions with it, 7.65 M with numpy's take and subtraction (15 levels of 7,500 pairs)."""
    splits = len(pair_map) // 2
    pixels = cv2.remap(grey, pair_map, None, cv2.INTER_NEAREST)
    return cv2.subtract(pixels[:splits], pixels[splits:], dtype=cv2.CV_16S)[..., None]


def _intensities_opencv(rgb: np.ndarray, pix: np.ndarray) -> np.ndarray:
    """``_intensities`` by OpenCV, the same values: the pixels read by ``remap`` (nearest, 0 outside the image),
    their grey level by ``transform``: 4 calls a cascade level where numpy makes 14. On emulated Cortex-A72 the
    landmarks of arm_frame's face cost 7.65 M instructions with it, 9.27 M with ``_intensities``.

    Args:
        rgb: uint8 [H, W, 3], C-contiguous, H and W at most ``_REMAP_MAX_SIDE``.
        pix: whole-pixel x and y [F, 2, n], float.

    Returns:
        uint8 [F, n].
    """
    # Whole numbers stay whole in float32 up to 2**24; beyond, they stay far outside the image. remap rounds
    # (a whole number: itself) and saturates to int16, so a far-off pixel still reads as outside.
    # All faces in one row: OpenCV splits an image of several rows across its thread pool, whose workers then
    # spin on the other cores (twice the CPU time for no gain, measured on the host with 5 faces).
    xy = pix.transpose(1, 0, 2).astype(np.float32, order="C").reshape(2, 1, -1)
    px = cv2.remap(rgb, xy[0], xy[1], cv2.INTER_NEAREST, borderMode=cv2.BORDER_CONSTANT, borderValue=0)
    return cv2.transform(px, _GREY_ROW).reshape(len(pix), -1)


def _intensities(pixels: np.ndarray, size: np.ndarray, pix: np.ndarray) -> np.ndarray:
    """dlib's get_pixel_intensity of an rgb_pixel, (r + g + b) / 3 truncated; 0 outside the image.

    Args:
        pixels: the image's uint8 pixels [H * W, 3], row by row.
        size: uintp [[W], [H]].
        pix: whole-pixel x and y [F, 2, n], float.

    Returns:
        int16 [F, n].
    """
    xy = pix.astype(np.intp)
    fits = xy.view(np.uintp) < size  # a negative is a huge uintp
    inside = fits[:, 0] & fits[:, 1]
    index = xy[:, 1] * int(size[0, 0]) + xy[:, 0]
    index *= inside  # outside: any pixel will do, it is zeroed below
    px = pixels.take(index, axis=0, mode="wrap")  # in range: see predict_many
    grey = px[..., 0].astype(np.int16)  # channel by channel: a sum along the axis of three is several times slower
    grey += px[..., 1]
    grey += px[..., 2]
    grey *= inside
    grey //= 3
    return grey
