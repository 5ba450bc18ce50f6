"""A durable SQLite outbox: every report is on disk before it is sent, and leaves only when acknowledged.

Design:
- One row per message (``seq`` is the primary key, ``kind`` and the JSON ``payload``). The sequence
  number is allocated and the row written in the same transaction, so a report either exists with its
  number or never existed: a SIGKILL or power cut can't leave a gap or reuse a number.
- WAL journal with ``synchronous=FULL``: a committed report survives a SIGKILL and a power cut.
- Bounded: at most ``capacity`` rows. When a new report would exceed it, the **oldest** rows are deleted
  and counted in ``dropped`` (kept in the database, so it survives restarts). Oldest-first because on a
  device that has been offline for long, the recent figures matter most and the consumer can see the gap
  (``dropped`` is published in every status message).
- An outbox belongs to one device id; opening it with another id is an error (sequence numbers are per
  device).
"""

from __future__ import annotations

import dataclasses
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from edge.errors import TelemetryError
from edge.telemetry.schema import Message, MessageKind, check_name, kind_of, to_json

#: Default bound on stored, unacknowledged reports (about 3 MB of telemetry).
DEFAULT_CAPACITY = 10_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS outbox (
    seq INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,
    payload TEXT NOT NULL,
    created REAL NOT NULL
);
"""


@dataclass(frozen=True)
class OutboxRow:
    """One stored, not yet acknowledged message."""

    seq: int
    kind: MessageKind
    payload: str


class Outbox:
    """Durable, bounded store of reports waiting for the broker's acknowledgement.

    Thread-safe: the runner adds from its thread while the MQTT worker reads and removes.

    Args:
        path: SQLite file; created with its parent directory if missing.
        device_id: the device whose reports this outbox numbers.
        capacity: most rows kept; beyond it the oldest are dropped and counted.

    Raises:
        TelemetryError: if the file cannot be opened as an outbox, belongs to another device, or the
            capacity is not a positive integer.
    """

    def __init__(self, path: Path, device_id: str, capacity: int = DEFAULT_CAPACITY) -> None:
        check_name("device_id", device_id)
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise TelemetryError(f"outbox capacity = {capacity!r}; expected an integer >= 1")
        self.path = Path(path)
        self.device_id = device_id
        self.capacity = capacity
        self._lock = threading.Lock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=10)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(_SCHEMA)
            self._claim_device()
        except sqlite3.Error as exc:
            raise TelemetryError(f"outbox {self.path}: cannot open as an SQLite outbox ({exc})") from exc
        except OSError as exc:
            raise TelemetryError(f"outbox {self.path}: cannot create it ({exc})") from exc

    def _claim_device(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            row = self._db.execute("SELECT value FROM meta WHERE key = 'device_id'").fetchone()
            if row is None:
                self._db.executemany(
                    "INSERT INTO meta (key, value) VALUES (?, ?)",
                    [("device_id", self.device_id), ("next_seq", "1"), ("dropped", "0")],
                )
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        if row is not None and row[0] != self.device_id:
            self._db.close()
            raise TelemetryError(
                f"outbox {self.path} belongs to device_id {row[0]!r}, not {self.device_id!r}; "
                "use one outbox file per device"
            )

    def add(self, message: Message) -> Message:
        """Store a report durably, allocating its sequence number.

        ``device_id``, ``seq`` and (if 0) ``timestamp`` of ``message`` are filled in.

        Args:
            message: a report (Telemetry, BenchReport or Result); its ``seq`` is ignored.

        Returns:
            The stored message with its device id, sequence number and timestamp.

        Raises:
            TelemetryError: if the message is a Status (states are not queued), names another device,
                can't be serialised, or the database can't be written.
        """
        kind = kind_of(message)
        if kind is MessageKind.STATUS:
            raise TelemetryError("status messages are not queued in the outbox; the client publishes them")
        if message.device_id not in ("", self.device_id):
            raise TelemetryError(
                f"{kind.value} message names device_id {message.device_id!r}; this outbox is for {self.device_id!r}"
            )
        with self._lock:
            return self._add_locked(message, kind)

    def _add_locked(self, message: Message, kind: MessageKind) -> Message:
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                seq = self._meta("next_seq")
                stored = dataclasses.replace(
                    message,
                    device_id=self.device_id,
                    seq=seq,
                    timestamp=message.timestamp or time.time(),
                )
                self._db.execute(
                    "INSERT INTO outbox (seq, kind, payload, created) VALUES (?, ?, ?, ?)",
                    (seq, kind.value, to_json(stored), time.time()),
                )
                self._set_meta("next_seq", seq + 1)
                self._drop_overflow()
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise TelemetryError(f"outbox {self.path}: cannot store a {kind.value} report ({exc})") from exc
        return stored

    def _drop_overflow(self) -> None:
        (count,) = self._db.execute("SELECT COUNT(*) FROM outbox").fetchone()
        excess = count - self.capacity
        if excess > 0:
            self._db.execute("DELETE FROM outbox WHERE seq IN (SELECT seq FROM outbox ORDER BY seq LIMIT ?)", (excess,))
            self._set_meta("dropped", self._meta("dropped") + excess)

    def _meta(self, key: str) -> int:
        return int(self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()[0])

    def _set_meta(self, key: str, value: int) -> None:
        self._db.execute("UPDATE meta SET value = ? WHERE key = ?", (str(value), key))

    def pending(self, after: int = 0, limit: int = 100) -> list[OutboxRow]:
        """Return up to ``limit`` stored messages with ``seq > after``, oldest first."""
        with self._lock:
            rows = self._query(
                "SELECT seq, kind, payload FROM outbox WHERE seq > ? ORDER BY seq LIMIT ?", (after, limit)
            )
        return [OutboxRow(seq, MessageKind(kind), payload) for seq, kind, payload in rows]

    def remove(self, seqs: list[int] | tuple[int, ...] | set[int]) -> None:
        """Delete acknowledged messages (unknown numbers are ignored) in one transaction.

        Raises:
            TelemetryError: if the database can't be written.
        """
        if not seqs:
            return
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                self._db.executemany("DELETE FROM outbox WHERE seq = ?", [(int(s),) for s in seqs])
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise TelemetryError(f"outbox {self.path}: cannot delete acknowledged rows ({exc})") from exc

    def count(self) -> int:
        """Number of messages waiting for acknowledgement."""
        with self._lock:
            return int(self._query("SELECT COUNT(*) FROM outbox", ())[0][0])

    @property
    def dropped(self) -> int:
        """Messages discarded so far because the outbox was full (oldest first), across restarts."""
        with self._lock:
            return int(self._query("SELECT value FROM meta WHERE key = 'dropped'", ())[0][0])

    @property
    def last_seq(self) -> int:
        """Highest sequence number allocated so far (0 before the first report)."""
        with self._lock:
            return int(self._query("SELECT value FROM meta WHERE key = 'next_seq'", ())[0][0]) - 1

    def _query(self, sql: str, params: tuple) -> list[tuple]:
        try:
            return self._db.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise TelemetryError(f"outbox {self.path}: cannot read ({exc})") from exc

    def close(self) -> None:
        """Close the database (idempotent)."""
        with self._lock:
            self._db.close()

    def __enter__(self) -> Outbox:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
