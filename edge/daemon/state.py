"""The daemon's own durable state: which command nonces were used.

Which frames are done is not kept here: each frame's result goes into the telemetry outbox with a receipt
(``edge.daemon.sources.receipt_key``) stored in the same transaction as the result, so "result stored" and
"frame done" are one fact and a crash can neither lose a frame nor report it twice (see docs/daemon.md).

One SQLite file (WAL, ``synchronous=FULL``) in the state folder.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

from edge.errors import InputError
from edge.sqlitedb import open_durable

_SCHEMA = """
CREATE TABLE IF NOT EXISTS nonces (nonce TEXT PRIMARY KEY, ts REAL NOT NULL);
"""


class StateStore:
    """Durable command nonces. Thread-safe.

    Args:
        path: the SQLite file (created with its folder).

    Raises:
        InputError: if the file can't be opened as a state database.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._db = open_durable(self.path, _SCHEMA, InputError, "daemon state")

    def _run(self, *statements: tuple[str, tuple]) -> list[tuple]:
        """Run statements in one transaction; return the last one's rows."""
        rows: list[tuple] = []
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                for sql, params in statements:
                    rows = self._db.execute(sql, params).fetchall()
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise InputError(f"{self.path}: state database error ({exc})") from exc
        return rows

    def claim_nonce(self, nonce: str, ts: float, keep_s: float) -> bool:
        """Record a command nonce; False if it was used before. Nonces older than ``keep_s`` are forgotten."""
        cutoff = time.time() - keep_s
        rows = self._run(
            ("DELETE FROM nonces WHERE ts < ?", (cutoff,)),
            ("INSERT OR IGNORE INTO nonces VALUES (?, ?) RETURNING nonce", (nonce, ts)),
        )
        return bool(rows)

    def close(self) -> None:
        """Close the database."""
        with self._lock:
            self._db.close()
