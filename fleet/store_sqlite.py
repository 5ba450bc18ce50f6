"""The embedded fleet store: one SQLite file (WAL), the default for a few boards. Thread-safe."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from edge.errors import TelemetryError
from fleet.records import RUNNING_COLUMNS, Incoming, WriteResult
from fleet.store import (
    DAY_S,
    RETENTION_BATCH,
    RUNNING_KEY,
    BatchPlan,
    DataRefused,
    FleetStore,
    StoreUnavailable,
    plan_batch,
    plan_statements,
)

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS messages (
    device_id TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL, timestamp REAL NOT NULL,
    received REAL NOT NULL, stored REAL NOT NULL DEFAULT 0, payload TEXT NOT NULL, PRIMARY KEY (device_id, seq)
);
CREATE TABLE IF NOT EXISTS devices (
    device_id TEXT PRIMARY KEY, state TEXT, status TEXT, last_seen REAL NOT NULL, last_error TEXT,
    last_error_at REAL
);
CREATE TABLE IF NOT EXISTS running (
    {" ".join(f"{c} TEXT NOT NULL," for c in ("device_id", *RUNNING_COLUMNS))}
    first_seen REAL NOT NULL, last_seen REAL NOT NULL, PRIMARY KEY ({RUNNING_KEY})
);
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO counters VALUES ('duplicates', 0), ('rejected', 0);
"""

#: ``messages``' indexes by time: a device's reports of a kind (its page, retention), the fleet's (its plots,
#: recent rollbacks).
_INDEXES = """
CREATE INDEX IF NOT EXISTS messages_device_kind_time ON messages (device_id, kind, timestamp);
CREATE INDEX IF NOT EXISTS messages_kind_time ON messages (kind, timestamp);
"""

#: The newest report and the number of reports per device and kind, kept by triggers on ``messages`` (an
#: ignored duplicate fires none). Made, and filled from ``messages``, when a file lacks it.
_LATEST = """
CREATE TABLE latest (
    device_id TEXT NOT NULL, kind TEXT NOT NULL, seq INTEGER NOT NULL, payload TEXT NOT NULL,
    reports INTEGER NOT NULL, PRIMARY KEY (device_id, kind)
);
INSERT INTO latest SELECT device_id, kind, MAX(seq), payload, COUNT(*) FROM messages GROUP BY device_id, kind;
CREATE TRIGGER messages_added AFTER INSERT ON messages BEGIN
    INSERT INTO latest VALUES (NEW.device_id, NEW.kind, NEW.seq, NEW.payload, 1)
    ON CONFLICT (device_id, kind) DO UPDATE SET reports = reports + 1,
        seq = MAX(seq, excluded.seq), payload = CASE WHEN excluded.seq > seq THEN excluded.payload ELSE payload END;
END;
CREATE TRIGGER messages_removed AFTER DELETE ON messages BEGIN
    UPDATE latest SET reports = reports - 1 WHERE device_id = OLD.device_id AND kind = OLD.kind;
END;
"""


#: Columns added after the first release: (table, column, declaration).
_ADDED_COLUMNS = (
    ("messages", "stored", "REAL NOT NULL DEFAULT 0"),
    ("devices", "last_error", "TEXT"),
    ("devices", "last_error_at", "REAL"),
)


class SqliteStore(FleetStore):
    """SQLite store of received messages with (device_id, seq) deduplication.

    Args:
        path: database file (created with its directory).
        prefix: topic prefix, to check the topics of incoming messages.

    Raises:
        TelemetryError: if the database can't be opened.
    """

    def __init__(self, path: Path, prefix: str = "edge-deploy") -> None:
        super().__init__(prefix)
        self.path = Path(path)
        self.location = str(self.path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=10)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.executescript(_SCHEMA)
            self._db.executescript(_INDEXES)
            if not self._db.execute("SELECT 1 FROM sqlite_master WHERE name = 'latest'").fetchall():
                self._db.executescript(f"BEGIN; {_LATEST} COMMIT;")
            for table, column, decl in _ADDED_COLUMNS:  # a file an older edge-deploy made
                if column not in {r[1] for r in self._db.execute(f"PRAGMA table_info({table})")}:
                    self._db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {decl}")
        except (sqlite3.Error, OSError) as exc:
            raise TelemetryError(f"monitor database {self.path}: cannot open ({exc})") from exc

    def write(self, batch: list[Incoming], rejected: int = 0) -> WriteResult:  # noqa: D102 - see FleetStore
        plan = plan_batch(batch)
        try:
            with self._lock:
                self._db.execute("BEGIN")
                try:
                    stored = self._write_plan(plan, time.time())
                    duplicates = len(batch) - len(plan.statuses) - stored
                    self._db.executemany(
                        "UPDATE counters SET value = value + ? WHERE name = ?",
                        [(duplicates, "duplicates"), (rejected, "rejected")],
                    )
                    self._db.execute("COMMIT")
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise
        except (sqlite3.IntegrityError, sqlite3.DataError, OverflowError) as exc:  # this row, not the database
            raise DataRefused(f"monitor database {self.path}: refuses the message ({exc})") from exc
        except sqlite3.Error as exc:  # locked, busy, disk full or I/O, a damaged file: worth another try
            raise StoreUnavailable(f"monitor database {self.path}: cannot write now ({exc})") from exc
        return WriteResult(stored, duplicates, len(plan.statuses), rejected)

    def _write_plan(self, plan: BatchPlan, now: float) -> int:
        """The batch's statements (inside the caller's transaction); returns the number of new reports."""
        db = self._db
        stored = db.executemany(  # rowcount: rows this statement inserted, not the triggers' upserts
            "INSERT OR IGNORE INTO messages VALUES (?, ?, ?, ?, ?, ?, ?)",
            [
                (r.device_id, r.message.seq, r.kind.value, r.message.timestamp, r.received, now, r.text)
                for r in plan.reports
            ],
        ).rowcount
        for sql, rows in plan_statements(plan).values():
            db.executemany(sql, rows)
        return stored

    def maintain(self, retention_days: int | None, now: float | None = None) -> int:  # noqa: D102 - see FleetStore
        if retention_days is None:
            return 0
        cutoff = (time.time() if now is None else now) - retention_days * DAY_S
        removed = 0
        try:
            for device_id, kind in self._rows("SELECT device_id, kind FROM latest"):
                while True:  # one bounded transaction a batch, through the (device_id, kind, timestamp) index
                    with self._lock:
                        self._db.execute("BEGIN")
                        try:
                            gone = self._db.execute(
                                "DELETE FROM messages WHERE rowid IN (SELECT rowid FROM messages "
                                "WHERE device_id = ? AND kind = ? AND timestamp < ? LIMIT ?)",
                                (device_id, kind, cutoff, RETENTION_BATCH),
                            ).rowcount
                            self._db.execute("DELETE FROM latest WHERE device_id = ? AND reports <= 0", (device_id,))
                            self._db.execute("COMMIT")
                        except BaseException:
                            self._db.execute("ROLLBACK")
                            raise
                    removed += gone
                    if gone < RETENTION_BATCH:
                        break
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"monitor database {self.path}: cannot drop old reports now ({exc})") from exc
        return removed

    def _rows(self, sql: str, params: tuple = ()) -> list[tuple]:
        with self._lock:
            return self._db.execute(sql, params).fetchall()

    def close(self) -> None:  # noqa: D102
        with self._lock:
            self._db.close()
