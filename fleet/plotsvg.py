"""Time-series plots as inline SVG with real axes: times along x, one shared y scale for every series of a plot,
logarithmic when one outlier would flatten the rest (``needs_log``), "no data" when there is none."""

from __future__ import annotations

import html
import math
import time

#: The largest value over the lower quartile above which a plot switches to a log scale.
LOG_RATIO = 20.0
_ANCHORS = ("start", "middle", "middle", "middle", "end")  # the first and last time label stay inside
_W, _H, _L, _R, _T, _B = 560, 220, 52, 24, 26, 30  # size and margins (left, right, top, bottom)


def needs_log(values: list[float]) -> bool:
    """Whether a linear scale would squash most of ``values`` into the bottom of the plot."""
    pos = sorted(v for v in values if v > 0)
    return len(pos) >= 2 and pos[-1] / pos[len(pos) // 4] > LOG_RATIO


def _ticks(low: float, high: float, log: bool) -> list[float]:
    if log:
        return [10.0**k for k in range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)]
    step = 10 ** math.floor(math.log10(max(high - low, 1e-9) / 4))
    step *= next(m for m in (1, 2, 5, 10) if (high - low) / (step * m) <= 5)
    return [low + i * step for i in range(math.ceil((high - low) / step - 1e-9) + 1)]  # the last one >= high


def _label(v: float) -> str:
    return f"{v:g}" if v >= 1 or v == 0 else f"{v:.2g}"


def plot(series: list[tuple[str, str, list[tuple[float, float]]]], title: str, start: float, end: float) -> str:
    """An SVG plot of ``series`` (label, colour, [(unix time, value)]) from ``start`` to ``end``."""
    values = [v for _, _, pts in series for _, v in pts]
    legend = "".join(
        f'<text x="{_W - _R - 90 * (len(series) - i)}" y="16" fill="{c}">&#9644; {html.escape(n)}</text>'
        for i, (n, c, _) in enumerate(series)
    )
    log = needs_log(values)
    head = f'<text x="{_L}" y="16" font-weight="600">{html.escape(title)}{" · log scale" if log else ""}</text>'
    svg = f'<svg class=plot xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" font-size="11">{head}{legend}'
    if not values:
        return (
            f'{svg}<text class=nodata x="{_W / 2}" y="{_H / 2}" text-anchor="middle" fill="#888">no data</text></svg>'
        )
    if log:
        floor = min(v for v in values if v > 0)
        low, high = 10.0 ** math.floor(math.log10(floor)), 10.0 ** math.ceil(math.log10(max(values)))
        high = high * 10 if high == low else high
    else:
        low = min(0.0, min(values))
        high = _ticks(low, max(values) if max(values) > low else low + 1.0, False)[-1]
    span = max(end - start, 1.0)
    pw, ph = _W - _L - _R, _H - _T - _B

    def x(t: float) -> float:
        return _L + (min(max(t, start), end) - start) / span * pw

    def y(v: float) -> float:
        f = (
            (math.log10(max(v, low)) - math.log10(low)) / (math.log10(high) - math.log10(low))
            if log
            else (v - low) / (high - low)
        )
        return _T + ph - min(max(f, 0.0), 1.0) * ph

    grid = [
        f'<line x1="{_L}" y1="{_T + ph}" x2="{_L + pw}" y2="{_T + ph}" stroke="#444"/>',
        f'<line x1="{_L}" y1="{_T}" x2="{_L}" y2="{_T + ph}" stroke="#444"/>',
    ]
    for v in _ticks(low, high, log):
        grid.append(
            f'<line x1="{_L}" y1="{y(v):.1f}" x2="{_L + pw}" y2="{y(v):.1f}" stroke="#eee"/>'
            f'<text class=ytick x="{_L - 4}" y="{y(v) + 4:.1f}" text-anchor="end">{_label(v)}</text>'
        )
    fmt = "%H:%M" if span <= 86_400 else "%m-%d %H:%M"
    for i in range(5):
        t = start + span * i / 4
        grid.append(
            f'<text class=xtick x="{x(t):.1f}" y="{_H - 10}" text-anchor="{_ANCHORS[i]}">'
            f"{time.strftime(fmt, time.localtime(t))}</text>"
        )
    lines = []
    for _, colour, pts in series:
        path = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in sorted(pts))
        lines.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{path}"/>')
        lines += [f'<circle cx="{x(t):.1f}" cy="{y(v):.1f}" r="1.5" fill="{colour}"/>' for t, v in pts[-1:]]
    return svg + "".join(grid) + "".join(lines) + "</svg>"
