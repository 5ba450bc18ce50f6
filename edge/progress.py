"""Progress on long work: numbered steps with elapsed time, to stderr, silenced by ``--quiet``/``--json``."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

ProgressFn = Callable[[str], None]


class StepProgress:
    """Prints ``[3/7 12.4s] exporting MTCNN`` lines as a job advances.

    Args:
        total: how many steps the job has (0 when unknown).
        stream: where to write; None for silence.
    """

    def __init__(self, total: int = 0, stream: TextIO | None = sys.stderr) -> None:
        self.total = total
        self.stream = stream
        self.step = 0
        self.start = time.perf_counter()

    def __call__(self, message: str) -> None:
        self.step += 1
        if self.stream is None:
            return
        elapsed = time.perf_counter() - self.start
        count = f"{self.step}/{self.total}" if self.total else str(self.step)
        print(f"[{count} {elapsed:6.1f}s] {message}", file=self.stream, flush=True)


def silent(_message: str) -> None:
    """A progress function that says nothing."""
