"""The fleet dashboard's fleet page, drawn on the server from either store: HTML with inline SVG plots, no CDN.

``fleet_data``/``render_fleet``: counts (online, offline, alerting, rejected and why), active alerts,
fleet-wide latency and throughput plots over the window, and the device table, sorted and filtered on the
server (``View``: ``?sort=&order=&q=&state=&page=``) and paged (``per_page`` rows). The device page is in
``fleet.device_page``. Every latency says what it measures (``LATENCY_KINDS``). Pages update live through
``SCRIPT`` (``/app.js``): it fetches the same page again every refresh and swaps its ``#live`` part.

What a page reads is bounded: ``MAX_POINTS`` reports per device plot, ``MAX_FLEET_POINTS`` for the fleet
plots, ``RECENT`` results per list. Reports dated more than ``FUTURE_SKEW_S`` ahead are left out. Every
string from a device is HTML-escaped and its bidirectional-text controls replaced (``clean``).
"""

from __future__ import annotations

import html
import math
import time
from dataclasses import asdict, dataclass
from urllib.parse import quote, urlencode

from edge.errors import InputError
from edge.telemetry.schema import MessageKind
from fleet.alerts import AlertRules, device_alerts, rollbacks
from fleet.plotsvg import plot
from fleet.records import DeviceRow
from fleet.run import state_text
from fleet.store import FleetStore

FUTURE_SKEW_S = 300.0
MAX_POINTS = 240
MAX_FLEET_POINTS = 20_000
MAX_MODELS = 20
RECENT = 20
#: What each latency measures, as the pages label it.
LATENCY_KINDS = {
    "frame": "whole frame: one frame through the whole pipeline (telemetry latency_p50_ms/p90_ms)",
    "inference": "one inference: one model run, steady state (bench reports p50_ms/p90_ms)",
    "token": "one token: decode time per generated token (text replies: 1000 / decode_tokens_per_s)",
}
SORT_KEYS = (
    "device",
    "state",
    "alerts",
    "model",
    "version",
    "target",
    "p50",
    "p90",
    "fps",
    "inference",
    "temp",
    "error",
    "seen",
)
STATES = ("online", "offline", "unknown", "alerting")
BIDI_CONTROLS = frozenset((0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)))
_NEUTRAL = dict.fromkeys(BIDI_CONTROLS, "\ufffd")

_STYLE = """
body{font:14px system-ui,sans-serif;margin:16px;color:#222}h1{font-size:20px;margin:0 0 8px}h2{font-size:16px}
.cards{display:flex;gap:12px;margin:8px 0}.card{border:1px solid #ccc;border-radius:6px;padding:6px 14px}
.card b{display:block;font-size:22px}table{border-collapse:collapse;width:100%}
.plots{display:flex;flex-wrap:wrap;gap:8px}
th,td{border-bottom:1px solid #e4e4e4;padding:3px 6px;text-align:left}th{background:#f4f4f4}th a{color:#222}
.online{color:#0a7d2c;font-weight:600}.offline,.alert{color:#b3261e;font-weight:600}.note{color:#666;font-size:12px}
.err{color:#b3261e;max-width:280px;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
.mono{font-family:ui-monospace,monospace;font-size:12px}td:first-child{white-space:nowrap}
"""
#: Live updates: fetch the same page every refresh and swap ``#live`` in place (served as /app.js).
SCRIPT = """(function () {
  const live = document.getElementById("live"), stamp = document.getElementById("updated");
  if (!live) return;
  async function tick() {
    try {
      const reply = await fetch(location.href, {cache: "no-store"});
      if (!reply.ok) throw new Error("HTTP " + reply.status);
      const fresh = new DOMParser().parseFromString(await reply.text(), "text/html").getElementById("live");
      if (fresh) live.innerHTML = fresh.innerHTML;
      stamp.textContent = "updated " + new Date().toLocaleTimeString();
      live.dataset.updates = String(Number(live.dataset.updates || 0) + 1);
    } catch (e) {
      stamp.textContent = "not updated: " + e.message;
    }
    setTimeout(tick, Number(live.dataset.refresh) * 1000);
  }
  setTimeout(tick, Number(live.dataset.refresh) * 1000);
})();
"""


def clean(value: object) -> str:
    """``value`` as HTML text: escaped, and every bidirectional-text control replaced by U+FFFD."""
    return html.escape(str(value).translate(_NEUTRAL))


def page_number(query: dict[str, list[str]]) -> int:
    """``page=N`` of a parsed query string (default 1).

    Raises:
        InputError: N is not a whole number in 1..1000000.
    """
    values = query.get("page", ["1"])
    try:
        page = int(values[-1])
    except ValueError:
        page = 0
    if not 1 <= page <= 1_000_000:
        raise InputError(f"page={values[-1][:20]!r}; expected a whole number in 1..1000000")
    return page


@dataclass(frozen=True)
class View:
    """How the fleet table is sorted, filtered and paged (the fleet page's query string)."""

    sort: str = "device"
    order: str = "asc"
    q: str = ""
    state: str = ""
    page: int = 1

    @classmethod
    def parse(cls, query: dict[str, list[str]]) -> View:
        """From ``parse_qs`` output.

        Raises:
            InputError: an unknown sort key, order or state, or a page out of 1..1000000.
        """
        one = {k: v[-1] for k, v in query.items()}
        for key, allowed in (("sort", SORT_KEYS), ("order", ("asc", "desc")), ("state", ("", *STATES))):
            if key in one and one[key] not in allowed:
                raise InputError(f"{key}={one[key][:20]!r}; expected one of {', '.join(a for a in allowed if a)}")
        page = page_number(query)
        return cls(
            one.get("sort", "device"), one.get("order", "asc"), one.get("q", "")[:64], one.get("state", ""), page
        )

    def link(self, **change: object) -> str:
        """This view's query string with ``change`` applied."""
        data = {**asdict(self), **change}
        return "?" + urlencode({k: v for k, v in data.items() if v not in ("", None)})


def _row(r: DeviceRow, run: dict | None, bench: dict | None, alerts: list, now: float) -> dict:
    run = run or {}
    return {
        **vars(r),  # not asdict: it deep-copies, seconds at 20,000 devices
        "state": "unknown" if r.online is None else state_text(r.online),
        "model": run.get("model", ""),
        "version": run.get("model_version", ""),
        "target": " ".join(x for x in (run.get("profile", ""), run.get("runtime", ""), run.get("precision", "")) if x),
        "inference_p50_ms": bench.get("p50_ms") if bench else None,
        "alerts": [a.text for a in alerts],
        "seen_s_ago": max(now - r.last_seen, 0.0),
    }


_SORT = {
    "device": "device_id",
    "p50": "latency_p50_ms",
    "p90": "latency_p90_ms",
    "temp": "temperature_c",
    "inference": "inference_p50_ms",
    "error": "last_error",
    "seen": "seen_s_ago",
}


def _sort_key(row: dict, key: str) -> tuple:
    value = row[_SORT.get(key, key)]
    if key == "alerts":
        value = len(value)
    return (value is None or value == "", value if isinstance(value, int | float) else str(value or "").lower())


def fleet_data(
    store: FleetStore,
    window_s: float = 900.0,
    now: float | None = None,
    view: View | None = None,
    per_page: int = 100,
    rules: AlertRules | None = None,
) -> dict:
    """The fleet page's data (also served as ``/fleet.json``).

    Args:
        store: either store.
        window_s: seconds of history in the fleet plots (by the devices' clocks).
        now: the current time (Unix seconds).
        view: sort, filter and page of the table; past the last page, the last.
        per_page: table rows per page.
        rules: alert rules to evaluate (None: none).
    """
    now = time.time() if now is None else now
    view, rules = view or View(), rules or AlertRules()
    running = {r.device_id: vars(r) for r in store.running()}
    bench = {dev: reports[0] for dev, reports in store.latest(MessageKind.BENCH).items()}
    back = rollbacks(store, rules, now)
    rows = [
        _row(
            r,
            running.get(r.device_id),
            bench.get(r.device_id),
            device_alerts(r, rules, back.get(r.device_id), now),
            now,
        )
        for r in store.devices()
    ]
    counts = {"devices": len(rows), "online": 0, "offline": 0, "unknown": 0, "alerting": 0}
    for row in rows:
        counts[row["state"]] += 1
        counts["alerting"] += bool(row["alerts"])
    q = view.q.casefold()
    shown = [
        row
        for row in rows
        if (not view.state or row["state"] == view.state or (view.state == "alerting" and row["alerts"]))
        and (
            not q
            or q
            in " ".join(str(row[k] or "") for k in ("device_id", "model", "version", "target", "last_error")).casefold()
        )
    ]
    shown.sort(key=lambda row: _sort_key(row, view.sort), reverse=view.order == "desc")
    if view.order == "desc":  # missing values stay last either way
        shown.sort(key=lambda row: _sort_key(row, view.sort)[0])
    pages = max(1, math.ceil(len(shown) / per_page))
    page = min(view.page, pages)
    reports = store.telemetry(since=now - window_s, until=now + FUTURE_SKEW_S, limit=MAX_FLEET_POINTS)
    models: dict[str, int] = {}
    for model, version, precision, runtime, n in store.models_in_use():
        key = f"{model} {version} ({precision}, {runtime})"
        models[key] = models.get(key, 0) + n
    return {
        "now": now,
        "window_s": window_s,
        "view": {**asdict(view), "page": page},
        "pages": pages,
        "per_page": per_page,
        "matching": len(shown),
        "devices": shown[(page - 1) * per_page : page * per_page],
        "alerts": {row["device_id"]: row["alerts"] for row in rows if row["alerts"]},
        "counts": {**counts, "rejected": store.rejected, "last_rejection": store.last_rejection},
        "fleet": fleet_series(reports, now - window_s, now),
        "models": dict(sorted(models.items(), key=lambda kv: (-kv[1], kv[0]))[:MAX_MODELS]),
        "latency_kinds": LATENCY_KINDS,
    }


def fleet_series(reports: list[dict], start: float, end: float, buckets: int = 60) -> dict[str, list]:
    """Fleet-wide series over time: median and worst whole-frame p90 across reports, and total fps (the sum
    of each device's mean fps) per time bucket."""
    step = max((end - start) / buckets, 1.0)
    grouped: dict[int, list[dict]] = {}
    for r in reports:
        grouped.setdefault(min(int((r["timestamp"] - start) // step), buckets - 1), []).append(r)
    out: dict[str, list] = {"p90_median": [], "p90_max": [], "fps_total": []}
    for k in sorted(grouped):
        t, rs = start + (k + 0.5) * step, grouped[k]
        p90s = sorted(r["latency_p90_ms"] for r in rs)
        out["p90_median"].append((t, p90s[len(p90s) // 2]))
        out["p90_max"].append((t, p90s[-1]))
        per_device: dict[str, list[float]] = {}
        for r in rs:
            per_device.setdefault(r["device_id"], []).append(r["fps"])
        out["fps_total"].append((t, sum(sum(v) / len(v) for v in per_device.values())))
    return out


# -- HTML ------------------------------------------------------------------------------------------------


def page_html(title: str, head: str, live: str, refresh_s: int) -> str:
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{clean(title)}</title>'
        f"<style>{_STYLE}</style></head><body>{head}<p class=note id=updated></p>"
        f'<div id=live data-refresh="{int(refresh_s)}">{live}</div><script src="/app.js"></script></body></html>'
    )


def when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _cards(c: dict) -> str:
    cards = "".join(
        f'<div class="card" id="count-{k}">{k}<b>{c[k]}</b></div>'
        for k in ("devices", "online", "offline", "alerting", "rejected")
    )
    why = (
        f"<p class=note id=last-rejection>last rejected: {clean(c['last_rejection'])}</p>"
        if c.get("last_rejection")
        else ""
    )
    return f"<div class=cards>{cards}</div>{why}"


#: The table's columns: (sort key, heading).
_HEADS = (
    ("device", "device"),
    ("state", "state"),
    ("alerts", "alerts"),
    ("model", "model"),
    ("version", "version"),
    ("target", "target"),
    ("p50", "frame p50 ms"),
    ("p90", "frame p90 ms"),
    ("fps", "fps"),
    ("inference", "inference p50 ms"),
    ("temp", "temp °C"),
    ("error", "last error"),
    ("seen", "last seen"),
)


def render_fleet(data: dict, refresh_s: int = 5) -> str:
    """The fleet page's HTML for ``fleet_data``'s output."""
    e, view = clean, View(**data["view"])
    alerts = "".join(
        f'<li><a href="/device/{quote(dev)}">{e(dev)}</a>: {e("; ".join(texts))}</li>'
        for dev, texts in data["alerts"].items()
    )
    fleet, minutes = data["fleet"], data["window_s"] / 60
    plots = plot(
        [("median", "#1f77b4", fleet["p90_median"]), ("worst", "#d62728", fleet["p90_max"])],
        "whole-frame p90 (ms)",
        data["now"] - data["window_s"],
        data["now"],
    )
    plots += plot(
        [("all devices", "#2ca02c", fleet["fps_total"])],
        "throughput (frames/s)",
        data["now"] - data["window_s"],
        data["now"],
    )
    th = "".join(
        f'<th data-key="{k}"><a href="{e(view.link(sort=k, order=_next_order(view, k), page=1))}">'
        f"{label}{(' ▲' if view.order == 'asc' else ' ▼') if view.sort == k else ''}</a></th>"
        for k, label in _HEADS
    )
    rows = "".join(_fleet_row(r) for r in data["devices"])
    live = (
        f"{_cards(data['counts'])}<ul id=alerts>{alerts}</ul><h2>Fleet, last {minutes:.0f} min</h2>"
        f"<div class=plots>{plots}</div>{_models(data['models'])}"
        f"<p class=note>{data['matching']} of {data['counts']['devices']} device(s) "
        f"match. {kinds(('frame', 'inference'))}</p>"
        f"{_pager(view, data['pages'])}<table id=fleet><thead><tr>{th}</tr></thead><tbody>{rows}</tbody></table>"
    )
    states = "".join(f"<option{' selected' if view.state == s else ''}>{s}</option>" for s in STATES)
    form = (
        f'<form id=filter method=get><input type=hidden name=sort value="{e(view.sort)}"><input type=hidden name=order '
        f'value="{e(view.order)}"><input name=q id=q placeholder="device, model, version, target, error" size=36 '
        f'value="{e(view.q)}"> <select name=state id=state><option value="">any state</option>{states}</select> '
        "<button>filter</button></form>"
    )
    return page_html("edge-deploy fleet", f"<h1>edge-deploy fleet</h1>{form}", live, refresh_s)


def _models(models: dict[str, int]) -> str:
    items = "".join(f"<li>{clean(k)}: {n} device(s)</li>" for k, n in models.items()) or "<li>none reported</li>"
    return f"<h2>Models in use</h2><ul id=models>{items}</ul>"


def _pager(view: View, pages: int) -> str:
    """ "page 2 of 11 · previous · next" when the table takes more than one page."""
    if pages == 1:
        return ""
    back = f'<a href="{clean(view.link(page=view.page - 1))}">&lsaquo; previous</a> ' if view.page > 1 else ""
    ahead = f'<a href="{clean(view.link(page=view.page + 1))}">next &rsaquo;</a>' if view.page < pages else ""
    return f"<p id=pages>page {view.page} of {pages} {back}{ahead}</p>"


def _next_order(view: View, key: str) -> str:
    """Clicking the sorted column's head again reverses it."""
    return "desc" if view.sort == key and view.order == "asc" else "asc"


def kinds(which: tuple[str, ...]) -> str:
    return "Latencies: " + "; ".join(f"<b>{k}</b> = {LATENCY_KINDS[k]}" for k in which) + "."


def _fleet_row(r: dict) -> str:
    e = clean
    state = r["state"]
    cells = (
        f'<td><a href="/device/{quote(r["device_id"])}">{e(r["device_id"])}</a></td><td class={state}>{state}</td>'
        f"<td class=alert>{e('; '.join(r['alerts']))}</td><td>{e(r['model'] or '-')}</td>"
        f"<td>{e(r['version'] or '-')}</td>"
        f"<td>{e(r['target'] or '-')}</td><td>{num(r['latency_p50_ms'])}</td><td>{num(r['latency_p90_ms'])}</td>"
        f"<td>{num(r['fps'])}</td><td>{num(r['inference_p50_ms'])}</td><td>{num(r['temperature_c'])}</td>"
        f'<td class=err title="{e(r["last_error"] or "")}">{e(r["last_error"] or "-")}</td>'
        f"<td>{r['seen_s_ago']:.0f} s ago</td>"
    )
    return f'<tr data-device="{e(r["device_id"])}">{cells}</tr>'
