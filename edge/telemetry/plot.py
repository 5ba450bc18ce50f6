"""Plot fleet telemetry into a PNG with plain OpenCV drawing (cv2 is already in the device extra).

Three stacked panels share the time axis (seconds since the first report): latency p50 (thick) and p90
(thin) in milliseconds, frames per second, and SoC temperature. One colour per device, legend on top; at
most ``MAX_DEVICES`` devices are drawn (those with the most rows), the legend counts the rest. A panel whose
values are all positive and span more than ``LOG_RATIO`` times is drawn on a log scale (one outlier would
flatten every other device on a linear one); its title says so. No rows: each panel says "no data".
"""

from __future__ import annotations

import math
from pathlib import Path

from edge.bench_plot import log_ticks
from edge.errors import TelemetryError, require

_W, _H = 1000, 780
_LEFT, _RIGHT, _TOP, _PANEL_H, _GAP = 80, 20, 50, 200, 40
#: BGR colours, one per device (cycled).
_PALETTE = ((180, 119, 31), (14, 127, 255), (44, 160, 44), (40, 39, 214), (189, 103, 148), (75, 86, 140))
#: Devices drawn, one colour each (the legend says how many more were left out).
MAX_DEVICES = len(_PALETTE)
#: Largest max/min ratio of a panel's values still drawn on a linear scale.
LOG_RATIO = 20.0
_PANELS = (
    ("latency ms (p50 thick, p90 thin)", ("latency_p50_ms", "latency_p90_ms")),
    ("frames per second", ("fps",)),
    ("temperature C", ("temperature_c",)),
)


def plot_telemetry(rows: list[dict], path: Path) -> Path:
    """Draw telemetry rows (dicts with ``device_id``, ``timestamp`` and the figures) into ``path``.

    Args:
        rows: telemetry reports, e.g. ``MonitorStore.telemetry()``; None values are skipped.
        path: PNG file to write (parent created).

    Returns:
        ``path``.

    Raises:
        TelemetryError: if the PNG can't be written.
        MissingDependencyError: if OpenCV is not installed.
    """
    cv2 = require("cv2", "device", "Plotting telemetry")
    np = require("numpy", "device", "Plotting telemetry")
    img = np.full((_H, _W, 3), 255, np.uint8)
    by_device: dict[str, list[dict]] = {}
    for r in rows:
        by_device.setdefault(r["device_id"], []).append(r)
    devices = sorted(sorted(by_device), key=lambda d: -len(by_device[d]))[:MAX_DEVICES]
    drawn = [r for d in devices for r in by_device[d]]
    t0 = min((r["timestamp"] for r in drawn), default=0.0)
    t1 = max((r["timestamp"] for r in drawn), default=1.0)
    span = max(t1 - t0, 1e-6)
    for i, device in enumerate(devices):
        x = _LEFT + 150 * i
        cv2.line(img, (x, 22), (x + 24, 22), _PALETTE[i], 3)
        cv2.putText(img, device[:14], (x + 30, 27), cv2.FONT_HERSHEY_SIMPLEX, 0.45, (0, 0, 0), 1, cv2.LINE_AA)
    if len(by_device) > len(devices):
        more = f"+{len(by_device) - len(devices)} more"
        cv2.putText(img, more, (_W - _RIGHT - 90, 42), cv2.FONT_HERSHEY_SIMPLEX, 0.4, (0, 0, 0), 1, cv2.LINE_AA)
    for p, (title, fields) in enumerate(_PANELS):
        top = _TOP + p * (_PANEL_H + _GAP)
        values = [r[f] for r in drawn for f in fields if r.get(f) is not None]
        scale = value_scale(values)
        _axes(cv2, img, top, title, scale, t0, span if values else None)
        for i, device in enumerate(devices):
            for j, f in enumerate(fields):
                pts = [
                    (_x(r["timestamp"], t0, span), _y(r[f], scale, top))
                    for r in by_device[device]
                    if r.get(f) is not None
                ]
                if len(pts) >= 2:
                    arr = np.array(pts, np.int32).reshape(-1, 1, 2)
                    cv2.polylines(img, [arr], False, _PALETTE[i], 2 if j == 0 else 1, cv2.LINE_AA)
                if len(pts) == 1:
                    cv2.circle(img, pts[0], 3, _PALETTE[i], -1)
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        ok, buf = cv2.imencode(".png", img)
        if not ok:
            raise OSError("cv2.imencode returned False")
        path.write_bytes(buf.tobytes())
    except OSError as exc:
        raise TelemetryError(f"cannot write plot {path}: {exc}") from exc
    return path


def _x(t: float, t0: float, span: float) -> int:
    return int(round(_LEFT + (t - t0) / span * (_W - _LEFT - _RIGHT)))


def value_scale(values: list[float]) -> tuple[bool, float, float, list[float]]:
    """A panel's scale: (log, low, high, tick values); log when all values are positive and span more than
    ``LOG_RATIO`` times. No values: an empty tick list (the panel says "no data")."""
    if not values:
        return False, 0.0, 1.0, []
    lo, hi = min(values), max(values)
    if lo > 0 and hi / lo > LOG_RATIO:
        return True, lo, hi, log_ticks(lo, hi)
    if hi - lo < 1e-9:
        lo, hi = lo - 1.0, hi + 1.0
    return False, lo, hi, [lo + (hi - lo) * k / 4 for k in range(5)]


def _y(v: float, scale: tuple[bool, float, float, list[float]], top: int) -> int:
    log, lo, hi, _ = scale
    if log:
        v, lo, hi = math.log10(max(v, lo)), math.log10(lo), math.log10(hi)
    return int(round(top + _PANEL_H - (v - lo) / (hi - lo) * _PANEL_H))


def _axes(cv2, img, top: int, title: str, scale: tuple, t0: float, span: float | None) -> None:
    """A panel's frame, title and value ticks, and time ticks under it (None: no data, said in the panel)."""
    black, grey = (0, 0, 0), (200, 200, 200)
    font = cv2.FONT_HERSHEY_SIMPLEX
    cv2.rectangle(img, (_LEFT, top), (_W - _RIGHT, top + _PANEL_H), black, 1)
    cv2.putText(img, title + (" (log scale)" if scale[0] else ""), (_LEFT + 5, top - 6), font, 0.45, black, 1,
                cv2.LINE_AA)  # fmt: skip
    if span is None:
        mid = ((_LEFT + _W - _RIGHT) // 2 - 30, top + _PANEL_H // 2)
        cv2.putText(img, "no data", mid, font, 0.6, black, 1, cv2.LINE_AA)
        return
    for v in scale[3]:
        y = _y(v, scale, top)
        cv2.line(img, (_LEFT, y), (_W - _RIGHT, y), grey, 1)
        cv2.putText(img, f"{v:.4g}", (5, y + 4), font, 0.4, black, 1, cv2.LINE_AA)
    for k in range(6):
        t = t0 + span * k / 5
        x = _x(t, t0, span)
        cv2.putText(img, _duration(t - t0, span), (x - 10, top + _PANEL_H + 15), font, 0.4, black, 1, cv2.LINE_AA)


def _duration(seconds: float, span: float) -> str:
    """A time tick: seconds with one decimal under 10 s of span, whole seconds, minutes or hours above."""
    if span < 10:
        return f"{seconds:.1f}s"
    if span < 600:
        return f"{seconds:.0f}s"
    return f"{seconds / 60:.0f}m" if span < 36000 else f"{seconds / 3600:.1f}h"
