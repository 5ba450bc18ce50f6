"""edge.cosine.row_cosines: the row cosine every gate, twin check and golden set compares with."""

from __future__ import annotations

import numpy as np

from edge.cosine import row_cosines


def test_rows_are_compared_one_by_one_with_the_rest_flattened() -> None:
    a = np.array([[[1.0, 0.0]], [[0.0, 2.0]], [[3.0, 4.0]]], np.float32)
    b = np.array([[[2.0, 0.0]], [[1.0, 0.0]], [[-3.0, -4.0]]], np.float32)
    cos = row_cosines(a, b)
    assert cos.dtype == np.float64 and cos.shape == (3,)
    np.testing.assert_allclose(cos, [1.0, 0.0, -1.0])


def test_zero_rows_equal_each_other_and_nothing_else() -> None:
    zero, one = np.zeros((1, 4)), np.ones((1, 4))
    assert row_cosines(zero, zero).tolist() == [1.0]
    assert row_cosines(zero, one).tolist() == [0.0]
    assert row_cosines(one, zero).tolist() == [0.0]


def test_rounding_never_leaves_minus_one_to_one() -> None:
    rng = np.random.default_rng(0)
    a = rng.normal(size=(200, 3)) * 1e-3
    cos = row_cosines(a, a * 7.0)
    assert np.all(cos <= 1.0) and np.all(cos >= 0.999999)
