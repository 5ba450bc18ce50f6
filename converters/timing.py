"""Seconds per stage of a build, for its report."""

from __future__ import annotations

import time


class Laps:
    """A stopwatch that records, at each ``lap(stage)``, the seconds since the previous lap (or the start)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._start = self._last = time.perf_counter()

    def __call__(self, stage: str) -> None:
        """Record ``stage`` as the time since the previous lap."""
        now = time.perf_counter()
        self.seconds[stage] = round(now - self._last, 2)
        self._last = now

    def total(self) -> float:
        """Seconds since the stopwatch started."""
        return round(time.perf_counter() - self._start, 2)
