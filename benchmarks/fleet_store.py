"""The fleet store at 10 million reports: every query the dashboard and ``latest`` make, against 100 ms.

Each store (a PostgreSQL cluster of its own from testsupport/postgres.py, and a SQLite file) is filled with
``--rows`` reports from ``--devices`` devices over ``--days`` days, one every ``days / (rows / devices)`` per
device, 1 in 20 a ``result`` and the rest telemetry, in time order as a monitor would receive them.
PostgreSQL is filled with ``generate_series`` into its daily partitions (``latest`` then built from the
table); SQLite with a recursive ``INSERT ... SELECT`` in transactions of a million rows, the store's
index and triggers made afterwards by opening the store (as for a file an older edge-deploy made). Devices
and what they run are one row each.

Then each query runs ``--runs`` times: the first call after the store was reopened (PostgreSQL restarted:
its buffers are empty, the OS file cache is not) is reported apart from the median of the rest.

    .venv/bin/python -m benchmarks run fleet_store --write      # docs/benchmarks.md section fleet-store
    .venv/bin/python -m benchmarks run fleet_store --rows 200000 --store sqlite
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks.harness.report import machine_line, say, write_section
from testsupport.postgres import Postgres

NAME = "fleet_store"
SUMMARY = "The fleet store at 10 million reports: the dashboard's queries and latest, first call and median, vs 100 ms"
SECTIONS = ("fleet-store",)

GOAL_MS = 100.0
CHUNK = 1_000_000

#: One report per row number ``i``: device ``i % devices``, seq ``i / devices + 1``; every 20th seq a result.
_TELEMETRY = (
    '{"type":"telemetry","device_id":"%s","seq":%s,"timestamp":%s,"schema_version":3,"latency_p50_ms":%s,'
    '"latency_p90_ms":%s,"fps":29.5,"temperature_c":51.0,"window_s":10.0,"model":"arcface-int8",'
    '"model_version":"0.1.0","runtime":"onnxruntime","precision":"int8"}'
)
_RESULT = (
    '{"type":"result","device_id":"%s","seq":%s,"timestamp":%s,"schema_version":3,"task":"face.identify",'
    '"data":{"faces":[{"name":"alice","distance":0.41}]}}'
)


def _row_sql(dialect: str) -> tuple[str, str]:
    """The select list (device_id, seq, kind, timestamp, received, stored, payload) over a row number ``i``,
    with ``:start``/``:step``/``:devices`` placeholders, and the row-number source for ``dialect``."""
    fmt = "format" if dialect == "postgresql" else "printf"
    div = "(i / :devices)"
    dev = (
        "'dev-' || lpad((i % :devices)::text, 4, '0')"
        if dialect == "postgresql"
        else "printf('dev-%04d', i % :devices)"
    )
    ts = f"(:start + {div} * :step + (i % :devices) * :step / :devices)"
    seq = f"({div} + 1)"
    kind = f"CASE WHEN {seq} % 20 = 0 THEN 'result' ELSE 'telemetry' END"
    p50 = f"(10 + {seq} % 7)"
    payload = (
        f"CASE WHEN {seq} % 20 = 0 THEN {fmt}('{_RESULT}', {dev}, {seq}, {ts}) "
        f"ELSE {fmt}('{_TELEMETRY}', {dev}, {seq}, {ts}, {p50}, {p50} + 8) END"
    )
    select = f"{dev}, {seq}, {kind}, {ts}, {ts} + 0.2, {ts} + 0.3, {payload}"
    if dialect == "postgresql":
        return select, "generate_series(:lo, :hi - 1) AS g(i)"
    return (
        select,
        "(WITH RECURSIVE n(i) AS (SELECT :lo UNION ALL SELECT i + 1 FROM n WHERE i < :hi - 1) SELECT i FROM n)",
    )


def _bind(sql: str, values: dict[str, float]) -> str:
    for key, value in sorted(values.items(), key=lambda kv: -len(kv[0])):
        sql = sql.replace(f":{key}", repr(value) if isinstance(value, float) else str(value))
    return sql


def _side_tables(db, mark: str, devices: int, now: float) -> None:
    """One ``devices`` row (online) and one ``running`` row per device."""
    db.executemany(
        f"INSERT INTO devices (device_id, state, last_seen) VALUES ({mark}, 'online', {mark})",
        [(f"dev-{d:04d}", now) for d in range(devices)],
    )
    db.executemany(
        f"INSERT INTO running VALUES ({', '.join([mark] * 10)})",
        [(f"dev-{d:04d}", "arcface-int8", "0.1.0", "a" * 64, "b" * 16, "rpi4", "onnxruntime", "int8", now - 1e5, now)
         for d in range(devices)],
    )  # fmt: skip


def fill_postgres(pg: Postgres, args: argparse.Namespace, values: dict) -> None:
    import psycopg

    from fleet import open_store
    from fleet.store_postgres import SCHEMA_LOCK, add_partitions

    open_store(pg.url).close()  # the schema
    select, source = _row_sql("postgresql")
    with psycopg.connect(pg.url, autocommit=True) as conn:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
            add_partitions(conn, values["start"], values["now"])
        for lo in range(0, args.rows, CHUNK):
            sql = f"INSERT INTO messages SELECT {select} FROM {source}"
            conn.execute(_bind(sql, {**values, "lo": lo, "hi": min(lo + CHUNK, args.rows)}))
            say(f"postgresql: {min(lo + CHUNK, args.rows):,} rows")
        with conn.transaction(), conn.cursor() as cur:
            _side_tables(cur, "%s", args.devices, values["now"])
            cur.execute(
                "INSERT INTO latest SELECT DISTINCT ON (device_id, kind) device_id, kind, seq, payload, 0 "
                "FROM messages WHERE timestamp > %s ORDER BY device_id, kind, seq DESC",
                (values["now"] - 2 * 86400,),
            )
            cur.execute(
                "UPDATE latest SET reports = c.n FROM (SELECT device_id, kind, count(*) AS n FROM messages "
                "GROUP BY 1, 2) AS c WHERE latest.device_id = c.device_id AND latest.kind = c.kind"
            )
        conn.execute("ANALYZE")  # what autovacuum does after a bulk load


def fill_sqlite(path: Path, args: argparse.Namespace, values: dict) -> None:
    import sqlite3

    from fleet import open_store

    open_store(path).close()  # the schema; loaded without its index and triggers, which the next open remakes
    select, source = _row_sql("sqlite")
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.executescript(
            "DROP TRIGGER messages_added; DROP TRIGGER messages_removed; DROP TABLE latest; DROP INDEX "
            "messages_device_kind_time; DROP INDEX messages_kind_time; "
            "PRAGMA synchronous = OFF; PRAGMA cache_size = -400000;"
        )
        for lo in range(0, args.rows, CHUNK):
            db.execute("BEGIN")
            sql = f"INSERT INTO messages SELECT {select} FROM {source}"
            db.execute(_bind(sql, {**values, "lo": lo, "hi": min(lo + CHUNK, args.rows)}))
            db.execute("COMMIT")
            say(f"sqlite: {min(lo + CHUNK, args.rows):,} rows")
        db.execute("BEGIN")
        _side_tables(db, "?", args.devices, values["now"])
        db.execute("COMMIT")
    finally:
        db.close()
    open_store(path).close()  # the index, ``latest`` from the table, the triggers


def queries(store, now: float, devices: int) -> dict[str, Callable[[], object]]:
    """The calls to time: the fleet page's and a device page's (all rules on), each store call they make, the
    terminal table's, and ``latest``."""
    from edge.telemetry.schema import MessageKind
    from fleet.alerts import ROLLED_BACK, AlertRules
    from fleet.dashboard_page import MAX_FLEET_POINTS, MAX_POINTS, RECENT, fleet_data
    from fleet.device_page import ERROR_TASKS, RECOGNITION_TASKS, WINDOWS, device_data

    rules = AlertRules(latency_p90_ms=50.0, offline_min=10.0, temperature_c=80.0, rollback_min=60.0)
    dev = f"dev-{devices // 2:04d}"
    return {
        "fleet page: `fleet_data` (all of the fleet-wide calls below)": lambda: fleet_data(store, now=now, rules=rules),
        "device page: `device_data`, window 15 min": lambda: device_data(store, dev, WINDOWS["15m"], now, rules),
        "device page: `device_data`, window 7 d": lambda: device_data(store, dev, WINDOWS["7d"], now, rules),
        "`devices()`, every device": store.devices,
        "`running()`, every device": store.running,
        "`latest(bench)`, every device": lambda: store.latest(MessageKind.BENCH),
        "`recent_results(rolled back, last hour)`, fleet": lambda: store.recent_results(
            (ROLLED_BACK,), since=now - 3600
        ),
        f"`telemetry(last 15 min, limit {MAX_FLEET_POINTS:,})`, fleet": lambda: store.telemetry(
            since=now - 900, until=now + 300, limit=MAX_FLEET_POINTS
        ),
        "`models_in_use()`": store.models_in_use,
        "`state_counts()` and `rejected`": lambda: (store.state_counts(), store.rejected),
        "`device(id)`": lambda: store.device(dev),
        f"`telemetry(device, last 24 h, limit {MAX_POINTS})`": lambda: store.telemetry(
            dev, since=now - 86400, until=now + 300, limit=MAX_POINTS
        ),
        "`recent_results(face.identify, device)`": lambda: store.recent_results(RECOGNITION_TASKS, dev, limit=RECENT),
        "`recent_results(errors, device)` (none stored)": lambda: store.recent_results(ERROR_TASKS, dev, limit=RECENT),
        "`running_history(device)`": lambda: store.running_history(dev),
        "`devices(limit=50)` (terminal table)": lambda: store.devices(limit=50),
        "`latest(telemetry)`, every device": lambda: store.latest(MessageKind.TELEMETRY),
        "`latest(telemetry, device)`": lambda: store.latest(MessageKind.TELEMETRY, dev),
        "`latest(result, device, limit=10)`": lambda: store.latest(MessageKind.RESULT, dev, 10),
    }


def time_queries(open_fn: Callable[[], object], now: float, devices: int, runs: int) -> dict[str, tuple]:
    """``{query: (first ms, median ms of the other runs)}`` on a freshly opened store."""
    store = open_fn()
    try:
        out = {}
        for name, call in queries(store, now, devices).items():
            took = []
            for _ in range(runs):
                t0 = time.perf_counter()
                call()
                took.append((time.perf_counter() - t0) * 1000)
            out[name] = (took[0], statistics.median(took[1:]))
        return out
    finally:
        store.close()


def render(args: argparse.Namespace, command: str, results: dict[str, dict], fills: dict[str, float]) -> str:
    names = list(next(iter(results.values())))
    stores = list(results)
    lines = [
        "## Fleet store: the dashboard's queries at 10 million reports",
        "",
        f"`{command}` — {machine_line()} (1-minute load average; other work shared the machine). "
        f"{args.rows:,} reports from {args.devices:,} devices over {args.days} days (1 in 20 a result), "
        f"filled in {', '.join(f'{s} {fills[s]:.0f} s' for s in stores)}. ms per call: the first after the store "
        f"was reopened (PostgreSQL restarted) and the median of the next {args.runs - 1}; goal {GOAL_MS:.0f} ms.",
        "",
        "| query | " + " | ".join(f"{s} first | {s} median" for s in stores) + " |",
        "|---|" + "---|---|" * len(stores),
    ]
    for name in names:
        cells = []
        for s in stores:
            first, median = results[s][name]
            cells += [f"{first:.1f}", f"**{median:.1f}**" if median > GOAL_MS else f"{median:.1f}"]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    worst = {s: max(m for k, (_f, m) in results[s].items() if "page" not in k) for s in stores}
    lines += ["", "Slowest single query (median): " + ", ".join(f"{s} {v:.1f} ms" for s, v in worst.items()) + "."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", choices=["postgresql", "sqlite", "both"], default="both")
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--devices", type=int, default=1000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--runs", type=int, default=7, help="calls per query (the first is reported apart)")
    parser.add_argument("--write", action="store_true", help="replace the fleet-store section of the docs")
    args = parser.parse_args(argv)
    command = "python -m benchmarks run fleet_store " + " ".join(argv if argv is not None else sys.argv[1:])
    now = time.time()
    per_device = max(args.rows // args.devices, 1)
    step = args.days * 86400 / per_device
    values = {"start": now - args.days * 86400, "step": step, "devices": args.devices, "now": now}
    work = Path(tempfile.mkdtemp(prefix="fleet-store-"))
    results: dict[str, dict] = {}
    fills: dict[str, float] = {}
    from fleet import open_store

    try:
        if args.store in ("postgresql", "both"):
            pg = Postgres()
            try:
                pg.start()
                t0 = time.monotonic()
                fill_postgres(pg, args, values)
                fills["postgresql"] = time.monotonic() - t0
                pg.restart()
                results["postgresql"] = time_queries(lambda: open_store(pg.url), now, args.devices, args.runs)
                say(f"postgresql {results['postgresql']}")
            finally:
                pg.close()
        if args.store in ("sqlite", "both"):
            path = work / "fleet.db"
            t0 = time.monotonic()
            fill_sqlite(path, args, values)
            fills["sqlite"] = time.monotonic() - t0
            results["sqlite"] = time_queries(lambda: open_store(path), now, args.devices, args.runs)
            say(f"sqlite {results['sqlite']}")
        markdown = render(args, command.strip(), results, fills)
        print(markdown)
        if args.write:
            say(f"written to {write_section('fleet-store', markdown)}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0
