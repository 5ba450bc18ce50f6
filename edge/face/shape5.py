"""dlib's 5-point shape predictor in numpy: the landmarks face_recognition aligns its chips with.

A cascade of regression-tree forests (Kazemi & Sullivan 2014, dlib/image_processing/shape_predictor.h):
start from the mean shape placed in the face box; at every level, read the intensity of a few hundred
pixels placed relative to the current shape, walk each tree by comparing pixel pairs, and add the leaves.
Run on an MTCNN box mapped to the box dlib's HOG detector would give, it yields dlib's own 5 points, so our
chip is cut like face_recognition's (docs/evaluation.md: agreement 0.988 -> 0.999).

The model is the ``.npz`` written by ``converters.face.dlib_shape.export_shape_predictor``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edge.errors import InputError

SHAPE5_SCHEMA_VERSION = 1
_KEYS = ("schema_version", "initial_shape", "split_idx", "split_thresh", "leaf_values", "anchor_idx", "deltas")

#: dlib's HOG box of a face, from the MTCNN box (x1, y1, x2, y2): centre shifted by (dx, dy) and side
#: scaled by ``side``, all relative to the MTCNN box's mean side. Measured on the calibration photos
#: (63 LFW faces found by both detectors; never the evaluation set): dx -0.007, dy +0.055, side 0.968.
MTCNN_TO_HOG_BOX = (-0.007, 0.055, 0.968)


def hog_like_rect(box: tuple[float, float, float, float]) -> tuple[int, int, int, int]:
    """dlib rectangle (left, top, right, bottom; inclusive) that dlib's HOG detector would put on a face
    MTCNN boxed as ``box``."""
    x1, y1, x2, y2 = (float(v) for v in box)
    mean_side = ((x2 - x1) + (y2 - y1)) / 2.0
    dx, dy, k = MTCNN_TO_HOG_BOX
    cx, cy, side = (x1 + x2) / 2 + dx * mean_side, (y1 + y2) / 2 + dy * mean_side, k * mean_side
    left, top = round(cx - side / 2), round(cy - side / 2)
    return left, top, left + max(round(side), 1) - 1, top + max(round(side), 1) - 1


def _similarity_2x2(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Rotation+scale part of the least-squares similarity transform src -> dst (dlib's, no reflection)."""
    s_c, d_c = src - src.mean(axis=0), dst - dst.mean(axis=0)
    var = (s_c**2).sum() / len(src)
    u, sig, vt = np.linalg.svd(d_c.T @ s_c / len(src))
    fix = np.eye(2)
    if np.linalg.det(u) * np.linalg.det(vt) < 0:
        fix[1, 1] = -1.0
    return ((sig * np.diag(fix)).sum() / var) * (u @ fix @ vt) if var > 0 else np.eye(2)


class ShapePredictor:
    """dlib's shape predictor run with numpy (CPU, no dlib)."""

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
        if not isinstance(rgb, np.ndarray) or rgb.dtype != np.uint8 or rgb.ndim != 3 or rgb.shape[2] != 3:
            desc = f"{rgb.dtype} {rgb.shape}" if isinstance(rgb, np.ndarray) else type(rgb).__name__
            raise InputError(f"shape predictor: image is {desc}; expected uint8 array [H, W, 3] (RGB)")
        left, top, right, bottom = (int(v) for v in rect)
        origin = np.array([left, top], np.float64)
        extent = np.array([right - left, bottom - top], np.float64)  # unit box -> rect corners, as dlib
        shape = self.initial.copy()
        trees = np.arange(self.split_idx.shape[1])
        for level in range(self.split_idx.shape[0]):
            tform = _similarity_2x2(self.initial.astype(np.float64), shape.astype(np.float64)).astype(np.float32)
            unit = self.deltas[level] @ tform.T + shape[self.anchor_idx[level]]
            pix = np.floor(origin + unit.astype(np.float64) * extent + 0.5).astype(np.intp)
            feats = _intensities(rgb, pix)
            node = np.zeros(len(trees), np.intp)
            for _ in range(self.depth):
                idx = self.split_idx[level, trees, node]
                left_branch = feats[idx[:, 0]] - feats[idx[:, 1]] > self.split_thresh[level, trees, node]
                node = np.where(left_branch, 2 * node + 1, 2 * node + 2)
            leaves = self.leaf_values[level, trees, node - self.split_idx.shape[2]]
            for leaf in leaves:  # dlib adds the trees one by one in float32
                shape += leaf
        return np.floor(origin + shape.astype(np.float64) * extent + 0.5)


def _intensities(rgb: np.ndarray, pix: np.ndarray) -> np.ndarray:
    """dlib's get_pixel_intensity of an rgb_pixel, (r + g + b) / 3 truncated; 0 outside the image."""
    h, w = rgb.shape[:2]
    inside = (pix[:, 0] >= 0) & (pix[:, 0] < w) & (pix[:, 1] >= 0) & (pix[:, 1] < h)
    out = np.zeros(len(pix), np.float32)
    px = rgb[pix[inside, 1], pix[inside, 0]].astype(np.int32)
    out[inside] = px.sum(axis=1) // 3
    return out
