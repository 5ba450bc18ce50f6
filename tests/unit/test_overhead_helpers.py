"""benchmarks.harness.overhead_stats: block order, paired ratios, their median and spread, loss arithmetic, verdicts.

Pure arithmetic on given numbers: nothing is timed here.
"""

from __future__ import annotations

import math

import pytest

from benchmarks.harness.overhead_stats import (
    RatioSummary,
    added_work_loss_pct,
    block_order,
    goal_verdict,
    missing_seqs,
    paired_ratios,
    runs_per_block,
    slowdown_pct,
    summarize_ratios,
    throughput_loss_pct,
)


def test_block_order_rotates_so_each_variant_takes_every_position():
    variants = ["bare", "mqtt", "down"]
    orders = [block_order(variants, r) for r in range(3)]
    assert orders == [["bare", "mqtt", "down"], ["mqtt", "down", "bare"], ["down", "bare", "mqtt"]]
    for position in range(3):
        assert sorted(order[position] for order in orders) == sorted(variants)
    assert block_order(variants, 4) == orders[1]


def test_block_order_of_two_flips_every_round():
    assert [block_order(("bare", "ours"), r) for r in range(3)] == [
        ["bare", "ours"],
        ["ours", "bare"],
        ["bare", "ours"],
    ]


@pytest.mark.parametrize(
    ("variants", "index", "message"),
    [
        ([], 0, "block_order: no variants given; expected at least one name"),
        (["a"], -1, "block_order: round_index = -1; expected an integer >= 0"),
    ],
)
def test_block_order_rejects(variants, index, message):
    with pytest.raises(ValueError) as err:
        block_order(variants, index)
    assert str(err.value) == message


def test_paired_ratios_divide_round_by_round():
    assert paired_ratios([2.0, 3.0, 5.0], [1.0, 2.0, 4.0]) == [2.0, 1.5, 1.25]


@pytest.mark.parametrize(
    ("num", "den", "message"),
    [
        ([1.0], [1.0, 2.0], "paired_ratios: 1 numerators but 2 denominators; expected one of each per round"),
        ([], [], "paired_ratios: no blocks; expected at least one round"),
        ([1.0, 1.0], [1.0, 0.0], "paired_ratios: denominator of round 1 = 0.0; expected a number > 0"),
        ([1.0], [-2.0], "paired_ratios: denominator of round 0 = -2.0; expected a number > 0"),
    ],
)
def test_paired_ratios_rejects(num, den, message):
    with pytest.raises(ValueError) as err:
        paired_ratios(num, den)
    assert str(err.value) == message


def test_summarize_ratios_median_and_quartiles():
    s = summarize_ratios([1.10, 1.00, 1.30, 1.20, 1.40])
    assert s.median == pytest.approx(1.20)
    # statistics.quantiles (exclusive) of 1.0, 1.1, 1.2, 1.3, 1.4: positions 1.5 and 4.5
    assert s.q1 == pytest.approx(1.05)
    assert s.q3 == pytest.approx(1.35)
    assert s.rounds == 5


def test_summarize_ratios_median_ignores_one_disturbed_block():
    # a block hit by another process (ratio 3.0) moves the mean a lot, the median not at all
    ratios = [1.01, 1.02, 1.03, 3.0, 1.02]
    assert summarize_ratios(ratios).median == pytest.approx(1.02)
    assert sum(ratios) / len(ratios) > 1.4


def test_summarize_ratios_of_one_round():
    assert summarize_ratios([1.25]) == RatioSummary(1.25, 1.25, 1.25, 1)


@pytest.mark.parametrize(
    ("ratios", "message"),
    [
        ([], "summarize_ratios: no ratios; expected at least one round"),
        ([1.0, math.nan], "summarize_ratios: non-finite ratio nan; expected finite numbers"),
        ([math.inf], "summarize_ratios: non-finite ratio inf; expected finite numbers"),
    ],
)
def test_summarize_ratios_rejects(ratios, message):
    with pytest.raises(ValueError) as err:
        summarize_ratios(ratios)
    assert str(err.value) == message


def test_slowdown_and_throughput_loss_differ_as_they_should():
    assert slowdown_pct(1.03) == pytest.approx(3.0)
    assert slowdown_pct(0.98) == pytest.approx(-2.0)
    # 25 % more time per run -> 1/1.25 = 80 % of the runs per second -> 20 % throughput lost
    assert throughput_loss_pct(1.25) == pytest.approx(20.0)
    assert throughput_loss_pct(1.0) == 0.0
    assert throughput_loss_pct(0.5) == pytest.approx(-100.0)


def test_throughput_loss_rejects_non_positive_ratio():
    with pytest.raises(ValueError) as err:
        throughput_loss_pct(0.0)
    assert str(err.value) == "throughput_loss_pct: time_ratio = 0.0; expected a number > 0"


@pytest.mark.parametrize(
    ("latency", "block", "low", "high", "runs"),
    [
        (0.015, 0.3, 5, 100, 20),  # 0.3 / 0.015 = 20 runs
        (0.016, 0.3, 5, 100, 19),  # 18.75 rounds up
        (0.00001, 0.3, 5, 100, 100),  # a fast model is capped at high
        (1.0, 0.3, 5, 100, 5),  # a slow model still gets low
    ],
)
def test_runs_per_block(latency, block, low, high, runs):
    assert runs_per_block(latency, block, low, high) == runs


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0.0, 0.3, 5, 10), "runs_per_block: latency_s = 0.0, block_s = 0.3; expected numbers > 0"),
        ((0.1, -1.0, 5, 10), "runs_per_block: latency_s = 0.1, block_s = -1.0; expected numbers > 0"),
        ((0.1, 0.3, 11, 10), "runs_per_block: low = 11, high = 10; expected 1 <= low <= high"),
        ((0.1, 0.3, 0, 10), "runs_per_block: low = 0, high = 10; expected 1 <= low <= high"),
    ],
)
def test_runs_per_block_rejects(args, message):
    with pytest.raises(ValueError) as err:
        runs_per_block(*args)
    assert str(err.value) == message


def test_missing_seqs():
    assert missing_seqs({1, 2, 4, 7}, 7) == [3, 5, 6]
    assert missing_seqs([1, 2, 3], 3) == []
    assert missing_seqs(set(), 2) == [1, 2]
    assert missing_seqs({1, 2, 3}, 0) == []


@pytest.mark.parametrize(
    ("loss", "direct", "verdict"),
    [
        (0.4, 0.2, "met"),
        (1.0, 1.0, "met"),
        (-3.0, 24.5, "**missed** by 23.5 points (time inside report() alone)"),
        (5.5, 0.3, "**missed** by 4.5 points (median loss)"),
    ],
)
def test_goal_verdict(loss, direct, verdict):
    assert goal_verdict(loss, direct, 1.0) == verdict


def test_added_work_loss_pct():
    # 9 ms of fsync after a 15.8 ms inference: the loop keeps 15.8 / 24.8 of its runs per second
    assert added_work_loss_pct(9.0, 15.8) == pytest.approx(100 * 9.0 / 24.8)
    assert added_work_loss_pct(0.0, 15.8) == 0.0
    # consistent with the ratio form: time ratio (base + extra) / base
    assert added_work_loss_pct(5.0, 20.0) == pytest.approx(throughput_loss_pct(25.0 / 20.0))


@pytest.mark.parametrize(
    ("extra", "base", "message"),
    [
        (1.0, 0.0, "added_work_loss_pct: extra_ms = 1.0, base_ms = 0.0; expected >= 0 and > 0"),
        (-1.0, 5.0, "added_work_loss_pct: extra_ms = -1.0, base_ms = 5.0; expected >= 0 and > 0"),
    ],
)
def test_added_work_loss_pct_rejects(extra, base, message):
    with pytest.raises(ValueError) as err:
        added_work_loss_pct(extra, base)
    assert str(err.value) == message
