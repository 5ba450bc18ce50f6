"""Interleaved rounds: every contender runs once a round, the order rotated each round, so that none always runs
first (on cold caches) or right after the same neighbour, and a slow spell of a shared machine falls on all."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TypeVar

T = TypeVar("T")


def interleaved(items: Sequence[T], rounds: int) -> Iterator[tuple[int, list[T]]]:
    """``(r, order)`` for each round ``r`` of ``rounds``: ``items`` rotated left by ``r``."""
    for r in range(rounds):
        shift = r % len(items)
        yield r, [*items[shift:], *items[:shift]]
