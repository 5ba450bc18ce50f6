"""The one way edge-deploy opens an SQLite file it must not lose: WAL journal, ``synchronous=FULL``.

With WAL and FULL, a committed transaction survives a SIGKILL and a power cut (the WAL is fsynced at every
commit), and readers never block the writer. The connection is in autocommit mode (``isolation_level=None``):
callers open their own ``BEGIN IMMEDIATE`` transactions. It may be used from several threads behind the
caller's lock (``check_same_thread=False``).
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from edge.errors import EdgeDeployError

#: Seconds a connection waits for another process's lock before giving up.
BUSY_TIMEOUT_S = 10.0


def open_durable(path: Path, schema: str, error: type[EdgeDeployError], what: str) -> sqlite3.Connection:
    """Open (creating it and its folder if needed) a durable SQLite database and apply ``schema``.

    Args:
        path: the database file.
        schema: SQL script of ``CREATE ... IF NOT EXISTS`` statements.
        error: the error class to raise (the caller's area).
        what: what the database is, for the message (e.g. ``"outbox"``).

    Returns:
        The connection (autocommit mode, WAL, synchronous=FULL).

    Raises:
        error: naming the file and why it cannot be opened (not a database, a read-only or full disk, ...).
    """
    path = Path(path)
    db = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_S)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.executescript(schema)
    except (sqlite3.Error, OSError) as exc:
        if db is not None:
            db.close()
        raise error(f"{what} {path}: cannot open as an SQLite database ({exc}{_read_only_hint(path)})") from exc
    return db


def _read_only_hint(path: Path) -> str:
    """``; its filesystem is mounted read-only`` when it is (SQLite then says only "unable to open")."""
    for folder in (path.parent, *path.parent.parents):
        try:
            return "; its filesystem is mounted read-only" if os.statvfs(folder).f_flag & os.ST_RDONLY else ""
        except OSError:
            continue  # not there yet: ask its parent
    return ""
