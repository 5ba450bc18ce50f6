"""``edge-deploy monitor`` as a library call: watch, print the fleet table, serve the dashboard, export."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fleet.ingest import Monitor, MonitorConfig
from fleet.records import DeviceRow
from fleet.store import FleetStore, StoreUnavailable

if TYPE_CHECKING:
    from fleet.dashboard import DashboardConfig

#: Newest reports written to telemetry.csv, and drawn in telemetry.png, at the end of a watch: the export
#: must end within seconds of a SIGTERM (a service manager kills what takes longer), whatever the store holds.
EXPORT_ROWS = 50_000
PLOT_ROWS = 20_000
#: Devices listed in the text table (the first by id; the dashboard pages through all of them).
TABLE_ROWS = 50


@dataclass(frozen=True)
class MonitorSummary:
    """What ``run_monitor`` saw and wrote."""

    devices: int
    reports: int
    duplicates: int
    rejected: int
    csv_path: Path
    png_path: Path
    exported: int = 0


def format_table(rows: list[DeviceRow], now: float | None = None) -> str:
    """Render the fleet table as fixed-width text (device, state, p50, p90, fps, temp, last seen)."""
    now = time.time() if now is None else now
    head = ("DEVICE", "STATE", "P50 ms", "P90 ms", "FPS", "TEMP C", "LAST SEEN", "REPORTS", "DROPPED")
    lines = [head]
    for r in rows:
        lines.append(
            (
                r.device_id,
                state_text(r.online),
                _num(r.latency_p50_ms),
                _num(r.latency_p90_ms),
                _num(r.fps),
                _num(r.temperature_c),
                f"{max(now - r.last_seen, 0):.0f}s ago",
                str(r.reports),
                str(r.dropped),
            )  # fmt: skip
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in lines)


def fleet_table(store: FleetStore) -> str:
    """``format_table`` of the first ``TABLE_ROWS`` devices, and a line counting the others."""
    rows = store.devices(limit=TABLE_ROWS)
    total = store.state_counts()["devices"]
    more = f"\n... and {total - len(rows)} more device(s): see the dashboard (--web) or telemetry.csv"
    return format_table(rows) + (more if total > len(rows) else "")


def state_text(online: bool | None) -> str:
    """A device row's state as a word: online, offline, or ``?`` when no status was seen."""
    return {None: "?", True: "online", False: "offline"}[online]


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


@contextmanager
def _stop_signals() -> Iterator[None]:
    """SIGINT (Ctrl-C) and SIGTERM (``kill``, a service manager) both end the watch as Ctrl-C does.

    Installed explicitly because a process started in the background by a non-interactive shell inherits
    SIGINT as *ignored*, and Python then never raises KeyboardInterrupt: such a monitor could only be
    SIGKILLed, losing its last commit and its export. Only the main thread can install handlers; elsewhere
    the process's own handling stays as it is.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _watch(duration: float | None, step: Callable[[], None], refresh_s: float) -> None:
    """Call ``step`` every ``refresh_s`` until ``duration`` passed (None: until Ctrl-C or SIGTERM)."""
    deadline = None if duration is None else time.monotonic() + duration
    try:
        with _stop_signals():
            while deadline is None or time.monotonic() < deadline:
                step()
                left = refresh_s if deadline is None else min(refresh_s, deadline - time.monotonic())
                time.sleep(max(left, 0.0))
    except KeyboardInterrupt:
        pass  # Ctrl-C or SIGTERM is how an open-ended watch ends; export what we have


def run_monitor(
    config: MonitorConfig,
    duration: float | None,
    out_dir: Path,
    print_fn=print,
    refresh_s: float = 2.0,
    web: DashboardConfig | None = None,
    table: bool = True,
) -> MonitorSummary:
    """Watch the fleet, print the table every ``refresh_s``, then export CSV and PNG into ``out_dir``.

    Args:
        config: broker, store and prefix.
        duration: seconds to watch; None watches until Ctrl-C or SIGTERM (either ends the watch normally).
        out_dir: where ``telemetry.csv`` and ``telemetry.png`` go (the newest ``EXPORT_ROWS`` reports).
        print_fn: called with the whole table text at each refresh (the CLI may clear the screen first).
        refresh_s: seconds between tables.
        web: where and how to serve the fleet dashboard while watching, or None.
        table: build and print the table at each refresh (it reads the whole fleet from the store).

    Returns:
        Counts and the paths written.

    Raises:
        TelemetryError: bad credentials / TLS failure, a store that can't be opened, or files that can't be
            written.
        InputError: the dashboard's port can't be bound.
    """
    out_dir = Path(out_dir)
    with Monitor(config) as monitor:
        with _dashboard(monitor.store, web, print_fn):
            if not monitor.start(min(config.broker.connect_timeout_s, duration or config.broker.connect_timeout_s)):
                print_fn(f"waiting for broker {config.broker.address}: {monitor.last_error or 'not reachable yet'}")

            def step() -> None:
                try:
                    if table:
                        print_fn(fleet_table(monitor.store))
                except StoreUnavailable as exc:  # e.g. PostgreSQL restarting: ingest retries, so does the table
                    print_fn(f"fleet store unavailable, retrying: {exc}")
                monitor.check()

            _watch(duration, step, refresh_s)
        monitor.stop()  # commit what arrived before the signal: the table and the export must include it
        if table:
            print_fn(fleet_table(monitor.store))
        return _export(monitor, out_dir)


def serve_dashboard(store: FleetStore, web: DashboardConfig, duration: float | None, print_fn=print) -> None:
    """Serve the dashboard over ``store`` without ingesting (another monitor writes the store).

    Raises:
        InputError: the port can't be bound.
    """
    with _dashboard(store, web, print_fn):
        _watch(duration, lambda: None, 1.0)


def _dashboard(store: FleetStore, web: DashboardConfig | None, print_fn):
    from contextlib import nullcontext

    if web is None:
        return nullcontext()
    from fleet.dashboard import Dashboard, is_loopback

    board = Dashboard(store, web).start()
    if is_loopback(web.host):
        print_fn(f"fleet dashboard on {board.url} (loopback only, {'login required' if web.token else 'no login'})")
    else:
        names = ", ".join(sorted(web.allowed_hosts))
        print_fn(f"fleet dashboard on {board.url}: reachable from the network; login required; Host names: {names}")
    return board


def _export(monitor: Monitor, out_dir: Path) -> MonitorSummary:
    """Write telemetry.csv and telemetry.png from the newest reports (bounded: see ``EXPORT_ROWS``)."""
    from edge.telemetry.plot import plot_telemetry

    store = monitor.store
    csv_path = out_dir / "telemetry.csv"
    exported = store.export_csv(csv_path, limit=EXPORT_ROWS)
    png_path = plot_telemetry(store.telemetry(limit=PLOT_ROWS), out_dir / "telemetry.png")
    counts = store.state_counts()
    return MonitorSummary(
        counts["devices"], store.count(), store.duplicates, store.rejected, csv_path, png_path, exported
    )
