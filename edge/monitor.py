"""The fleet monitor: subscribe to ``<prefix>/#``, drop duplicates, store in SQLite, show and export.

Delivery is at least once (QoS 1, and devices resend unacknowledged reports after a reconnect), so the
store keys reports by (device_id, seq) and ignores a second copy. A message is stored before paho
acknowledges it (paho sends PUBACK after ``on_message`` returns), so a monitor crash loses nothing the
broker still holds. The monitor uses a persistent session (fixed client id, clean_session False): while
it is away the broker queues QoS 1 reports for it, and with broker persistence on, across broker restarts.

Status messages are states, not reports: the newest one to arrive (retained ``online``/``offline``) says
whether a device is online. Malformed messages are counted and acknowledged (resending can't fix them).
"""

from __future__ import annotations

import csv
import json
import logging
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from edge.errors import TelemetryError
from edge.telemetry.link import BrokerConfig, Link, LinkHooks
from edge.telemetry.schema import DeviceState, MessageKind, check_prefix, from_json, kind_of, parse_topic

_SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    device_id TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL, timestamp REAL NOT NULL,
    received REAL NOT NULL, payload TEXT NOT NULL, PRIMARY KEY (device_id, seq)
);
CREATE TABLE IF NOT EXISTS devices (
    device_id TEXT PRIMARY KEY, state TEXT, status TEXT, last_seen REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO counters VALUES ('duplicates', 0), ('rejected', 0);
"""

CSV_COLUMNS = (
    "device_id", "seq", "timestamp", "latency_p50_ms", "latency_p90_ms", "fps", "temperature_c", "window_s",
)  # fmt: skip

log = logging.getLogger("edge.monitor")


@dataclass(frozen=True)
class MonitorConfig:
    """Where the monitor listens and stores.

    Attributes:
        broker: the broker to subscribe to.
        db_path: SQLite file of received messages.
        prefix: topic prefix the devices publish under.
        client_id: MQTT client id; keep it fixed so the broker keeps the session between runs.
        persistent_session: let the broker queue reports while the monitor is away.
    """

    broker: BrokerConfig
    db_path: Path
    prefix: str = "edge-deploy"
    client_id: str = "edge-deploy-monitor"
    persistent_session: bool = True

    def __post_init__(self) -> None:
        check_prefix(self.prefix)


@dataclass(frozen=True)
class DeviceRow:
    """One line of the fleet table. Figures come from the device's newest telemetry report."""

    device_id: str
    online: bool | None
    latency_p50_ms: float | None
    latency_p90_ms: float | None
    fps: float | None
    temperature_c: float | None
    last_seen: float
    reports: int
    dropped: int


class MonitorStore:
    """SQLite store of received messages with (device_id, seq) deduplication. Thread-safe.

    Args:
        path: database file (created with its directory).
        prefix: topic prefix, to check the topics of incoming messages.

    Raises:
        TelemetryError: if the database can't be opened.
    """

    def __init__(self, path: Path, prefix: str = "edge-deploy") -> None:
        self.path = Path(path)
        self.prefix = check_prefix(prefix)
        self.last_rejection: str | None = None
        self._lock = threading.Lock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=10)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.executescript(_SCHEMA)
        except (sqlite3.Error, OSError) as exc:
            raise TelemetryError(f"monitor database {self.path}: cannot open ({exc})") from exc

    def handle(self, topic: str, payload: bytes | str, received: float | None = None, retained: bool = False) -> str:
        """Validate and store one incoming message.

        Args:
            topic: the MQTT topic it came on.
            payload: the message JSON.
            received: arrival time (Unix seconds), now if None.
            retained: the broker replayed a retained message on subscribe; it doesn't show the device
                was seen now, so "last seen" takes the message's own timestamp instead.

        Returns:
            ``"stored"``, ``"duplicate"``, ``"status"`` or ``"rejected"`` (see ``last_rejection``).
        """
        received = time.time() if received is None else received
        try:
            device_id, kind = parse_topic(self.prefix, topic)
            message = from_json(payload, source=f"topic {topic}")
            if kind_of(message) is not kind or message.device_id != device_id:
                raise TelemetryError(
                    f"topic {topic}: carries a {kind_of(message).value} message from "
                    f"{message.device_id!r}; expected a {kind.value} message from {device_id!r}"
                )
        except TelemetryError as exc:
            self.count_rejected(str(exc))
            return "rejected"
        text = payload.decode() if isinstance(payload, bytes) else payload
        with self._lock, self._db:  # one transaction: device row and report together
            self._db.execute("BEGIN")
            self._touch(device_id, message.timestamp if retained else received)
            if kind is MessageKind.STATUS:
                self._db.execute(
                    "UPDATE devices SET state = ?, status = ? WHERE device_id = ?",
                    (message.state.value, text, device_id),
                )
                return "status"
            cur = self._db.execute(
                "INSERT OR IGNORE INTO messages VALUES (?, ?, ?, ?, ?, ?)",
                (device_id, message.seq, kind.value, message.timestamp, received, text),
            )
            if cur.rowcount == 0:
                self._bump("duplicates")
                return "duplicate"
            return "stored"

    def count_rejected(self, reason: str) -> None:
        """Count a message that was not stored, and keep why (``last_rejection``)."""
        self.last_rejection = reason
        with self._lock:
            self._bump("rejected")

    def _touch(self, device_id: str, received: float) -> None:
        self._db.execute(
            "INSERT INTO devices (device_id, last_seen) VALUES (?, ?) ON CONFLICT(device_id) "
            "DO UPDATE SET last_seen = MAX(last_seen, excluded.last_seen)",
            (device_id, received),
        )

    def _bump(self, name: str) -> None:
        self._db.execute("UPDATE counters SET value = value + 1 WHERE name = ?", (name,))

    def _rows(self, sql: str, params: tuple = ()) -> list[tuple]:
        with self._lock:
            return self._db.execute(sql, params).fetchall()

    @property
    def duplicates(self) -> int:
        """Copies of already stored reports received and dropped (since the database was created)."""
        return int(self._rows("SELECT value FROM counters WHERE name = 'duplicates'")[0][0])

    @property
    def rejected(self) -> int:
        """Malformed or misaddressed messages received (since the database was created)."""
        return int(self._rows("SELECT value FROM counters WHERE name = 'rejected'")[0][0])

    def count(self, device_id: str | None = None) -> int:
        """Number of distinct reports stored, for one device or all."""
        if device_id is None:
            return int(self._rows("SELECT COUNT(*) FROM messages")[0][0])
        return int(self._rows("SELECT COUNT(*) FROM messages WHERE device_id = ?", (device_id,))[0][0])

    def seqs(self, device_id: str) -> list[int]:
        """Sequence numbers stored for a device, ascending."""
        return [r[0] for r in self._rows("SELECT seq FROM messages WHERE device_id = ? ORDER BY seq", (device_id,))]

    def devices(self) -> list[DeviceRow]:
        """The fleet table: one row per device seen, sorted by device id."""
        rows = []
        for device_id, state, status, last_seen in self._rows(
            "SELECT device_id, state, status, last_seen FROM devices ORDER BY device_id"
        ):
            latest = self._rows(
                "SELECT payload FROM messages WHERE device_id = ? AND kind = ? ORDER BY seq DESC LIMIT 1",
                (device_id, MessageKind.TELEMETRY.value),
            )
            t = json.loads(latest[0][0]) if latest else {}
            rows.append(
                DeviceRow(
                    device_id=device_id,
                    online=None if state is None else state == DeviceState.ONLINE.value,
                    latency_p50_ms=t.get("latency_p50_ms"),
                    latency_p90_ms=t.get("latency_p90_ms"),
                    fps=t.get("fps"),
                    temperature_c=t.get("temperature_c"),
                    last_seen=last_seen,
                    reports=self.count(device_id),
                    dropped=json.loads(status)["dropped"] if status else 0,
                )
            )
        return rows

    def telemetry(self) -> list[dict]:
        """Every stored telemetry report as a dict of ``CSV_COLUMNS``, by device then seq."""
        out = []
        for (payload,) in self._rows(
            "SELECT payload FROM messages WHERE kind = ? ORDER BY device_id, seq", (MessageKind.TELEMETRY.value,)
        ):
            body = json.loads(payload)
            out.append({k: body.get(k) for k in CSV_COLUMNS})
        return out

    def export_csv(self, path: Path) -> int:
        """Write every telemetry report as CSV (``CSV_COLUMNS``); return the number of data rows.

        Raises:
            TelemetryError: if the file can't be written.
        """
        rows = self.telemetry()
        try:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            with open(path, "w", newline="", encoding="utf-8") as fh:
                writer = csv.DictWriter(fh, fieldnames=CSV_COLUMNS)
                writer.writeheader()
                writer.writerows(rows)
        except OSError as exc:
            raise TelemetryError(f"cannot write CSV {path}: {exc}") from exc
        return len(rows)

    def close(self) -> None:
        """Close the database."""
        with self._lock:
            self._db.close()


class Monitor(LinkHooks):
    """Subscribes to a fleet's topics and keeps a deduplicated SQLite record. Call ``close`` when done.

    Args:
        config: broker, database and prefix.

    Raises:
        TelemetryError: if the database can't be opened.
    """

    def __init__(self, config: MonitorConfig) -> None:
        self.config = config
        self.store = MonitorStore(config.db_path, config.prefix)
        self._subscribed = threading.Event()
        self._link = Link(
            config.broker, config.client_id, self, clean_session=not config.persistent_session, name="monitor"
        )

    def start(self, timeout: float = 10.0) -> bool:
        """Connect and subscribe, waiting at most ``timeout`` seconds (the link keeps retrying after).

        Returns:
            True if subscribed.

        Raises:
            TelemetryError: if the broker refused us for good (e.g. bad username/password).
        """
        deadline = time.monotonic() + timeout
        self._link.start()
        if not self._link.wait_connected(timeout):
            return False
        return self._subscribed.wait(max(deadline - time.monotonic(), 0.0))

    @property
    def connected(self) -> bool:
        """Whether the monitor is connected and subscribed."""
        return self._subscribed.is_set()

    @property
    def last_error(self) -> str | None:
        """The last connection problem, if any."""
        return self._link.last_error

    def check(self) -> None:
        """Raise the link's fatal error, if it stopped on one."""
        if self._link.fatal is not None:
            raise self._link.fatal

    def wait_for(self, device_id: str, count: int, timeout: float) -> bool:
        """Wait until ``count`` distinct reports of ``device_id`` are stored, or ``timeout`` passed."""
        deadline = time.monotonic() + timeout
        while self.store.count(device_id) < count:
            if time.monotonic() >= deadline or not self._link.running:
                return False
            time.sleep(0.05)
        return True

    def export_png(self, path: Path) -> Path:
        """Plot latency p50/p90, fps and temperature per device over time into a PNG (drawn with cv2).

        Raises:
            TelemetryError: if the file can't be written.
            MissingDependencyError: if OpenCV is not installed.
        """
        from edge.telemetry.plot import plot_telemetry

        return plot_telemetry(self.store.telemetry(), Path(path))

    def close(self, timeout: float = 5.0) -> None:
        """Disconnect (the broker keeps the persistent session) and close the database."""
        self._link.stop(timeout)
        self.store.close()
        self.check()

    def __enter__(self) -> Monitor:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- link hooks (link thread) -------------------------------------------------------------------

    def configure(self, client: object) -> None:  # noqa: D102
        client.on_message = self._on_message
        client.on_subscribe = self._on_subscribe

    def on_connected(self, client: object) -> None:  # noqa: D102
        client.subscribe(f"{self.config.prefix}/#", qos=1)

    def _on_subscribe(self, client, userdata, mid, reason_codes, properties) -> None:
        if any(rc.is_failure for rc in reason_codes):
            self._link.last_error = f"broker {self.config.broker.address} refused the subscription {reason_codes}"
        else:
            self._subscribed.set()

    def _on_message(self, client, userdata, message) -> None:
        # paho acknowledges a QoS 1 message only after this returns: an exception here would leave a poison
        # message in the persistent session, redelivered to every restart. ``handle`` rejects hostile
        # payloads (edge.payload's bounds); anything still unexpected is logged and counted, never raised.
        try:
            self.store.handle(message.topic, message.payload, retained=bool(message.retain))
        except Exception as exc:  # noqa: BLE001 - the boundary of a network callback
            log.exception("monitor: message on %r not stored: %s", message.topic, exc)
            self.store.count_rejected(f"topic {message.topic}: not stored ({type(exc).__name__}: {exc})")

    def on_lost(self) -> None:  # noqa: D102
        self._subscribed.clear()


@dataclass(frozen=True)
class MonitorSummary:
    """What ``run_monitor`` saw and wrote."""

    devices: int
    reports: int
    duplicates: int
    rejected: int
    csv_path: Path
    png_path: Path


def format_table(rows: list[DeviceRow], now: float | None = None) -> str:
    """Render the fleet table as fixed-width text (device, state, p50, p90, fps, temp, last seen)."""
    now = time.time() if now is None else now
    head = ("DEVICE", "STATE", "P50 ms", "P90 ms", "FPS", "TEMP C", "LAST SEEN", "REPORTS", "DROPPED")
    lines = [head]
    for r in rows:
        state = {None: "?", True: "online", False: "offline"}[r.online]
        lines.append(
            (
                r.device_id,
                state,
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


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def run_monitor(
    config: MonitorConfig,
    duration: float | None,
    out_dir: Path,
    print_fn=print,
    refresh_s: float = 2.0,
) -> MonitorSummary:
    """Watch the fleet, print the table every ``refresh_s``, then export CSV and PNG into ``out_dir``.

    Args:
        config: broker, database and prefix.
        duration: seconds to watch; None watches until Ctrl-C (KeyboardInterrupt ends the watch normally).
        out_dir: where ``telemetry.csv`` and ``telemetry.png`` go.
        print_fn: called with the whole table text at each refresh (the CLI may clear the screen first).
        refresh_s: seconds between tables.

    Returns:
        Counts and the paths written.

    Raises:
        TelemetryError: bad credentials / TLS failure, or files that can't be written.
    """
    out_dir = Path(out_dir)
    with Monitor(config) as monitor:
        if not monitor.start(min(config.broker.connect_timeout_s, duration or config.broker.connect_timeout_s)):
            print_fn(f"waiting for broker {config.broker.address}: {monitor.last_error or 'not reachable yet'}")
        deadline = None if duration is None else time.monotonic() + duration
        try:
            while deadline is None or time.monotonic() < deadline:
                print_fn(format_table(monitor.store.devices()))
                left = refresh_s if deadline is None else min(refresh_s, deadline - time.monotonic())
                time.sleep(max(left, 0.0))
                monitor.check()
        except KeyboardInterrupt:
            pass  # Ctrl-C is how an open-ended watch ends; export what we have
        print_fn(format_table(monitor.store.devices()))
        csv_path = out_dir / "telemetry.csv"
        monitor.store.export_csv(csv_path)
        png_path = monitor.export_png(out_dir / "telemetry.png")
        store = monitor.store
        return MonitorSummary(len(store.devices()), store.count(), store.duplicates, store.rejected, csv_path, png_path)
