"""The daemon's durable state: which frames are done, where a video stopped, which command nonces were used.

One SQLite file (WAL, ``synchronous=FULL``) in the state folder. The order that makes a crash lose
nothing and repeat nothing, for every frame of a durable source:

1. ``begin(source, key, frame_id, last_seq)`` records the frame as *pending* with the outbox's highest
   sequence number before its result;
2. the result goes into the telemetry outbox (its own durable transaction, sequence ``last_seq + 1``);
3. ``finish(...)`` marks the frame done and clears *pending*.

A SIGKILL between 1 and 2 leaves a pending row whose ``last_seq`` is still the outbox's newest: the result
was never stored, the frame is processed again. A SIGKILL between 2 and 3 leaves one whose outbox has moved
on: the result is stored, ``recover`` marks the frame done without processing it again. Only one thread
reports while a frame is pending (the daemon's loop), so "moved on" can only mean "our result".
"""

from __future__ import annotations

import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from edge.errors import InputError

_SCHEMA = """
CREATE TABLE IF NOT EXISTS done (
    source TEXT NOT NULL, key TEXT NOT NULL, frame_id TEXT NOT NULL, seq INTEGER NOT NULL, at REAL NOT NULL,
    PRIMARY KEY (source, key)
);
CREATE TABLE IF NOT EXISTS pending (
    source TEXT PRIMARY KEY, key TEXT NOT NULL, frame_id TEXT NOT NULL, last_seq INTEGER NOT NULL,
    position INTEGER
);
CREATE TABLE IF NOT EXISTS positions (source TEXT PRIMARY KEY, identity TEXT NOT NULL, position INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS nonces (nonce TEXT PRIMARY KEY, ts REAL NOT NULL);
"""


@dataclass(frozen=True)
class Recovered:
    """What ``recover`` found for one interrupted frame."""

    source: str
    frame_id: str
    stored: bool  # True: its result was in the outbox (marked done); False: it will be processed again


class StateStore:
    """Durable per-source progress and command nonces. Thread-safe.

    Args:
        path: the SQLite file (created with its folder).

    Raises:
        InputError: if the file can't be opened as a state database.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=10)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(_SCHEMA)
        except (sqlite3.Error, OSError) as exc:
            raise InputError(f"{self.path}: cannot open the daemon's state database ({exc})") from exc

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

    def is_done(self, source: str, key: str) -> bool:
        """Whether the frame ``key`` of ``source`` has its result stored."""
        return bool(self._run(("SELECT 1 FROM done WHERE source = ? AND key = ?", (source, key))))

    def done_count(self, source: str) -> int:
        """Number of frames of ``source`` marked done."""
        return int(self._run(("SELECT COUNT(*) FROM done WHERE source = ?", (source,)))[0][0])

    def begin(self, source: str, key: str, frame_id: str, last_seq: int, position: int | None = None) -> None:
        """Record that a frame's result is about to be reported (step 1 of the module docstring).

        At most one frame is pending at a time (the table is cleared first): ``recover`` relies on it.
        """
        self._run(
            ("DELETE FROM pending", ()),
            ("INSERT INTO pending VALUES (?, ?, ?, ?, ?)", (source, key, frame_id, last_seq, position)),
        )

    def finish(self, source: str, key: str, frame_id: str, seq: int, identity: str | None = None) -> None:
        """Mark a frame done and clear its pending row (step 3); ``identity`` also advances a video position."""
        statements: list[tuple[str, tuple]] = [
            ("INSERT OR REPLACE INTO done VALUES (?, ?, ?, ?, ?)", (source, key, frame_id, seq, time.time())),
            ("DELETE FROM pending WHERE source = ?", (source,)),
        ]
        if identity is not None:
            statements.append(
                ("INSERT OR REPLACE INTO positions VALUES (?, ?, ?)", (source, identity, int(key) + 1)),
            )
        self._run(*statements)

    def recover(self, outbox_last_seq: int) -> list[Recovered]:
        """Resolve frames left pending by a crash (see the module docstring).

        Args:
            outbox_last_seq: the telemetry outbox's highest allocated sequence number now.

        Returns:
            One Recovered per interrupted frame.
        """
        found = []
        for source, key, frame_id, last_seq, position in self._run(("SELECT * FROM pending", ())):
            stored = outbox_last_seq > last_seq
            if stored:
                identity = self.position(source)[0] if position is not None else None
                self.finish(source, key, frame_id, last_seq + 1, identity if position is not None else None)
            else:
                self._run(("DELETE FROM pending WHERE source = ?", (source,)))
            found.append(Recovered(source, frame_id, stored))
        return found

    def position(self, source: str) -> tuple[str | None, int]:
        """(identity, next frame index) of a video source; (None, 0) if never started."""
        rows = self._run(("SELECT identity, position FROM positions WHERE source = ?", (source,)))
        return (rows[0][0], int(rows[0][1])) if rows else (None, 0)

    def start_position(self, source: str, identity: str) -> int:
        """The next frame index for a video with ``identity``; a different identity starts it over at 0."""
        known, position = self.position(source)
        if known != identity:
            self._run(
                ("INSERT OR REPLACE INTO positions VALUES (?, ?, 0)", (source, identity)),
                ("DELETE FROM done WHERE source = ?", (source,)),
            )
            return 0
        return position

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
