"""Progress on long work, to stderr, silenced by ``--quiet``/``--json``.

A job reports steps as numbered lines (``[3/7 12.4s] exporting MTCNN``) and, inside a long step, items done
with :func:`counting` or :func:`tracked`. On a terminal, the items draw one bar redrawn in place with a
carriage return (done/total, percent, rate, ETA); elsewhere (a log, a pipe) only the numbered lines appear.
A long step with nothing to count runs in :func:`timed`: on a terminal a live line shows its elapsed time and,
once the same step has run on this machine, a bar and ETA from how long it took last time (kept in
``step_times_file()``). A plain function (``print``) works as a progress function too: step lines, no bar.
"""

from __future__ import annotations

import json
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sized
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TextIO, TypeVar

ProgressFn = Callable[[str], None]
T = TypeVar("T")

#: Seconds between two redraws of a bar (the last item always redraws).
REDRAW_SECONDS = 0.1
#: A bar appears once its step has run this long: a quick step leaves no bar behind.
SHOW_AFTER_SECONDS = 1.0
BAR_WIDTH = 24
#: Seconds between two redraws of a timed step's live line (from a background thread, on a terminal only).
TICK_SECONDS = 0.5
#: How many steps' last durations ``step_times_file()`` keeps (the least recently run go first).
MAX_RECORDED_STEPS = 500


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


class _Live:
    """A line redrawn in place under the step lines (a terminal only): ``line(now)`` says what it shows."""

    stream: TextIO | None
    start: float
    show_after: float
    shown: bool
    _drawn: float = float("-inf")

    def line(self, now: float) -> str:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def clear(self) -> None:
        """Take the line off the terminal (before a step line is printed over it)."""
        if self.stream is not None and self.shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()

    def _draw(self, now: float) -> None:
        if self.stream is None or (not self.shown and now - self.start < self.show_after):
            return
        self.shown = True
        self._drawn = now
        self.stream.write("\r\x1b[K" + self.line(now))
        self.stream.flush()


class Bar(_Live):
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

    def close(self) -> None:
        """Draw the final state and end its line (a bar never shown stays unshown)."""
        if self.stream is not None and self.shown:
            self._draw(time.perf_counter())
            self.stream.write("\n")
            self.stream.flush()
        self.stream = None


class Clock(_Live):
    """A timed step's live line: ``  0:12 elapsed (no ETA: first run here)``, or, with ``expected`` seconds
    (the same step's last run), ``  [#########---------------] 0:12 of ~0:30, ETA 0:18``.

    Args:
        stream: a terminal; None draws nothing (the time is still taken).
        expected: how long the step took last time on this machine (None: never ran here).
        show_after: seconds before the line first appears.
    """

    def __init__(self, stream: TextIO | None, expected: float | None, show_after: float = SHOW_AFTER_SECONDS) -> None:
        self.stream, self.expected, self.show_after = stream, expected, show_after
        self.start = time.perf_counter()
        self.shown = False
        self.stop = threading.Event()
        self._draw(self.start)

    def line(self, now: float) -> str:
        """The line's text at time ``now`` (``time.perf_counter()``)."""
        elapsed = max(now - self.start, 0.0)
        if not self.expected:
            return f"  {_clock(elapsed)} elapsed (no ETA: first run here)"
        share = min(elapsed / self.expected, 1.0)
        bar = "#" * int(share * BAR_WIDTH) + "-" * (BAR_WIDTH - int(share * BAR_WIDTH))
        left = self.expected - elapsed
        if left <= -1:  # a second over: not a rounding of the same time
            return f"  [{bar}] {_clock(elapsed)}, longer than last time ({_clock(self.expected)})"
        return f"  [{bar}] {_clock(elapsed)} of ~{_clock(self.expected)}, ETA {_clock(max(left, 0))}"

    def close(self) -> None:
        """Take the line off the terminal: the next step line's clock says how long the step took."""
        self.stop.set()
        self.clear()
        self.stream = None


class StepProgress:
    """Prints ``[3/7 12.4s] exporting MTCNN`` lines as a job advances; on a terminal, a bar for counted items and
    a live clock for timed steps.

    Args:
        total: how many steps the job has (0 when unknown).
        stream: where to write; None for silence.
        show_after: seconds a counted or timed step runs before its live line appears.
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
        self._live: list[_Live] = []  # the innermost (drawn) last: a bar inside a timed step hides its clock
        self._lock = threading.Lock()  # a clock redraws from its own thread

    def __call__(self, message: str) -> None:
        self.step += 1
        if self.stream is None:
            return
        with self._lock:
            if self._live:
                self._live[-1].clear()
            elapsed = time.perf_counter() - self.start
            count = f"{self.step}/{self.total}" if self.total else str(self.step)
            print(f"[{count} {elapsed:6.1f}s] {message}", file=self.stream, flush=True)
            self._redraw()

    def counter(self, label: str, total: int) -> Bar:
        """A bar for ``total`` items of the current step: drawn on a terminal, silent otherwise."""
        with self._lock:
            if self._live and isinstance(self._live[-1], Bar):
                self._live.pop().close()  # a bar never ended (an abandoned generator)
            elif self._live:
                self._live[-1].clear()
            bar = Bar(self.stream if self.tty else None, label, total, self.show_after)
            self._live.append(bar)
        return bar

    def end_counter(self, bar: Bar) -> None:
        """Finish ``bar`` (its final state stays on the terminal)."""
        self._end(bar)

    def timer(self, key: str) -> Clock:
        """Start the clock of a timed step (``timed``): its live line redraws every ``TICK_SECONDS`` on a terminal."""
        clock = Clock(self.stream if self.tty else None, last_step_time(key), self.show_after)
        with self._lock:
            if self._live:
                self._live[-1].clear()
            self._live.append(clock)
        if clock.stream is not None:
            threading.Thread(target=self._tick, args=(clock,), name="progress-clock", daemon=True).start()
        return clock

    def end_timer(self, clock: Clock, key: str, done: bool) -> None:
        """Stop ``clock`` and take its line off; a ``done`` step's duration is kept for its next ETA."""
        self._end(clock)
        if done:
            record_step_time(key, time.perf_counter() - clock.start)

    def _tick(self, clock: Clock) -> None:
        while not clock.stop.wait(TICK_SECONDS):
            with self._lock:
                if self._live and self._live[-1] is clock:
                    clock._draw(time.perf_counter())

    def _end(self, live: _Live) -> None:
        with self._lock:
            live.close()
            if live in self._live:
                self._live.remove(live)
            self._redraw()

    def _redraw(self) -> None:
        if self._live:
            self._live[-1]._draw(time.perf_counter())


def step_times_file() -> Path:
    """Where the last duration of each timed step is kept: ``$XDG_CACHE_HOME/edge-deploy/step-times.json``
    (``~/.cache`` when unset)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "edge-deploy" / "step-times.json"


def _step_times() -> dict[str, float]:
    try:
        data = json.loads(step_times_file().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): float(v) for k, v in data.items() if isinstance(v, int | float) and math.isfinite(v) and v > 0}


def last_step_time(key: str) -> float | None:
    """Seconds the step ``key`` took the last time it ran to the end here (None: never, or unreadable)."""
    return _step_times().get(key)


def record_step_time(key: str, seconds: float) -> None:
    """Keep ``seconds`` as the last duration of step ``key``; a cache that cannot be written is let be."""
    times = _step_times()
    times.pop(key, None)
    times[key] = round(seconds, 2)  # insertion order: the most recently run last
    path = step_times_file()
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(dict(list(times.items())[-MAX_RECORDED_STEPS:]), indent=0), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        with suppress(OSError):
            tmp.unlink()


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


@contextmanager
def timed(progress: ProgressFn, message: str, key: str) -> Iterator[None]:
    """Print the step line ``message``, then run a long step with nothing to count: on a terminal a live line
    under it shows the elapsed time and, once the step ``key`` finished before on this machine, a bar and ETA.

    Args:
        progress: the job's progress function (a plain function gets the step line only).
        message: the step line.
        key: names the step for its next ETA: what it does, to which model, for which target
            (``"convert face: export MTCNN"``, ``"quantize embedder int8 rpi4"``).

    Example::

        with timed(progress, "exporting fp32 ONNX with KV cache", f"slm export {name}"):
            export_onnx(folder, out)
    """
    progress(message)
    start = getattr(progress, "timer", None)
    if start is None:
        yield
        return
    clock = start(key)
    done = False
    try:
        yield
        done = True
    finally:
        progress.end_timer(clock, key, done)  # type: ignore[attr-defined]


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
        return getattr(self._progress, name)  # counter, timer and their ends, when the wrapped one draws them


def silent(_message: str) -> None:
    """A progress function that says nothing."""
