"""Progress on long work, to stderr, silenced by ``--quiet``/``--json``.

A job reports steps as numbered lines (``[3/7 12.4s] exporting MTCNN``) and, inside a long step, items done
with :func:`counting` or :func:`tracked`. On a terminal, the items draw one bar redrawn in place with a
carriage return (done/total, percent, rate, ETA); elsewhere (a log, a pipe) only the numbered lines appear.
A plain function (``print``) works as a progress function too: it gets the step lines, no bar.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sized
from contextlib import contextmanager
from typing import TextIO, TypeVar

ProgressFn = Callable[[str], None]
T = TypeVar("T")

#: Seconds between two redraws of a bar (the last item always redraws).
REDRAW_SECONDS = 0.1
#: A bar appears once its step has run this long: a quick step leaves no bar behind.
SHOW_AFTER_SECONDS = 1.0
BAR_WIDTH = 24


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


class Bar:
    """A count of items done, drawn on a terminal as ``  pairs [#####-----] 612/1326 46% 38.1/s ETA 0:19``.

    Args:
        stream: a terminal; None draws nothing (the count is still kept).
        label: what the items are.
        total: how many items the step has.
        show_after: seconds before the bar first appears.
    """

    def __init__(self, stream: TextIO | None, label: str, total: int, show_after: float = SHOW_AFTER_SECONDS) -> None:
        self.stream, self.label, self.total = stream, label, max(int(total), 0)
        self.done = 0
        self.start = time.perf_counter()
        self.show_after = show_after
        self.shown = False
        self._drawn = float("-inf")
        self._draw(self.start)

    def line(self, now: float) -> str:
        """The bar's text at time ``now`` (``time.perf_counter()``)."""
        elapsed = max(now - self.start, 1e-9)
        share = self.done / self.total if self.total else 0.0
        filled = min(BAR_WIDTH, int(share * BAR_WIDTH))
        rate = self.done / elapsed
        if self.done >= self.total:
            tail = f"in {_clock(elapsed)}"
        elif self.done and rate > 0:
            tail = f"ETA {_clock((self.total - self.done) / rate)}"
        else:
            tail = "ETA --:--"
        bar = "#" * filled + "-" * (BAR_WIDTH - filled)
        return f"  {self.label} [{bar}] {self.done}/{self.total} {share:4.0%} {rate:.1f}/s {tail}"

    def advance(self, count: int = 1) -> None:
        """Count ``count`` more items done."""
        self.done += count
        now = time.perf_counter()
        if now - self._drawn >= REDRAW_SECONDS or self.done >= self.total:
            self._draw(now)

    def clear(self) -> None:
        """Take the bar off its line (before a step line is printed over it)."""
        if self.stream is not None and self.shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()

    def close(self) -> None:
        """Draw the final state and end its line (a bar never shown stays unshown)."""
        if self.stream is not None and self.shown:
            self._draw(time.perf_counter())
            self.stream.write("\n")
            self.stream.flush()
        self.stream = None

    def _draw(self, now: float) -> None:
        if self.stream is None or (not self.shown and now - self.start < self.show_after):
            return
        self.shown = True
        self._drawn = now
        self.stream.write("\r\x1b[K" + self.line(now))
        self.stream.flush()


class StepProgress:
    """Prints ``[3/7 12.4s] exporting MTCNN`` lines as a job advances, and a bar for counted items on a terminal.

    Args:
        total: how many steps the job has (0 when unknown).
        stream: where to write; None for silence.
        show_after: seconds a counted step runs before its bar appears.
    """

    def __init__(
        self, total: int = 0, stream: TextIO | None = sys.stderr, show_after: float = SHOW_AFTER_SECONDS
    ) -> None:
        self.total = total
        self.stream = stream
        self.show_after = show_after
        self.step = 0
        self.start = time.perf_counter()
        self.tty = bool(stream is not None and getattr(stream, "isatty", lambda: False)())
        self._bar: Bar | None = None

    def __call__(self, message: str) -> None:
        self.step += 1
        if self.stream is None:
            return
        if self._bar is not None:
            self._bar.clear()
        elapsed = time.perf_counter() - self.start
        count = f"{self.step}/{self.total}" if self.total else str(self.step)
        print(f"[{count} {elapsed:6.1f}s] {message}", file=self.stream, flush=True)
        if self._bar is not None:
            self._bar._draw(time.perf_counter())

    def counter(self, label: str, total: int) -> Bar:
        """A bar for ``total`` items of the current step: drawn on a terminal, silent otherwise."""
        if self._bar is not None:
            self._bar.close()
        self._bar = Bar(self.stream if self.tty else None, label, total, self.show_after)
        return self._bar

    def end_counter(self, bar: Bar) -> None:
        """Finish ``bar`` (its final state stays on the terminal)."""
        bar.close()
        if self._bar is bar:
            self._bar = None


def _no_count(_count: int = 1) -> None:
    """What a progress function that draws no bar counts with."""


@contextmanager
def counting(progress: ProgressFn, label: str, total: int) -> Iterator[Callable[[int], None]]:
    """Count ``total`` items of a long step: yields ``advance(count=1)``; a bar where ``progress`` draws one.

    Example::

        with counting(progress, "pairs", len(pairs)) as advance:
            for pair in pairs:
                compare(pair)
                advance(1)
    """
    make = getattr(progress, "counter", None)
    if make is None:  # a plain function: step lines only
        yield _no_count
        return
    bar = make(label, total)
    try:
        yield bar.advance
    finally:
        progress.end_counter(bar)  # type: ignore[attr-defined]


def tracked(progress: ProgressFn, items: Iterable[T], label: str, total: int | None = None) -> Iterator[T]:
    """Yield ``items``, counting each on ``progress``'s bar (``total``: ``len(items)`` when not given)."""
    if total is None:
        total = len(items) if isinstance(items, Sized) else 0
    with counting(progress, label, total) as advance:
        for item in items:
            yield item
            advance(1)


class Rewritten:
    """A progress function whose lines pass through ``rewrite`` first (its bar, if any, is the wrapped one's).

    Args:
        progress: the progress function to wrap.
        rewrite: maps a line to the line to print.
    """

    def __init__(self, progress: ProgressFn, rewrite: Callable[[str], str]) -> None:
        self._progress = progress
        self._rewrite = rewrite

    def __call__(self, message: str) -> None:
        self._progress(self._rewrite(message))

    def __getattr__(self, name: str):
        return getattr(self._progress, name)  # counter and end_counter, when the wrapped one draws bars


def silent(_message: str) -> None:
    """A progress function that says nothing."""
