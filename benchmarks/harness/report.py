"""Shared by every benchmark: machine facts, and writing one section of docs/benchmarks.md.

Each benchmark owns one section, delimited by HTML comments, and rewrites only that section, so benchmarks
can be re-run one at a time without losing the others' results.
"""

from __future__ import annotations

import json
import os
import platform
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "benchmarks.md"
IMG = REPO / "docs" / "img"

HEADER = """# Benchmarks

Every number here was measured by a script in `benchmarks/`, whose command is given with its section.
These machines are shared and noisy: each benchmark runs its contenders side by side in one run, and the
ratios between them are the point, not the absolute times.
"""


def machine_line() -> str:
    """One line describing where the numbers were taken."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        load = f"load {os.getloadavg()[0]:.1f}"
    except OSError:
        load = "load ?"
    cores = len(os.sched_getaffinity(0))
    # INT8 (and fp32) speed on x86 depends on VNNI / AVX-512: every figure names what it ran on (edge.cpu)
    from edge.cpu import int8_kernels

    features = f"CPU features {int8_kernels().describe()}"
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return f"{stamp}, {cpu}, {cores} cores, {features}, {load}"


def publish(name: str, markdown: str, result: dict, cache_dir: Path, plot: Callable[[Path], object] | None) -> None:
    """Keep a run: its JSON in ``cache_dir/<name>.json``, its markdown on stdout and, unless ``plot`` is None
    (a quick run), its chart ``docs/img/<name>.png`` and its section ``<name>`` (``_`` as ``-``) of the doc."""
    (cache_dir / f"{name}.json").write_text(json.dumps(result, indent=2, default=str) + "\n", encoding="utf-8")
    print(markdown)
    if plot is not None:
        image = IMG / f"{name}.png"
        plot(image)
        print(f"wrote {write_section(name.replace('_', '-'), markdown)} and {image}", file=sys.stderr)


def write_section(name: str, markdown: str) -> Path:
    """Replace (or append) the section ``name`` of docs/benchmarks.md with ``markdown``."""
    begin, end = f"<!-- begin:{name} -->", f"<!-- end:{name} -->"
    text = DOC.read_text(encoding="utf-8") if DOC.is_file() else HEADER
    block = f"{begin}\n{markdown.rstrip()}\n{end}"
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
    text = pattern.sub(lambda _m: block, text) if pattern.search(text) else text.rstrip() + "\n\n" + block + "\n"
    DOC.parent.mkdir(parents=True, exist_ok=True)
    DOC.write_text(text, encoding="utf-8")
    return DOC


def say(message: str) -> None:
    """A progress line on stderr, stamped with the time of day."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)
