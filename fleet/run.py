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

from fleet.alerts import AlertPublisher, AlertRules, evaluate
from fleet.ingest import BrokerUnreachable, Monitor, MonitorConfig
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


class TableView:
    """Shows the fleet table at each refresh: redrawn in place on a terminal, a summary line when piped.

    On a terminal the previous drawing is overwritten (cursor up over its lines, clear to the end of the
    screen), so the scrollback keeps one table. Piped (a log, a file), the table would be reprinted every
    refresh: each refresh writes one line of counts instead, and ``final`` the whole table once.

    Args:
        write: takes text without its final newline (e.g. ``print``).
        tty: whether the output is a terminal.
    """

    def __init__(self, write: Callable[[str], None], tty: bool) -> None:
        self.write, self.tty = write, tty
        self._height = 0

    def show(self, text: str, summary: str) -> None:
        """Draw ``text`` (the table) over the last drawing on a terminal; else write ``summary``."""
        if not self.tty:
            self.write(summary)
            return
        up = f"\033[{self._height}F\033[J" if self._height else ""
        self.write(up + text)
        self._height = text.count("\n") + 1

    def message(self, text: str) -> None:
        """A line that stays (a notice, an error): written below the drawing, which starts again under it."""
        self.write(text)
        self._height = 0

    def final(self, text: str) -> None:
        """The last table, in full either way."""
        if self.tty:
            self.show(text, text)
        else:
            self.write(text)


def summary_line(store: FleetStore, committed: int, now: float | None = None) -> str:
    """One line of counts for a piped watch: time, devices (online), messages committed by this monitor,
    duplicates and rejected among them."""
    counts = store.state_counts()
    stamp = time.strftime("%H:%M:%S", time.localtime(time.time() if now is None else now))
    return (
        f"{stamp} {counts['devices']} device(s), {counts['online']} online; {committed} message(s) committed, "
        f"{store.duplicates} duplicate(s), {store.rejected} rejected"
    )


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
    tty: bool = False,
    rules: AlertRules | None = None,
) -> MonitorSummary:
    """Watch the fleet, print the table every ``refresh_s``, then export CSV and PNG into ``out_dir``.

    Args:
        config: broker, store and prefix.
        duration: seconds to watch; None watches until Ctrl-C or SIGTERM (either ends the watch normally).
        out_dir: where ``telemetry.csv`` and ``telemetry.png`` go (the newest ``EXPORT_ROWS`` reports).
        print_fn: called with each text to show (without its final newline).
        refresh_s: seconds between tables.
        web: where and how to serve the fleet dashboard while watching, or None.
        table: show the table at each refresh (it reads the fleet from the store) and at the end.
        tty: the output is a terminal: the table is redrawn in place (``TableView``); else one line of counts
            per refresh and the table once at the end.
        rules: alert rules evaluated at each refresh; changes are published retained (``fleet.alerts``).

    Returns:
        Counts and the paths written.

    Raises:
        BrokerUnreachable: the broker was never reached during the watch (the export is written first).
        TelemetryError: bad credentials / TLS failure, a store that can't be opened, or files that can't be
            written.
        InputError: the dashboard's port can't be bound.
    """
    out_dir = Path(out_dir)
    view = TableView(print_fn, tty)
    with Monitor(config) as monitor:
        with _dashboard(monitor.store, web, view.message):
            if not monitor.start(min(config.broker.connect_timeout_s, duration or config.broker.connect_timeout_s)):
                view.message(f"waiting for broker {config.broker.address}: {monitor.last_error or 'not reachable yet'}")

            publisher = AlertPublisher(config.prefix)

            def step() -> None:
                try:
                    if rules is not None and rules != AlertRules():
                        found = evaluate(monitor.store, rules, everyone=True)
                        for topic, payload in publisher.changes(found, time.time()):
                            monitor.publish(topic, payload)
                    if table:
                        view.show(fleet_table(monitor.store), summary_line(monitor.store, monitor.committed))
                except StoreUnavailable as exc:  # e.g. PostgreSQL restarting: ingest retries, so does the table
                    view.message(f"fleet store unavailable, retrying: {exc}")
                monitor.check()

            _watch(duration, step, refresh_s)
        monitor.stop()  # commit what arrived before the signal: the table and the export must include it
        if table:
            view.final(fleet_table(monitor.store))
        summary = _export(monitor, out_dir)
        if not monitor.ever_subscribed:
            raise BrokerUnreachable(
                f"monitor: broker {config.broker.address} was never reached ({monitor.last_error or 'no answer'}); "
                f"wrote {summary.csv_path} and {summary.png_path} from the store as it was"
            )
        return summary


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
