"""The fleet dashboard: one HTML page drawn on the server from either store (stdlib only, no CDN, no JS).

``/`` shows the fleet (online/offline counts, the models in use) and a row per device: state, latency
p50/p90 over the last ``window_s`` as an inline SVG chart, fps, SoC temperature, what it runs, last error,
last seen. The page reloads itself every ``refresh_s`` (a meta refresh). ``/fleet.json`` returns the same
data for scripts. Everything shown is escaped; the page sends a Content-Security-Policy without scripts.
"""

from __future__ import annotations

import html
import json
import logging
import threading
import time
from dataclasses import asdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from edge.errors import EdgeDeployError, InputError
from fleet.records import DeviceRow
from fleet.run import state_text
from fleet.store import FleetStore

log = logging.getLogger(__name__)

_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; img-src data:",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}
_STYLE = """
body{font:14px system-ui,sans-serif;margin:16px;color:#222}h1{font-size:20px;margin:0 0 8px}
.cards{display:flex;gap:12px;margin:8px 0 16px}.card{border:1px solid #ccc;border-radius:6px;padding:8px 14px}
.card b{display:block;font-size:22px}table{border-collapse:collapse;width:100%}
th,td{border-bottom:1px solid #e4e4e4;padding:4px 8px;text-align:left;vertical-align:middle}
th{background:#f4f4f4}.online{color:#0a7d2c;font-weight:600}.offline{color:#b3261e;font-weight:600}
.err{color:#b3261e;max-width:320px;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
.mono{font-family:ui-monospace,monospace;font-size:12px}svg{display:block}
"""


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


def fleet_data(store: FleetStore, window_s: float = 900.0, now: float | None = None) -> dict:
    """What the page shows, as JSON-ready data.

    Args:
        store: either store.
        window_s: seconds of latency history per device (by the devices' clocks).
        now: the current time (Unix seconds).
    """
    now = time.time() if now is None else now
    rows = store.devices()
    running = {r.device_id: r for r in store.running()}
    history: dict[str, list[tuple[float, float, float]]] = {}
    for t in store.telemetry(since=now - window_s):
        history.setdefault(t["device_id"], []).append((t["timestamp"], t["latency_p50_ms"], t["latency_p90_ms"]))
    models: dict[str, int] = {}
    for r in running.values():
        key = f"{r.model} {r.model_version} ({r.precision}, {r.runtime})"
        models[key] = models.get(key, 0) + 1
    return {
        "now": now,
        "devices": [asdict(r) for r in rows],
        "running": {d: asdict(r) for d, r in running.items()},
        "history": history,
        "models": dict(sorted(models.items())),
        "counts": {
            "devices": len(rows),
            "online": sum(r.online is True for r in rows),
            "offline": sum(r.online is False for r in rows),
        },
    }


def render_page(data: dict, refresh_s: int = 5) -> str:
    """The dashboard HTML for ``fleet_data``'s output."""
    e = html.escape
    c = data["counts"]
    cards = "".join(
        f'<div class="card" id="count-{k}">{e(label)}<b>{c[k]}</b></div>'
        for k, label in (("devices", "devices"), ("online", "online"), ("offline", "offline"))
    )
    models = "".join(f"<li>{e(k)}: {n} device(s)</li>" for k, n in data["models"].items()) or "<li>none reported</li>"
    body = "".join(_device_row(DeviceRow(**d), data) for d in data["devices"])
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" '
        f'content="{int(refresh_s)}"><title>edge-deploy fleet</title><style>{_STYLE}</style></head><body>'
        f"<h1>edge-deploy fleet</h1><div class=cards>{cards}</div><h2>Models in use</h2><ul id=models>{models}</ul>"
        "<table id=fleet><thead><tr><th>device</th><th>state</th><th>latency <span style=color:#1f77b4>p50</span> / "
        "<span style=color:#ff7f0e>p90</span> over time</th>"
        "<th>p50</th><th>p90</th><th>fps</th><th>temp °C</th><th>model</th><th>runtime</th><th>last error</th>"
        f"<th>last seen</th><th>reports</th></tr></thead><tbody>{body}</tbody></table></body></html>"
    )


def _device_row(r: DeviceRow, data: dict) -> str:
    e = html.escape
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


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


class Dashboard:
    """The dashboard's HTTP server in a background thread. Use ``with`` or call ``close()``.

    Args:
        store: the store to read (shared with the monitor; both backends are thread-safe).
        host: address to bind (127.0.0.1 keeps it local).
        port: TCP port; 0 picks a free one (see ``port``).

    Raises:
        InputError: the port can't be bound.
    """

    def __init__(self, store: FleetStore, host: str = "127.0.0.1", port: int = 8080) -> None:
        self.store = store
        handler = type("Handler", (_Handler,), {"store": store})
        try:
            self._server = ThreadingHTTPServer((host, port), handler)
        except OSError as exc:
            raise InputError(f"cannot listen on {host}:{port} ({exc.strerror}); choose another --web address") from exc
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="dashboard", daemon=True)

    @property
    def port(self) -> int:
        """The port actually bound."""
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        """``http://host:port/``."""
        return f"http://{self._server.server_address[0]}:{self.port}/"

    def start(self) -> Dashboard:
        """Serve in the background."""
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving and free the port."""
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> Dashboard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Handler(BaseHTTPRequestHandler):
    store: FleetStore

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        path = self.path.split("?", 1)[0]
        if path not in ("/", "/fleet.json"):
            self._send(404, "text/plain", b"not found\n")
            return
        try:
            data = fleet_data(self.store)
        except EdgeDeployError as exc:  # e.g. the database is restarting: say so, the page reloads itself
            self._send(503, "text/plain; charset=utf-8", f"fleet store unavailable: {exc}\n".encode())
            return
        if path == "/fleet.json":
            self._send(200, "application/json", json.dumps(data).encode())
        else:
            self._send(200, "text/html; charset=utf-8", render_page(data).encode())

    def _send(self, code: int, kind: str, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        for key, value in _HEADERS.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
        log.debug("%s %s", self.address_string(), format % args)
