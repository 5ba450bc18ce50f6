"""The ``bench`` latency plot: a histogram and a CDF side by side, drawn with OpenCV (no matplotlib on a Pi)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from edge.errors import InputError, require

if TYPE_CHECKING:
    from edge.bench import BenchResult

WIDTH, HEIGHT = 1280, 600
FONT = 0  # cv2.FONT_HERSHEY_SIMPLEX; the int keeps cv2 a lazy import
FONT_TITLE = 2  # cv2.FONT_HERSHEY_DUPLEX
INK = (40, 40, 40)
GRID = (228, 228, 228)
BAR = (180, 119, 31)  # BGR of a muted blue
MARKERS = (("p50", (44, 160, 44)), ("p90", (14, 127, 255)), ("p99", (40, 39, 214)))  # BGR green/orange/red


@dataclass(frozen=True)
class _Axes:
    """A plot box in pixels and the data range it shows."""

    left: int
    top: int
    right: int
    bottom: int
    x_lo: float
    x_hi: float
    y_hi: float
    log_x: bool = False

    def px(self, x: float) -> int:
        f = math.log10 if self.log_x else float
        frac = (f(x) - f(self.x_lo)) / (f(self.x_hi) - f(self.x_lo))
        return round(self.left + frac * (self.right - self.left))

    def xticks(self) -> list[float]:
        return log_ticks(self.x_lo, self.x_hi) if self.log_x else nice_ticks(self.x_lo, self.x_hi)

    def py(self, y: float) -> int:
        return round(self.bottom - y / self.y_hi * (self.bottom - self.top))


def nice_ticks(lo: float, hi: float, target: int = 7) -> list[float]:
    """Round tick values (steps of 1, 2, 2.5 or 5 x 10^k) covering [lo, hi]."""
    span = hi - lo
    if span <= 0:
        return [lo]
    raw = span / target
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    count = int(math.floor((hi - first) / step + 1e-9)) + 1
    return [round(first + i * step, 12) for i in range(count)]


def log_ticks(lo: float, hi: float) -> list[float]:
    """Ticks at 1, 2, 5 x 10^k in [lo, hi] (every digit 1..9 when that gives fewer than four)."""
    ticks: list[float] = []
    for mantissas in ((1, 2, 5), (1, 2, 3, 4, 5, 6, 7, 8, 9)):
        ticks = [
            round(m * 10.0**k, 12)
            for k in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
            for m in mantissas
            if lo <= m * 10.0**k <= hi
        ]
        if len(ticks) >= 4:
            break
    return ticks


def _fmt(value: float) -> str:
    return f"{value:.4g}"


def _text(
    img: np.ndarray,
    s: str,
    org: tuple[int, int],
    scale: float = 0.5,
    color=INK,
    align: str = "left",
    font: int = FONT,
    thickness: int = 1,
) -> None:
    cv2 = require("cv2", "device", "The bench plot")
    (w, h), _ = cv2.getTextSize(s, font, scale, thickness)
    x = org[0] - (w if align == "right" else w // 2 if align == "center" else 0)
    cv2.putText(img, s, (x, org[1]), font, scale, color, thickness, cv2.LINE_AA)


def _vertical_text(img: np.ndarray, s: str, center: tuple[int, int], scale: float = 0.5) -> None:
    cv2 = require("cv2", "device", "The bench plot")
    (w, h), base = cv2.getTextSize(s, FONT, scale, 1)
    tile = np.full((h + base + 4, w + 4, 3), 255, np.uint8)
    cv2.putText(tile, s, (2, h + 2), FONT, scale, INK, 1, cv2.LINE_AA)
    tile = cv2.rotate(tile, cv2.ROTATE_90_COUNTERCLOCKWISE)
    y0, x0 = center[1] - tile.shape[0] // 2, center[0] - tile.shape[1] // 2
    img[y0 : y0 + tile.shape[0], x0 : x0 + tile.shape[1]] = np.minimum(
        img[y0 : y0 + tile.shape[0], x0 : x0 + tile.shape[1]], tile
    )


def _dashed_vline(img: np.ndarray, x: int, top: int, bottom: int, color: tuple[int, int, int]) -> None:
    cv2 = require("cv2", "device", "The bench plot")
    for y in range(top, bottom, 10):
        cv2.line(img, (x, y), (x, min(y + 5, bottom)), color, 2, cv2.LINE_AA)


def _frame(
    img: np.ndarray, ax: _Axes, yticks: list[float], ylabels: list[str], xlabel: str, ylabel: str, title: str
) -> None:
    """Grid, ticks, labels and the box of one panel."""
    cv2 = require("cv2", "device", "The bench plot")
    for y, label in zip(yticks, ylabels, strict=True):
        cv2.line(img, (ax.left, ax.py(y)), (ax.right, ax.py(y)), GRID, 1)
        _text(img, label, (ax.left - 8, ax.py(y) + 5), 0.45, align="right")
    for x in ax.xticks():
        cv2.line(img, (ax.px(x), ax.top), (ax.px(x), ax.bottom), GRID, 1)
        cv2.line(img, (ax.px(x), ax.bottom), (ax.px(x), ax.bottom + 5), INK, 1)
        _text(img, _fmt(x), (ax.px(x), ax.bottom + 22), 0.45, align="center")
    cv2.rectangle(img, (ax.left, ax.top), (ax.right, ax.bottom), INK, 1)
    _text(img, xlabel, ((ax.left + ax.right) // 2, ax.bottom + 48), 0.5, align="center")
    _vertical_text(img, ylabel, (ax.left - 58, (ax.top + ax.bottom) // 2))
    _text(img, title, (ax.left, ax.top - 12), 0.6, font=FONT_TITLE)


def _legend(img: np.ndarray, ax: _Axes, result: BenchResult) -> None:
    cv2 = require("cv2", "device", "The bench plot")
    x0, y0 = ax.right - 170, ax.top + 8
    cv2.rectangle(img, (x0, y0), (ax.right - 8, y0 + 76), (255, 255, 255), -1)
    cv2.rectangle(img, (x0, y0), (ax.right - 8, y0 + 76), GRID, 1)
    for i, (name, color) in enumerate(MARKERS):
        y = y0 + 22 + 22 * i
        _dashed_vline(img, x0 + 14, y - 12, y + 2, color)
        _text(img, f"{name} {_fmt(getattr(result.stats, name))} ms", (x0 + 26, y), 0.45, color)


def _markers(img: np.ndarray, ax: _Axes, result: BenchResult) -> None:
    """Dashed p50/p90/p99 lines."""
    for name, color in MARKERS:
        value = getattr(result.stats, name)
        if ax.x_lo <= value <= ax.x_hi:
            _dashed_vline(img, ax.px(value), ax.top + 1, ax.bottom, color)


#: Past this max/min spread the latency axis is logarithmic (a long tail squashes a linear one).
LOG_SPREAD = 3.0


def _x_range(lat: np.ndarray) -> tuple[float, float, bool]:
    """The latency axis shared by both panels: (low, high, logarithmic?), covering every sample."""
    lo, hi = float(lat.min()), float(lat.max())
    if hi - lo < 1e-6:
        lo, hi = lo - 0.001, hi + 0.001
    if lo > 0 and hi / lo > LOG_SPREAD:
        return lo / 1.06, hi * 1.06, True
    pad = (hi - lo) * 0.04
    return lo - pad, hi + pad, False


def _histogram(img: np.ndarray, box: tuple[int, int, int, int], result: BenchResult) -> None:
    cv2 = require("cv2", "device", "The bench plot")
    lat = result.latencies_ms
    x_lo, x_hi, log_x = _x_range(lat)
    bins = int(np.clip(2 * math.sqrt(lat.size), 10, 60))
    lo, hi = float(lat.min()), max(float(lat.max()), float(lat.min()) * (1 + 1e-9) + 1e-9)
    edges = np.geomspace(lo, hi, bins + 1) if log_x else np.linspace(lo, hi, bins + 1)
    counts, _ = np.histogram(lat, bins=edges)
    ax = _Axes(*box, x_lo=x_lo, x_hi=x_hi, y_hi=max(1, int(counts.max())) * 1.15, log_x=log_x)
    yticks = [t for t in nice_ticks(0, ax.y_hi, 5) if t == int(t)]
    xlabel = "latency (ms, log scale)" if log_x else "latency (ms)"
    title = "Histogram" + (" (log-spaced bins)" if log_x else "")
    _frame(img, ax, yticks, [str(int(t)) for t in yticks], xlabel, "runs", title)
    for c, a, b in zip(counts, edges[:-1], edges[1:], strict=True):
        if c:
            left, right = ax.px(a) + 1, max(ax.px(a) + 1, ax.px(b) - 1)
            # at least 3 px tall, so a lone outlier's bar stays visible next to a tall peak
            cv2.rectangle(img, (left, min(ax.py(c), ax.bottom - 3)), (right, ax.bottom - 1), BAR, -1)
    _markers(img, ax, result)
    _legend(img, ax, result)


def _cdf(img: np.ndarray, box: tuple[int, int, int, int], result: BenchResult) -> None:
    cv2 = require("cv2", "device", "The bench plot")
    lat = np.sort(result.latencies_ms)
    x_lo, x_hi, log_x = _x_range(lat)
    ax = _Axes(*box, x_lo=x_lo, x_hi=x_hi, y_hi=1.0, log_x=log_x)
    yticks = [0.0, 0.25, 0.5, 0.75, 0.9, 0.99]
    xlabel = "latency (ms, log scale)" if log_x else "latency (ms)"
    _frame(img, ax, yticks, [f"{t:.0%}" for t in yticks], xlabel, "fraction of runs <= x", "CDF")
    frac = np.arange(1, lat.size + 1) / lat.size
    # a step curve: each sample raises the fraction at its latency
    xs = np.repeat([ax.px(v) for v in lat], 2)[1:]
    ys = np.repeat([ax.py(f) for f in frac], 2)[:-1]
    points = np.stack([np.concatenate([[ax.left, xs[0]], xs]), np.concatenate([[ax.bottom] * 2, ys])], axis=1)
    cv2.polylines(img, [points.astype(np.int32).reshape(-1, 1, 2)], False, BAR, 2, cv2.LINE_AA)
    _markers(img, ax, result)


def plot_latencies(result: BenchResult, path: Path) -> Path:
    """Draw ``result``'s latency histogram and CDF into a PNG at ``path``.

    Raises:
        InputError: if ``path`` does not end in .png or cannot be written.
        MissingDependencyError: if OpenCV is not installed.
    """
    cv2 = require("cv2", "device", "The bench plot")
    path = Path(path)
    if path.suffix.lower() != ".png":
        raise InputError(f"{path}: the plot is a PNG; expected a file name ending in .png")
    img = np.full((HEIGHT, WIDTH, 3), 255, np.uint8)
    s = result.stats
    threads = f"{result.threads} thread{'s' if result.threads != 1 else ''}"
    title = f"{result.model_path.name} | {result.backend}, {threads} | {result.runs} runs"
    _text(img, title, (WIDTH // 2, 34), 0.75, align="center", font=FONT_TITLE)
    sub = (
        f"first {_fmt(result.first_ms)} ms (apart)   mean {_fmt(s.mean)} +- {_fmt(s.std)} ms   "
        f"min {_fmt(s.min)}   max {_fmt(s.max)}   {result.throughput_per_s:.1f} inferences/s"
    )
    _text(img, sub, (WIDTH // 2, 62), 0.5, (90, 90, 90), align="center")
    _histogram(img, (95, 120, 610, 505), result)
    _cdf(img, (735, 120, 1250, 505), result)
    if not cv2.imwrite(str(path), img):
        raise InputError(f"{path}: cannot write the plot (is its folder there and writable?)")
    return path
