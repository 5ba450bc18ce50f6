"""benchmarks.harness.rounds: the rotation every interleaved benchmark times its contenders in."""

from __future__ import annotations

from benchmarks.harness.rounds import interleaved


def test_each_round_rotates_the_order_by_one():
    assert list(interleaved("abc", 4)) == [(0, ["a", "b", "c"]), (1, ["b", "c", "a"]), (2, ["c", "a", "b"]),
                                           (3, ["a", "b", "c"])]  # fmt: skip


def test_every_contender_runs_once_a_round_and_leads_equally_often():
    orders = [order for _, order in interleaved([1, 2, 3, 4], 8)]
    assert all(sorted(order) == [1, 2, 3, 4] for order in orders)
    assert sorted(order[0] for order in orders) == [1, 1, 2, 2, 3, 3, 4, 4]
