"""One device's dashboard page (``/device/<id>``, ``?window=``): whole-frame latency p50/p90, fps and temperature
plots over the window, its bench (one inference) and text (one token) latencies, model history, update events,
last errors and recent recognition results (names and distances). Each list holds the newest ``RECENT``.
"""

from __future__ import annotations

import time
from dataclasses import asdict

from edge.telemetry.schema import MessageKind
from fleet.alerts import AlertRules, device_alerts, rollbacks
from fleet.dashboard_page import FUTURE_SKEW_S, LATENCY_KINDS, MAX_POINTS, RECENT, clean, kinds, num, page_html, when
from fleet.plotsvg import plot
from fleet.run import state_text
from fleet.store import FleetStore

#: Windows a device page offers (``?window=``), in seconds.
WINDOWS = {"15m": 900, "1h": 3600, "6h": 21_600, "24h": 86_400, "7d": 604_800}
RECOGNITION_TASKS = ("face.identify",)
ERROR_TASKS = ("face.error", "text.error", "command.failed", "update.failed")
UPDATE_TASKS = ("update.installed", "update.accepted", "update.rolled_back", "update.failed")


def device_data(
    store: FleetStore, device_id: str, window_s: float, now: float | None = None, rules: AlertRules | None = None
) -> dict | None:
    """One device's page data (``/device/<id>.json``), or None for a device the store never saw."""
    now = time.time() if now is None else now
    row = store.device(device_id)
    if row is None:
        return None
    rules = rules or AlertRules()
    back = rollbacks(store, rules, now)
    reports = store.telemetry(device_id, since=now - window_s, until=now + FUTURE_SKEW_S, limit=MAX_POINTS)
    series = {
        k: [(r["timestamp"], r[k]) for r in reports if r[k] is not None]
        for k in ("latency_p50_ms", "latency_p90_ms", "fps", "temperature_c")
    }
    texts = store.recent_results(("text.reply",), device_id, limit=RECENT)
    faces = store.recent_results(RECOGNITION_TASKS, device_id, limit=RECENT)
    return {
        "now": now,
        "window_s": window_s,
        "device": asdict(row),
        "state": "unknown" if row.online is None else state_text(row.online),
        "alerts": [asdict(a) for a in device_alerts(row, rules, back.get(device_id), now)],
        "series": series,
        "bench": [
            {k: b.get(k) for k in ("timestamp", "model", "backend", "p50_ms", "p90_ms", "first_ms", "runs")}
            for b in store.latest(MessageKind.BENCH, device_id, limit=RECENT).get(device_id, [])
        ],
        "tokens": [
            {
                "timestamp": t["timestamp"],
                "ms_per_token": round(1000.0 / rate, 2) if (rate := t["data"].get("decode_tokens_per_s")) else None,
                "first_token_s": t["data"].get("time_to_first_token_s"),
            }
            for t in texts
        ],
        "models": [asdict(r) for r in store.running_history(device_id)][-RECENT:],
        "updates": [_event(r) for r in store.recent_results(UPDATE_TASKS, device_id, limit=RECENT)],
        "errors": [_event(r) for r in store.recent_results(ERROR_TASKS, device_id, limit=RECENT)],
        "recognitions": [
            {
                "timestamp": r["timestamp"],
                "faces": [(f.get("name"), f.get("distance")) for f in r["data"].get("faces", [])],
            }
            for r in faces
        ],
        "latency_kinds": LATENCY_KINDS,
    }


def _event(r: dict) -> dict:
    data = r.get("data", {})
    detail = data.get("error") or data.get("reason") or data.get("bundle_id") or data.get("version") or ""
    return {"timestamp": r["timestamp"], "task": r["task"], "detail": str(detail)[:300]}


def _table(id_: str, heads: tuple[str, ...], rows: list[tuple]) -> str:
    if not rows:
        return f"<p id={id_} class=note>none reported</p>"
    body = "".join("<tr>" + "".join(f"<td>{clean(c)}</td>" for c in row) + "</tr>" for row in rows)
    head = "".join(f"<th>{h}</th>" for h in heads)
    return f"<table id={id_}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render_device(data: dict, window: str, refresh_s: int = 5) -> str:
    """One device's page HTML for ``device_data``'s output (``window``: the chosen key of ``WINDOWS``)."""
    e, d, s = clean, data["device"], data["series"]
    start, end = data["now"] - data["window_s"], data["now"]
    plots = plot(
        [("p50", "#1f77b4", s["latency_p50_ms"]), ("p90", "#ff7f0e", s["latency_p90_ms"])],
        "whole-frame latency (ms)",
        start,
        end,
    )
    plots += plot([("fps", "#2ca02c", s["fps"])], "frames/s", start, end)
    plots += plot([("SoC", "#9467bd", s["temperature_c"])], "temperature (°C)", start, end)
    windows = " ".join(f"<b>{w}</b>" if w == window else f'<a href="?window={w}">{w}</a>' for w in WINDOWS)
    alerts = "".join(f"<li class=alert>{e(a['text'])} (limit {a['limit']:g})</li>" for a in data["alerts"])
    live = (
        f"<p>state <span class={data['state']}>{data['state']}</span>, last seen {when(d['last_seen'])}, "
        f"{d['reports']} report(s)</p><ul id=alerts>{alerts}</ul><div class=plots>{plots}</div>"
        "<p class=note>Memory: not in the telemetry reports (the schema carries latency, fps and temperature).</p>"
        f"<p class=note>{kinds(('frame', 'inference', 'token'))}</p>" + _lists(data)
    )
    head = f'<p><a href="/">&lsaquo; fleet</a></p><h1>{e(d["device_id"])}</h1><p id=windows>window: {windows}</p>'
    return page_html(f"{d['device_id']} - edge-deploy fleet", head, live, refresh_s)


def _lists(data: dict) -> str:
    """The device page's tables: bench, tokens, model history, updates, errors, recognition results."""
    target = ("profile", "runtime", "precision")
    sections = (
        ("One inference (bench reports)", "bench",
         ("time", "model", "backend", "inference p50 ms", "inference p90 ms", "first ms"),
         [(when(b["timestamp"]), b["model"], b["backend"], *(num(b[k], 2) for k in ("p50_ms", "p90_ms", "first_ms")))
          for b in data["bench"]]),
        ("One token (text replies)", "tokens", ("time", "ms / token", "first token s"),
         [(when(t["timestamp"]), num(t["ms_per_token"], 2), num(t["first_token_s"], 3)) for t in data["tokens"]]),
        ("Model history", "models", ("first seen", "last seen", "model", "version", "sha256", "target"),
         [(when(m["first_seen"]), when(m["last_seen"]), m["model"], m["model_version"], m["model_sha256"][:12],
           " ".join(m[k] for k in target)) for m in data["models"]]),
        ("Updates", "updates", ("time", "event", "detail"),
         [(when(u["timestamp"]), u["task"], u["detail"]) for u in data["updates"]]),
        ("Last errors", "errors", ("time", "task", "error"),
         [(when(u["timestamp"]), u["task"], u["detail"]) for u in data["errors"]]),
        ("Recent recognition results", "recognitions", ("time", "faces (name, distance)"),
         [(when(r["timestamp"]), ", ".join(f"{n or 'unknown'} {num(d, 3)}" for n, d in r["faces"]) or "no face")
          for r in data["recognitions"]]),
    )  # fmt: skip
    return "".join(f"<h2>{title}</h2>{_table(id_, heads, rows)}" for title, id_, heads, rows in sections)
