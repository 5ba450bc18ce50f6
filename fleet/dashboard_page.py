"""The fleet dashboard's page: one HTML page (or JSON) drawn on the server from either store; no CDN, no JS.

``fleet_data`` reads one page of the fleet (``per_page`` devices, sorted by id) and the fleet-wide counts
and models in use; ``render_page`` draws it: online/offline counts, the models in use, and a row per device
with state, latency p50/p90 over the last ``window_s`` as an inline SVG chart, fps, SoC temperature, what it
runs, last error, last seen. What a page reads is bounded whatever the store holds: ``per_page`` devices,
``MAX_POINTS`` reports each inside the window (reports dated more than ``FUTURE_SKEW_S`` ahead of now are
left out), ``MAX_MODELS`` models. Every string from a device is HTML-escaped and its bidirectional-text
controls are replaced (``clean``), so a device id can't reorder what the page shows.
"""

from __future__ import annotations

import html
import math
import time
from dataclasses import asdict

from fleet.records import DeviceRow
from fleet.run import state_text
from fleet.store import FleetStore

#: Seconds a report's timestamp may be ahead of this machine's clock and still be drawn.
FUTURE_SKEW_S = 300.0
#: Newest reports per device drawn in its latency chart.
MAX_POINTS = 240
#: Models listed in "Models in use" (the most used; the rest are summed up in one line).
MAX_MODELS = 20
#: Unicode bidirectional-text controls (embeddings, overrides, isolates, marks): each shown as U+FFFD.
BIDI_CONTROLS = frozenset((0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)))
_NEUTRAL = dict.fromkeys(BIDI_CONTROLS, "\ufffd")

_STYLE = """
body{font:14px system-ui,sans-serif;margin:16px;color:#222}h1{font-size:20px;margin:0 0 8px}
.cards{display:flex;gap:12px;margin:8px 0 16px}.card{border:1px solid #ccc;border-radius:6px;padding:8px 14px}
.card b{display:block;font-size:22px}table{border-collapse:collapse;width:100%}
th,td{border-bottom:1px solid #e4e4e4;padding:4px 8px;text-align:left;vertical-align:middle}
th{background:#f4f4f4}.online{color:#0a7d2c;font-weight:600}.offline{color:#b3261e;font-weight:600}
.err{color:#b3261e;max-width:320px;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
.mono{font-family:ui-monospace,monospace;font-size:12px}svg{display:block}
"""


def clean(value: object) -> str:
    """``value`` as HTML text: escaped, and every bidirectional-text control replaced by U+FFFD."""
    return html.escape(str(value).translate(_NEUTRAL))


def sparkline(points: list[tuple[float, float, float]], width: int = 220, height: int = 36) -> str:
    """An SVG chart of p50 (blue) and p90 (orange) latency over time.

    Args:
        points: (time, p50, p90) in time order.
        width: pixels.
        height: pixels.

    Returns:
        The ``<svg>`` element (empty frame when there are no points).
    """
    frame = f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">'
    if not points:
        return frame + "</svg>"
    t0, t1 = points[0][0], points[-1][0]
    top = max(max(p[2] for p in points), max(p[1] for p in points), 1e-9)
    span = max(t1 - t0, 1e-9)

    def path(index: int) -> str:
        return " ".join(
            f"{(row[0] - t0) / span * (width - 4) + 2:.1f},{height - 2 - row[index] / top * (height - 4):.1f}"
            for row in points
        )

    return (
        frame
        + f'<polyline fill="none" stroke="#ff7f0e" stroke-width="1.5" points="{path(2)}"/>'
        + f'<polyline fill="none" stroke="#1f77b4" stroke-width="1.5" points="{path(1)}"/>'
        + f'<text x="{width - 2}" y="9" font-size="9" fill="#777" text-anchor="end">{top:.0f} ms</text>'
        + f"<title>p50/p90 ms, max {top:.1f} ms</title></svg>"
    )


def fleet_data(
    store: FleetStore,
    window_s: float = 900.0,
    now: float | None = None,
    page: int = 1,
    per_page: int = 100,
) -> dict:
    """What one page of the dashboard shows, as JSON-ready data.

    Args:
        store: either store.
        window_s: seconds of latency history per device (by the devices' clocks).
        now: the current time (Unix seconds).
        page: which page of ``per_page`` devices (sorted by id), from 1; past the last page, the last.
        per_page: devices per page.
    """
    now = time.time() if now is None else now
    counts = {**store.state_counts(), "rejected": store.rejected}
    pages = max(1, math.ceil(counts["devices"] / per_page))
    page = min(max(page, 1), pages)
    rows = store.devices(offset=(page - 1) * per_page, limit=per_page)
    ids = tuple(r.device_id for r in rows)
    running = {r.device_id: r for r in store.running(ids)}
    history = {}
    charts = store.telemetry_by_device(ids, since=now - window_s, until=now + FUTURE_SKEW_S, limit=MAX_POINTS)
    for dev, reports in charts.items():
        points = sorted(((t["timestamp"], t["latency_p50_ms"], t["latency_p90_ms"]) for t in reports), key=_first)
        if points:
            history[dev] = points
    models: dict[str, int] = {}
    for model, version, precision, runtime, n in store.models_in_use():
        key = f"{model} {version} ({precision}, {runtime})"
        models[key] = models.get(key, 0) + n
    shown = sorted(models.items(), key=lambda kv: (-kv[1], kv[0]))[:MAX_MODELS]
    return {
        "now": now,
        "page": page,
        "pages": pages,
        "per_page": per_page,
        "devices": [asdict(r) for r in rows],
        "running": {dev: asdict(run) for dev, run in running.items()},
        "history": history,
        "models": dict(sorted(shown)),
        "models_more": {"models": len(models) - len(shown), "devices": sum(models.values()) - sum(n for _, n in shown)},
        "counts": counts,
    }


def render_page(data: dict, refresh_s: int = 5) -> str:
    """The dashboard HTML for ``fleet_data``'s output."""
    e = clean
    c = data["counts"]
    cards = "".join(
        f'<div class="card" id="count-{k}">{e(label)}<b>{c[k]}</b></div>'
        for k, label in (("devices", "devices"), ("online", "online"), ("offline", "offline"), ("rejected", "rejected"))
    )
    models = "".join(f"<li>{e(k)}: {n} device(s)</li>" for k, n in data["models"].items()) or "<li>none reported</li>"
    more = data.get("models_more", {"models": 0})
    if more["models"]:
        models += f"<li>{more['models']} more model(s) on {more['devices']} device(s)</li>"
    body = "".join(_device_row(DeviceRow(**d), data) for d in data["devices"])
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" '
        f'content="{int(refresh_s)}"><title>edge-deploy fleet</title><style>{_STYLE}</style></head><body>'
        f"<h1>edge-deploy fleet</h1><div class=cards>{cards}</div><h2>Models in use</h2><ul id=models>{models}</ul>"
        f"{_pages(data)}"
        "<table id=fleet><thead><tr><th>device</th><th>state</th><th>latency <span style=color:#1f77b4>p50</span> / "
        "<span style=color:#ff7f0e>p90</span> over time</th>"
        "<th>p50</th><th>p90</th><th>fps</th><th>temp °C</th><th>model</th><th>runtime</th><th>last error</th>"
        f"<th>last seen</th><th>reports</th></tr></thead><tbody>{body}</tbody></table></body></html>"
    )


def _pages(data: dict) -> str:
    """ "devices 101-200 of 20000 · previous · next" when the fleet takes more than one page."""
    page, pages, per_page = data.get("page", 1), data.get("pages", 1), data.get("per_page", 0)
    if pages <= 1:
        return ""
    first = (page - 1) * per_page + 1
    links = [f'<a href="?page={page - 1}">&lsaquo; previous</a>'] if page > 1 else []
    links += [f'<a href="?page={page + 1}">next &rsaquo;</a>'] if page < pages else []
    return (
        f"<p id=pages>devices {first}&ndash;{first + len(data['devices']) - 1} of {data['counts']['devices']} "
        f"(page {page} of {pages}) {' &middot; '.join(links)}</p>"
    )


def _device_row(r: DeviceRow, data: dict) -> str:
    e = clean
    run = data["running"].get(r.device_id)
    model = (
        f"{e(run['model'])} {e(run['model_version'])}<br><span class=mono>{e(run['model_sha256'][:12])}</span>"
        if run
        else "-"
    )
    runtime = f"{e(run['runtime'])} {e(run['precision'])} on {e(run['profile'])}" if run else "-"
    state = state_text(r.online)
    cells = (
        f"<td>{e(r.device_id)}</td><td class={state if r.online is not None else 'unknown'}>{state}</td>"
        f"<td>{sparkline(data['history'].get(r.device_id, []))}</td>"
        f"<td>{_num(r.latency_p50_ms)}</td><td>{_num(r.latency_p90_ms)}</td><td>{_num(r.fps)}</td>"
        f"<td>{_num(r.temperature_c)}</td><td>{model}</td><td>{runtime}</td>"
        f'<td class=err title="{e(r.last_error or "")}">{e(r.last_error or "-")}</td>'
        f"<td>{max(data['now'] - r.last_seen, 0):.0f} s ago</td><td>{r.reports}</td>"
    )
    return f'<tr data-device="{e(r.device_id)}">{cells}</tr>'


def _first(point: tuple) -> float:
    return point[0]


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"
