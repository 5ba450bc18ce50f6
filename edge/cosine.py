"""Cosine similarity row by row: the one definition every comparison of vectors uses (gates, twins, golden sets).

Each row (the first axis; the rest flattened) of ``a`` against the same row of ``b``, in float64. Two zero rows
are equal (1.0); a zero row against a non-zero one shares no direction (0.0).
"""

from __future__ import annotations

import numpy as np


def row_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine of each row of ``a`` with the same row of ``b`` (shape ``(rows,)``, float64).

    Args:
        a, b: arrays of the same number of rows (and of elements per row).

    Returns:
        One cosine per row, in [-1, 1]; 1.0 where both rows are zero, 0.0 where only one is.
    """
    a = np.asarray(a).reshape(len(a), -1).astype(np.float64)
    b = np.asarray(b).reshape(len(b), -1).astype(np.float64)
    na, nb = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
    both_zero = (na == 0) & (nb == 0)
    cos = np.sum(a * b, axis=1) / np.maximum(na * nb, 1e-300)
    return np.where(both_zero, 1.0, np.clip(cos, -1.0, 1.0))
