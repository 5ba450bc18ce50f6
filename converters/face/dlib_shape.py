"""Read dlib's shape predictor (the 5-point landmark model face_recognition aligns with) into arrays.

``shape_predictor_5_face_landmarks.dat`` is ``dlib::serialize(shape_predictor)``
(dlib/image_processing/shape_predictor.h): int version 1; ``initial_shape`` (matrix<float,0,1>, written as
-rows, -cols, then the values); ``forests`` (vector of cascade levels, each a vector of regression trees:
``splits`` = vector of (idx1, idx2, thresh), ``leaf_values`` = vector of matrix<float,0,1>); ``anchor_idx``
(vector of vector<unsigned long>); ``deltas`` (vector of vector of dlib::vector<float,2>). Primitive
encodings are those of ``converters.face.dlib_reader``.

``export_shape_predictor`` writes the arrays to an ``.npz`` that ``edge.face.shape5.ShapePredictor`` runs
with numpy alone on the device.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np

from converters.face.dlib_reader import DlibCursor
from edge.errors import ConversionError
from edge.face.shape5 import SHAPE5_SCHEMA_VERSION


def _read_column(cur: DlibCursor, item: str) -> np.ndarray:
    rows, cols = cur.read_int(), cur.read_int()
    if cols not in (1, -1):
        raise cur.fail(f"matrix of {abs(rows)}x{abs(cols)}; expected a column vector", item)
    return np.array([cur.read_float() for _ in range(abs(rows))], np.float32)


def _read_size(cur: DlibCursor, item: str, limit: int = 10_000_000) -> int:
    n = cur.read_int()
    if not 0 <= n <= limit:
        raise cur.fail(f"length {n} out of range", item)
    return n


def _read_tree(cur: DlibCursor) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n_splits = _read_size(cur, "splits")
    splits = [(cur.read_int(), cur.read_int(), cur.read_float()) for _ in range(n_splits)]
    n_leaves = _read_size(cur, "leaf_values")
    if n_leaves != n_splits + 1:
        raise cur.fail(f"{n_leaves} leaves for {n_splits} splits; expected a complete binary tree", "tree")
    leaves = np.stack([_read_column(cur, "leaf value") for _ in range(n_leaves)])
    idx = np.array([(a, b) for a, b, _ in splits], np.int64).reshape(n_splits, 2)
    thresh = np.array([t for _, _, t in splits], np.float32)
    return idx, thresh, leaves


def read_shape_predictor(path: Path) -> dict[str, np.ndarray]:
    """Read a dlib shape predictor file.

    Args:
        path: e.g. ``shape_predictor_5_face_landmarks.dat`` of face-recognition-models.

    Returns:
        Arrays: ``initial_shape`` float32 [P, 2] (in the unit face box), ``split_idx`` int32 [L, T, S, 2],
        ``split_thresh`` float32 [L, T, S], ``leaf_values`` float32 [L, T, S + 1, P, 2],
        ``anchor_idx`` int32 [L, F], ``deltas`` float32 [L, F, 2]; L cascade levels, T trees per level,
        S splits per tree, F feature pixels per level.

    Raises:
        ConversionError: naming the file and byte offset if it is not a shape predictor of this layout.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConversionError(f"{path}: cannot read the shape predictor ({exc.strerror})") from exc
    cur = DlibCursor(path, data)
    cur.what = "the shape predictor header"
    version = cur.read_int()
    if version != 1:
        raise cur.fail(f"version {version}; expected 1")
    initial = _read_column(cur, "initial_shape")
    levels = []
    cur.what = "the regression forests"
    for _ in range(_read_size(cur, "forests")):
        levels.append([_read_tree(cur) for _ in range(_read_size(cur, "trees"))])
    cur.what = "the anchor indices"
    anchors = [[cur.read_int() for _ in range(_read_size(cur, "anchor_idx"))] for _ in range(_read_size(cur, "levels"))]
    cur.what = "the pixel deltas"
    deltas = [
        [(cur.read_float(), cur.read_float()) for _ in range(_read_size(cur, "deltas"))]
        for _ in range(_read_size(cur, "levels"))
    ]
    if cur.pos != len(data):
        raise cur.fail(f"{len(data) - cur.pos} bytes left over at byte {cur.pos}")
    return _stack(path, initial, levels, anchors, deltas)


def _stack(path: Path, initial, levels, anchors, deltas) -> dict[str, np.ndarray]:
    shapes = {(len(lv), *lv[0][0].shape, lv[0][2].shape[0]) for lv in levels}
    if len(shapes) != 1 or len(anchors) != len(levels) or len(deltas) != len(levels):
        raise ConversionError(f"{path}: cascade levels differ in size ({sorted(shapes)}); expected one layout")
    if len(initial) % 2:
        raise ConversionError(f"{path}: initial_shape has {len(initial)} values; expected (x, y) pairs")
    n_points = len(initial) // 2
    return {
        "initial_shape": initial.reshape(n_points, 2),
        "split_idx": np.array([[t[0] for t in lv] for lv in levels], np.int32),
        "split_thresh": np.array([[t[1] for t in lv] for lv in levels], np.float32),
        "leaf_values": np.array([[t[2] for t in lv] for lv in levels], np.float32).reshape(
            len(levels), len(levels[0]), -1, n_points, 2
        ),
        "anchor_idx": np.array(anchors, np.int32),
        "deltas": np.array(deltas, np.float32),
    }


def export_shape_predictor(dat_path: Path, out_path: Path) -> Path:
    """Convert dlib's shape predictor to the ``.npz`` ``edge.face.shape5.ShapePredictor`` loads.

    Args:
        dat_path: the dlib ``.dat`` file.
        out_path: where to write (the exact name is kept; its folder is created).

    Returns:
        ``out_path``.

    Raises:
        ConversionError: if the file cannot be read or written.
    """
    arrays = read_shape_predictor(Path(dat_path))
    out_path = Path(out_path)
    buf = io.BytesIO()
    payload: dict[str, Any] = {
        "schema_version": np.array(SHAPE5_SCHEMA_VERSION),
        "source": np.array(Path(dat_path).name),
        **arrays,
    }
    np.savez(buf, **payload)
    try:
        out_path.parent.mkdir(parents=True, exist_ok=True)
        out_path.write_bytes(buf.getvalue())
    except OSError as exc:
        raise ConversionError(f"{out_path}: cannot write the shape predictor ({exc.strerror})") from exc
    return out_path
