"""The same/different threshold of a face embedder, calibrated on labelled pairs of descriptor distances.

Two faces are the same person when their distance is ``<= threshold`` (as ``edge.face.gallery.Gallery.match``).
The calibrated threshold maximises the pair accuracy. The accuracy is constant between two neighbouring
distances, so the best thresholds form ranges; the widest range is taken (ties: the lowest) and the threshold
is its midpoint, the farthest from the pairs on either side.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edge.errors import ValidationError


@dataclass(frozen=True)
class ThresholdFit:
    """The calibrated threshold and how well it decides the pairs it was calibrated on."""

    threshold: float
    accuracy: float
    correct: int
    pairs: int
    same_pairs: int
    different_pairs: int
    range_low: float  # the best accuracy holds for thresholds in [range_low, range_high)
    range_high: float

    def to_dict(self) -> dict:
        return {
            "threshold": self.threshold,
            "pair_accuracy": self.accuracy,
            "correct": self.correct,
            "pairs": self.pairs,
            "same_pairs": self.same_pairs,
            "different_pairs": self.different_pairs,
            "best_range": [self.range_low, self.range_high],
            "rule": "same person when distance <= threshold; the threshold maximises pair accuracy, at the "
            "midpoint of the widest range of thresholds that reach it (ties: the lowest range)",
        }


def pair_accuracy(distances: np.ndarray, same: np.ndarray, threshold: float) -> float:
    """The share of pairs ``threshold`` decides right (same when distance <= threshold)."""
    d, s = np.asarray(distances, np.float64), np.asarray(same, bool)
    return float(np.mean((d <= threshold) == s)) if len(d) else 0.0


def _best_runs(correct: np.ndarray) -> list[tuple[int, int]]:
    """Runs ``(first, last)`` of consecutive indices where ``correct`` is at its maximum."""
    best = correct.max()
    runs: list[tuple[int, int]] = []
    for i in np.flatnonzero(correct == best):
        if runs and runs[-1][1] == i - 1:
            runs[-1] = (runs[-1][0], int(i))
        else:
            runs.append((int(i), int(i)))
    return runs


def calibrate_threshold(distances: np.ndarray, same: np.ndarray) -> ThresholdFit:
    """The distance threshold that decides the most pairs right.

    Args:
        distances: float [P], the descriptor distance of each pair (finite, >= 0).
        same: bool [P], whether each pair shows one person.

    Returns:
        ThresholdFit.

    Raises:
        ValidationError: no pairs, pairs of one kind only, or a distance that is negative, NaN or infinite.
    """
    d, s = np.asarray(distances, np.float64), np.asarray(same, bool)
    if d.shape != s.shape or d.ndim != 1:
        raise ValidationError(f"threshold calibration: {d.shape} distances for {s.shape} labels; expected [P] each")
    if not np.all(np.isfinite(d)) or np.any(d < 0):
        raise ValidationError("threshold calibration: a distance is negative, NaN or infinite; expected finite >= 0")
    n_same, n_diff = int(s.sum()), int((~s).sum())
    if n_same == 0 or n_diff == 0:
        raise ValidationError(
            f"threshold calibration: {n_same} same-person and {n_diff} different-person pairs; expected both"
        )
    u = np.unique(d)
    # index i = 0: a threshold below every distance (all pairs 'different'); i >= 1: in [u[i-1], u[i])
    same_le = np.concatenate([[0], np.searchsorted(np.sort(d[s]), u, side="right")])
    diff_le = np.concatenate([[0], np.searchsorted(np.sort(d[~s]), u, side="right")])
    correct = same_le + (n_diff - diff_le)
    edges = np.concatenate([[0.0], u, [np.inf]])  # candidate i holds for thresholds in [edges[i], edges[i + 1])
    runs = _best_runs(correct)
    widths = [edges[last + 1] - edges[first] for first, last in runs]
    first, last = runs[int(np.argmax(widths))]  # argmax: the first (lowest) of equally wide runs
    low, high = float(edges[first]), float(edges[last + 1])
    threshold = low if not np.isfinite(high) else (low + high) / 2
    best = int(correct[first])
    return ThresholdFit(threshold, best / len(d), best, len(d), n_same, n_diff, low, high)
