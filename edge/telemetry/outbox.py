"""A durable SQLite outbox: every report is on disk before it is sent, and leaves only when acknowledged.

Design:
- One row per message (``seq`` is the primary key, ``kind`` and the JSON ``payload``).
- **Group commit.** ``add`` checks the report's fields, numbers it and queues it in memory; it never waits
  for the disk. A writer thread serialises and commits whatever has queued since its last commit in one
  transaction (one fsync for many reports), at most every ``commit_interval_s`` seconds. Serialising off
  the caller's thread keeps the inference thread's share to a few checks: right after an inference has
  swept the CPU caches, every line of Python there is slow (benchmarks/telemetry_overhead.py measures
  what ``report()`` costs per call). A result whose nested ``data`` turns out not to
  be JSON (NaN, a numpy scalar) is stored under its number as an error result, and logged. The link only
  ever reads committed rows, so nothing is sent before it is on disk. ``add(..., wait=True)``,
  ``wait_stored`` and ``flush`` wait for the commit when a caller needs the report on disk before it goes
  on.
- WAL journal with ``synchronous=FULL``: a committed report survives a SIGKILL and a power cut. A report
  still queued when the process is killed is lost with its number, which the next start allocates again;
  no consumer can have seen it (it was never committed, so never sent). Committed numbers have no gaps.
- **Receipts.** ``add(message, key=...)`` stores ``key`` in the same transaction as the report;
  ``has_key`` then answers "was this already reported?" across restarts. The daemon keys each frame's
  result by its source and frame, which makes a crash lose nothing and repeat nothing without a second
  database write per frame.
- Bounded: at most ``capacity`` rows. When a commit would exceed it, the **oldest** rows are deleted and
  counted in ``dropped`` (kept in the database, so it survives restarts). Oldest-first because on a device
  that has been offline for long, the recent figures matter most and the consumer can see the gap
  (``dropped`` is published in every status message). The in-memory queue is bounded by ``capacity`` too:
  ``add`` waits (up to ``QUEUE_WAIT_S``) for the writer rather than hold more.
- An outbox belongs to one device id; opening it with another id is an error (sequence numbers are per
  device).
"""

from __future__ import annotations

import dataclasses
import logging
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from edge.errors import TelemetryError
from edge.payload import PayloadError, check_text
from edge.sqlitedb import open_durable
from edge.telemetry.schema import (
    Message,
    MessageKind,
    Result,
    body_json,
    check_fields,
    check_name,
    kind_of,
    stamped,
    to_json,
)

log = logging.getLogger("edge.telemetry")

#: Default bound on stored, unacknowledged reports (about 3 MB of telemetry).
DEFAULT_CAPACITY = 10_000
#: Default least time between two commits of the writer thread: at most 5 fsyncs a second, kind to an SD
#: card and to the CPU (each WAL commit and its fsync cost CPU time, the kernel's included); a report is on
#: disk within about this long after ``add``.
DEFAULT_COMMIT_INTERVAL_S = 0.2
#: How long ``add`` waits for the writer when ``capacity`` reports are already queued in memory.
QUEUE_WAIT_S = 30.0
#: After a failed commit the writer tries again this much later (the reports stay queued meanwhile).
RETRY_S = 1.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS outbox (
    seq INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,
    payload TEXT NOT NULL,
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS receipts (key TEXT PRIMARY KEY, seq INTEGER NOT NULL);
"""


@dataclass(frozen=True)
class OutboxRow:
    """One stored, not yet acknowledged message."""

    seq: int
    kind: MessageKind
    payload: str


@dataclass(frozen=True)
class _Queued:
    message: Message
    body: dict  # checked by ``add`` (its "type" is the kind); JSON-encoded by the writer thread
    created: float
    key: str | None

    @property
    def seq(self) -> int:
        return self.message.seq


def _check_key(key: str | None) -> None:
    """A receipt key goes to SQLite as UTF-8: refuse what can't be (a file name with invalid UTF-8)."""
    if key is None:
        return
    if not isinstance(key, str) or not key:
        raise TelemetryError(f"outbox receipt key = {key!r}; expected a non-empty string")
    try:
        check_text(key, "outbox receipt key")
    except PayloadError as exc:
        raise TelemetryError(str(exc)) from None


def _check_top_strings(body: dict, kind: MessageKind) -> None:
    """The report's own string fields must be valid text: the writer could store neither it nor an error
    result in its place (a result's nested ``data`` is checked by the writer, which then stores an error)."""
    for name, value in body.items():
        if type(value) is str and not value.isascii():
            try:
                check_text(value, f"{kind.value} report: field {name!r}")
            except PayloadError as exc:
                raise TelemetryError(str(exc)) from None


class Outbox:
    """Durable, bounded store of reports waiting for the broker's acknowledgement.

    Thread-safe: the runner adds from its thread while the MQTT worker reads and removes.

    Args:
        path: SQLite file; created with its parent directory if missing.
        device_id: the device whose reports this outbox numbers.
        capacity: most rows kept; beyond it the oldest are dropped and counted.
        commit_interval_s: least time between two group commits (0: commit as soon as the disk allows).

    Raises:
        TelemetryError: if the file cannot be opened as an outbox, belongs to another device, or the
            capacity or commit interval is out of range.
    """

    def __init__(
        self,
        path: Path,
        device_id: str,
        capacity: int = DEFAULT_CAPACITY,
        commit_interval_s: float = DEFAULT_COMMIT_INTERVAL_S,
    ) -> None:
        check_name("device_id", device_id)
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise TelemetryError(f"outbox capacity = {capacity!r}; expected an integer >= 1")
        if (
            isinstance(commit_interval_s, bool)
            or not isinstance(commit_interval_s, int | float)
            or not 0 <= commit_interval_s <= 10
        ):
            raise TelemetryError(f"outbox commit_interval_s = {commit_interval_s!r}; expected seconds in 0..10")
        self.path = Path(path)
        self.device_id = device_id
        self.capacity = capacity
        self.commit_interval_s = float(commit_interval_s)
        self._db_lock = threading.Lock()  # the connection: writer thread, link thread, readers
        self._cond = threading.Condition(threading.Lock())  # the queue and the counters below
        self._queue: list[_Queued] = []
        self._queued_keys: set[str] = set()
        self._error: TelemetryError | None = None
        self._urgent = False
        self.unencodable = 0  # results whose data could not be JSON (stored as error results)
        self._attempts = 0  # commits tried by the writer
        self._closing = False
        self._closed = False
        self._db = open_durable(self.path, _SCHEMA, TelemetryError, "outbox")
        try:
            self._claim_device()
            self._next_seq = self._meta("next_seq")
            self._rows = int(self._db.execute("SELECT COUNT(*) FROM outbox").fetchone()[0])  # kept up to date
        except sqlite3.Error as exc:
            self._db.close()
            raise TelemetryError(f"outbox {self.path}: cannot open as an SQLite outbox ({exc})") from exc
        self._stored_seq = self._next_seq - 1
        self._writer = threading.Thread(target=self._write_loop, name=f"outbox-{device_id}", daemon=True)
        self._writer.start()

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

    # -- adding ---------------------------------------------------------------------------------------

    def add(self, message: Message, key: str | None = None, wait: bool = False, timeout: float = 10.0) -> Message:
        """Number a report and queue it for the next group commit.

        ``device_id``, ``seq`` and (if 0) ``timestamp`` of ``message`` are filled in.

        Args:
            message: a report (Telemetry, BenchReport or Result); its ``seq`` is ignored. It is serialised
                later, on the writer thread: don't change a result's ``data`` after handing it over.
            key: a receipt stored with the report in the same transaction (see ``has_key``); a key
                already stored is replaced, pointing at the new report.
            wait: return only once the report is committed to disk.
            timeout: seconds ``wait`` may take.

        Returns:
            The message with its device id, sequence number and timestamp.

        Raises:
            TelemetryError: if the message is a Status (states are not queued), names another device or
                can't be serialised; if the outbox is closed, the last commit failed (the error says
                why; queued reports are kept and retried), or ``wait`` timed out.
        """
        kind = kind_of(message)
        if kind is MessageKind.STATUS:
            raise TelemetryError("status messages are not queued in the outbox; the client publishes them")
        if message.device_id not in ("", self.device_id):
            raise TelemetryError(
                f"{kind.value} message names device_id {message.device_id!r}; this outbox is for {self.device_id!r}"
            )
        _check_key(key)
        with self._cond:
            self._check_open()
            if len(self._queue) >= self.capacity and not self._cond.wait_for(
                lambda: len(self._queue) < self.capacity or self._error is not None or self._closing, QUEUE_WAIT_S
            ):
                raise TelemetryError(
                    f"outbox {self.path}: {len(self._queue)} reports wait for the disk for more than "
                    f"{QUEUE_WAIT_S:.0f} s; expected the writer to keep up"
                )
            self._check_open()
            seq = self._next_seq
            now = time.time()
            stored = stamped(message, self.device_id, seq, message.timestamp or now)
            body = check_fields(stored, envelope=False)  # raises for an invalid field before the number is taken
            _check_top_strings(body, kind)
            if kind is not MessageKind.RESULT:  # rare and small: serialise now, so the writer can never fail on it
                body_json(body, stored)
            self._next_seq = seq + 1
            self._queue.append(_Queued(stored, body, now, key))
            if key is not None:
                self._queued_keys.add(key)
            if len(self._queue) == 1:
                # Wake the writer only when it may be idle: a wake-up per report would cost the caller a
                # GIL hand-over and a context switch each time.
                self._cond.notify_all()
        if wait:
            self.wait_stored(seq, timeout)
        return stored

    def _check_open(self) -> None:
        if self._closing:
            raise TelemetryError(f"outbox {self.path} is closed; cannot store a report")
        if self._error is not None:
            raise self._error

    def wait_stored(self, seq: int, timeout: float = 10.0) -> None:
        """Wait until report ``seq`` (and every one before it) is committed to disk.

        Raises:
            TelemetryError: if that takes longer than ``timeout`` seconds or the commit fails.
        """
        with self._cond:
            self._urgent = True
            self._cond.notify_all()
            attempts = self._attempts  # an error counts only if a commit tried (and failed) after this call

            def settled() -> bool:
                return self._stored_seq >= seq or (self._error is not None and self._attempts > attempts)

            if not self._cond.wait_for(settled, timeout):
                raise TelemetryError(
                    f"outbox {self.path}: report {seq} not on disk within {timeout} s "
                    f"({len(self._queue)} reports queued); expected a commit to take milliseconds"
                )
            if self._stored_seq < seq:
                raise self._error

    def flush(self, timeout: float = 10.0) -> None:
        """Commit everything queued so far, waiting up to ``timeout`` seconds.

        Raises:
            TelemetryError: as ``wait_stored``.
        """
        self.wait_stored(self.last_seq, timeout)

    @property
    def storage_error(self) -> TelemetryError | None:
        """Why the last commit failed (a full or read-only disk), or None once a commit succeeds again.

        While it is set, ``add`` refuses new reports and the writer retries the queued ones every
        ``RETRY_S`` seconds; it clears itself when the disk takes them.
        """
        with self._cond:
            return self._error

    @property
    def stored_seq(self) -> int:
        """Highest sequence number committed to disk (0 before the first)."""
        with self._cond:
            return self._stored_seq

    def has_key(self, key: str) -> bool:
        """Whether a report with receipt ``key`` was added: committed before, or queued by this process."""
        with self._cond:
            if key in self._queued_keys:
                return True
        return bool(self._query("SELECT 1 FROM receipts WHERE key = ?", (key,)))

    # -- the writer thread ----------------------------------------------------------------------------

    def _write_loop(self) -> None:
        last_commit = 0.0
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._queue or self._closing)
                if not self._queue:
                    return  # closing with nothing left
                # Pace the commits, unless someone waits for one or the outbox is closing.
                self._cond.wait_for(
                    lambda: self._urgent or self._closing,
                    max(last_commit + self.commit_interval_s - time.monotonic(), 0.0),
                )
                self._urgent = False
                batch = list(self._queue)
            last_commit = time.monotonic()
            try:
                self._commit(batch)
            except (sqlite3.Error, TelemetryError, ValueError) as exc:  # ValueError: text SQLite can't take
                with self._cond:
                    self._attempts += 1
                    self._error = TelemetryError(
                        f"outbox {self.path}: cannot store {len(batch)} reports ({exc}); they are kept in "
                        f"memory and retried every {RETRY_S:.0f} s"
                    )
                    self._cond.notify_all()
                    if self._closing:
                        return
                    self._cond.wait(RETRY_S)
                continue
            with self._cond:
                del self._queue[: len(batch)]
                self._queued_keys.difference_update(q.key for q in batch if q.key is not None)
                self._stored_seq = batch[-1].seq
                self._attempts += 1
                self._error = None
                self._cond.notify_all()

    def _commit(self, batch: list[_Queued]) -> None:
        with self._db_lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany(
                    "INSERT INTO outbox (seq, kind, payload, created) VALUES (?, ?, ?, ?)",
                    [(q.seq, q.body["type"], self._encode(q), q.created) for q in batch],
                )
                self._db.executemany(
                    "INSERT OR REPLACE INTO receipts (key, seq) VALUES (?, ?)",
                    [(q.key, q.seq) for q in batch if q.key is not None],
                )
                self._set_meta("next_seq", batch[-1].seq + 1)
                rows = self._drop_overflow(self._rows + len(batch))
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
            self._rows = rows

    def _encode(self, queued: _Queued) -> str:
        """The report's JSON; a result whose ``data`` can't be JSON is stored as an error result instead.

        ``add`` checked every field; only what is nested in a result's ``data`` (NaN, a numpy scalar) can
        still fail here. Its number is kept (no gap) and the consumer sees why the data is missing.
        """
        message = queued.message
        try:
            return body_json(queued.body, message)
        except TelemetryError as exc:
            if not isinstance(message, Result):
                raise
            self.unencodable += 1
            log.warning("outbox %s: report %d: %s; stored as an error result", self.path, message.seq, exc)
            error = {"error": f"result data could not be serialised: {exc}"}
            return to_json(dataclasses.replace(message, data=error))

    def _drop_overflow(self, rows: int) -> int:
        """Delete the oldest rows beyond ``capacity`` given ``rows`` stored; return the rows left."""
        excess = rows - self.capacity
        if excess > 0:
            self._db.execute("DELETE FROM outbox WHERE seq IN (SELECT seq FROM outbox ORDER BY seq LIMIT ?)", (excess,))
            self._set_meta("dropped", self._meta("dropped") + excess)
            return self.capacity
        return rows

    def _meta(self, key: str) -> int:
        return int(self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()[0])

    def _set_meta(self, key: str, value: int) -> None:
        self._db.execute("UPDATE meta SET value = ? WHERE key = ?", (str(value), key))

    # -- the link's side and readers ------------------------------------------------------------------

    def pending(self, after: int = 0, limit: int = 100) -> list[OutboxRow]:
        """Return up to ``limit`` committed messages with ``seq > after``, oldest first."""
        rows = self._query("SELECT seq, kind, payload FROM outbox WHERE seq > ? ORDER BY seq LIMIT ?", (after, limit))
        return [OutboxRow(seq, MessageKind(kind), payload) for seq, kind, payload in rows]

    def remove(self, seqs: list[int] | tuple[int, ...] | set[int]) -> None:
        """Delete acknowledged messages (unknown numbers are ignored) in one transaction.

        Raises:
            TelemetryError: if the database can't be written.
        """
        if not seqs:
            return
        with self._db_lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                deleted = self._db.executemany("DELETE FROM outbox WHERE seq = ?", [(int(s),) for s in seqs]).rowcount
                self._db.execute("COMMIT")
                self._rows -= deleted
            except sqlite3.Error as exc:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise TelemetryError(f"outbox {self.path}: cannot delete acknowledged rows ({exc})") from exc

    def count(self) -> int:
        """Number of messages waiting for acknowledgement (committed or still queued for the disk)."""
        with self._cond:
            queued = len(self._queue)
        with self._db_lock:
            return self._rows + queued

    @property
    def dropped(self) -> int:
        """Messages discarded so far because the outbox was full (oldest first), across restarts."""
        return int(self._query("SELECT value FROM meta WHERE key = 'dropped'", ())[0][0])

    @property
    def last_seq(self) -> int:
        """Highest sequence number allocated so far (0 before the first report)."""
        with self._cond:
            return self._next_seq - 1

    def _query(self, sql: str, params: tuple) -> list[tuple]:
        with self._db_lock:
            try:
                return self._db.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                raise TelemetryError(f"outbox {self.path}: cannot read ({exc})") from exc

    def close(self, timeout: float = 10.0) -> None:
        """Commit what is queued (up to ``timeout`` seconds), stop the writer, close the database.

        Idempotent.

        Raises:
            TelemetryError: if queued reports could not be committed in time (they are lost with the
                process; the message says how many and why).
        """
        with self._cond:
            if self._closed:
                return
            self._closed = self._closing = True
            self._cond.notify_all()
        self._writer.join(timeout)
        with self._cond:
            left, error = len(self._queue), self._error
        if self._writer.is_alive():
            return  # still committing (a slow disk): the daemon thread ends with the process
        with self._db_lock:
            self._db.close()
        if left:
            why = error or f"the disk did not take them within {timeout} s"
            raise TelemetryError(f"outbox {self.path}: {left} reports were not stored before closing: {why}")

    def __enter__(self) -> Outbox:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
