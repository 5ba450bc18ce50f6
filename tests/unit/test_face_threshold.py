"""The same/different threshold calibration (``converters.face.threshold``) on synthetic distances."""

from __future__ import annotations

import numpy as np
import pytest

from converters.face.threshold import calibrate_threshold, pair_accuracy
from edge.errors import ValidationError


def test_separable_pairs_get_the_midpoint_of_the_gap():
    d = np.array([0.10, 0.20, 0.30, 0.50, 0.60, 0.90])
    same = np.array([True, True, True, False, False, False])
    fit = calibrate_threshold(d, same)
    assert fit.threshold == pytest.approx(0.40)
    assert (fit.accuracy, fit.correct, fit.pairs, fit.same_pairs, fit.different_pairs) == (1.0, 6, 6, 3, 3)
    assert (fit.range_low, fit.range_high) == (0.30, 0.50)
    assert pair_accuracy(d, same, fit.threshold) == 1.0


def test_overlapping_pairs_maximise_accuracy():
    # a same-person pair at 0.45 lies beyond a different-person pair at 0.35
    d = np.array([0.10, 0.20, 0.45, 0.35, 0.70, 0.80])
    same = np.array([True, True, True, False, False, False])
    fit = calibrate_threshold(d, same)
    # thresholds in [0.20, 0.35) and [0.45, 0.70) both decide 5 of 6 right; the wider range (0.25) wins
    assert fit.correct == 5 and fit.accuracy == pytest.approx(5 / 6)
    assert (fit.range_low, fit.range_high) == (0.45, 0.70)
    assert fit.threshold == pytest.approx(0.575)
    grid = np.linspace(0, 1, 1001)
    assert max(pair_accuracy(d, same, t) for t in grid) == pytest.approx(fit.accuracy)


def test_equally_wide_best_ranges_take_the_lowest():
    d = np.array([0.1, 0.5, 0.3, 0.7])
    same = np.array([True, True, False, False])
    fit = calibrate_threshold(d, same)  # [0.1, 0.3) and [0.5, 0.7) decide 3 of 4 right, both 0.2 wide
    assert fit.correct == 3 and fit.threshold == pytest.approx(0.2)


def test_ties_between_equal_distances_are_decided_with_less_or_equal():
    d = np.array([0.3, 0.3, 0.3, 0.6])
    same = np.array([True, True, False, False])  # the different pair at 0.3 cannot be told apart
    fit = calibrate_threshold(d, same)
    assert fit.correct == 3 and (fit.range_low, fit.range_high) == (0.3, 0.6)
    assert fit.threshold == pytest.approx(0.45) and pair_accuracy(d, same, fit.threshold) == 0.75


@pytest.mark.parametrize(
    ("distances", "same", "message"),
    [
        ([0.1, 0.2], [True, True], "threshold calibration: 2 same-person and 0 different-person pairs; expected both"),
        ([], [], "threshold calibration: 0 same-person and 0 different-person pairs; expected both"),
        ([0.1, float("nan")], [True, False], "threshold calibration: a distance is negative, NaN or infinite; "
         "expected finite >= 0"),
        ([0.1, -0.2], [True, False], "threshold calibration: a distance is negative, NaN or infinite; "
         "expected finite >= 0"),
        ([0.1, 0.2], [True], "threshold calibration: (2,) distances for (1,) labels; expected [P] each"),
    ],
)  # fmt: skip
def test_bad_pairs_are_refused(distances, same, message):
    with pytest.raises(ValidationError) as info:
        calibrate_threshold(np.array(distances, float), np.array(same, bool))
    assert str(info.value) == message
