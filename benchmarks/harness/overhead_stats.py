"""Pure helpers of the overhead benchmarks: block order, paired block ratios, their median and spread.

Overhead benchmarks run a baseline and one or more variants in interleaved blocks on a noisy, shared
machine. Each round runs every variant once, in an order that rotates from round to round, so slow drift
(another process, thermal state) hits all of them alike; each variant is then compared with the baseline
block of the *same* round, and the median of those per-round ratios is the figure reported.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass


def block_order(variants: Sequence[str], round_index: int) -> list[str]:
    """The order in which round ``round_index`` runs ``variants`` (rotated by one per round).

    Args:
        variants: the variant names, baseline included.
        round_index: 0-based round number.

    Returns:
        ``variants`` rotated left by ``round_index`` places, so over ``len(variants)`` rounds each variant
        runs once in every position.

    Raises:
        ValueError: if ``variants`` is empty or ``round_index`` is negative.
    """
    if not variants:
        raise ValueError("block_order: no variants given; expected at least one name")
    if round_index < 0:
        raise ValueError(f"block_order: round_index = {round_index}; expected an integer >= 0")
    shift = round_index % len(variants)
    return list(variants[shift:]) + list(variants[:shift])


def paired_ratios(numerators: Sequence[float], denominators: Sequence[float]) -> list[float]:
    """Per-round ratios ``numerators[i] / denominators[i]`` of two equally long series of block figures.

    Raises:
        ValueError: if the series differ in length, are empty, or a denominator is not > 0.
    """
    if len(numerators) != len(denominators):
        raise ValueError(
            f"paired_ratios: {len(numerators)} numerators but {len(denominators)} denominators; "
            "expected one of each per round"
        )
    if not numerators:
        raise ValueError("paired_ratios: no blocks; expected at least one round")
    for i, d in enumerate(denominators):
        if not d > 0:
            raise ValueError(f"paired_ratios: denominator of round {i} = {d!r}; expected a number > 0")
    return [n / d for n, d in zip(numerators, denominators, strict=True)]


@dataclass(frozen=True)
class RatioSummary:
    """The median of per-round ratios and their interquartile range.

    Attributes:
        median: median of the ratios.
        q1: 25th percentile (equal to the median when fewer than two ratios).
        q3: 75th percentile (equal to the median when fewer than two ratios).
        rounds: how many ratios were summarised.
    """

    median: float
    q1: float
    q3: float
    rounds: int


def summarize_ratios(ratios: Sequence[float]) -> RatioSummary:
    """Median and quartiles (``statistics.quantiles``, exclusive method) of per-round ratios.

    Raises:
        ValueError: if ``ratios`` is empty or holds a non-finite value.
    """
    if not ratios:
        raise ValueError("summarize_ratios: no ratios; expected at least one round")
    bad = [r for r in ratios if not math.isfinite(r)]
    if bad:
        raise ValueError(f"summarize_ratios: non-finite ratio {bad[0]!r}; expected finite numbers")
    med = statistics.median(ratios)
    if len(ratios) < 2:
        return RatioSummary(med, med, med, len(ratios))
    q1, _, q3 = statistics.quantiles(ratios, n=4)
    return RatioSummary(med, q1, q3, len(ratios))


def slowdown_pct(time_ratio: float) -> float:
    """Extra time in percent for a ratio ``variant time / baseline time`` (1.03 -> +3.0)."""
    return 100.0 * (time_ratio - 1.0)


def throughput_loss_pct(time_ratio: float) -> float:
    """Throughput lost in percent for a ratio ``variant time / baseline time``.

    Throughput is runs per second, so the variant keeps ``1 / time_ratio`` of the baseline's: a variant that
    takes 1.25x as long loses 20 % of the throughput.

    Raises:
        ValueError: if ``time_ratio`` is not > 0.
    """
    if not time_ratio > 0:
        raise ValueError(f"throughput_loss_pct: time_ratio = {time_ratio!r}; expected a number > 0")
    return 100.0 * (1.0 - 1.0 / time_ratio)


def runs_per_block(latency_s: float, block_s: float, low: int, high: int) -> int:
    """How many runs make a block of about ``block_s`` seconds, clamped to ``low..high``.

    Raises:
        ValueError: if ``latency_s`` or ``block_s`` is not > 0, or ``low`` > ``high`` or ``low`` < 1.
    """
    if not latency_s > 0 or not block_s > 0:
        raise ValueError(f"runs_per_block: latency_s = {latency_s!r}, block_s = {block_s!r}; expected numbers > 0")
    if low < 1 or low > high:
        raise ValueError(f"runs_per_block: low = {low}, high = {high}; expected 1 <= low <= high")
    return max(low, min(high, math.ceil(block_s / latency_s)))


def missing_seqs(received: set[int] | Sequence[int], last_seq: int) -> list[int]:
    """Sequence numbers ``1..last_seq`` that are not in ``received`` (ascending)."""
    got = set(received)
    return [s for s in range(1, last_seq + 1) if s not in got]


def goal_verdict(loss_pct: float, direct_pct: float, goal_pct: float) -> str:
    """Whether an overhead goal is met, judged on two figures.

    ``direct_pct`` is the loss implied by the time the loop spent inside the added work itself, as if the
    inference kept its bare speed (free of block-to-block noise; see ``added_work_loss_pct``); ``loss_pct`` is
    the measured throughput loss (median of paired blocks). The goal is met only if both are within it: a
    noisy median below the goal can't hide added work above it.

    Returns:
        ``"met"`` or ``"**missed** by X points (...)"`` naming the figure that missed.
    """
    if direct_pct > goal_pct:
        return f"**missed** by {direct_pct - goal_pct:.1f} points (time inside report() alone)"
    if loss_pct > goal_pct:
        return f"**missed** by {loss_pct - goal_pct:.1f} points (median loss)"
    return "met"


def added_work_loss_pct(extra_ms: float, base_ms: float) -> float:
    """Throughput lost if each run keeps its ``base_ms`` and gains ``extra_ms`` of added work, in percent.

    Raises:
        ValueError: if ``base_ms`` is not > 0 or ``extra_ms`` is negative.
    """
    if not base_ms > 0 or extra_ms < 0:
        raise ValueError(f"added_work_loss_pct: extra_ms = {extra_ms!r}, base_ms = {base_ms!r}; expected >= 0 and > 0")
    return 100.0 * extra_ms / (base_ms + extra_ms)
