"""The server fleet store: PostgreSQL through psycopg 3 (``pip install 'edge-deploy[fleet]'``).

A batch is written in one transaction: its reports are ``COPY``-ed into a session-local staging table and
moved into ``messages`` with ``INSERT ... ON CONFLICT DO NOTHING`` (the primary key drops redeliveries), the
new ones counted into ``latest`` in the same statement; device rows and model history are upserted as one
statement each over arrays. ``messages`` is partitioned by day of ``timestamp`` (``MESSAGES``), so retention
drops a day's partition instead of deleting its rows.
Rows are locked in device-id order, so several monitors writing at once never deadlock each other.
A refusal of the data (SQLSTATE classes ``REFUSED_CLASSES``, e.g. a value out of range or an index row
too large) raises ``DataRefused``: a message of the batch can never be stored, and ``FleetStore.commit``
isolates it. Any other error (a lost connection, the server shutting down, out of disk, a serialization
failure, a missing table) raises ``StoreUnavailable``: nothing of the batch was committed and the caller
retries it; the next call reconnects (and recreates what is missing).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from datetime import UTC, datetime
from typing import Any

from edge.errors import TelemetryError, require
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

log = logging.getLogger(__name__)
#: pg_advisory_xact_lock key serialising schema creation between monitors starting together.
SCHEMA_LOCK = 0x0ED6E_F1EE7
#: SQLSTATE classes that refuse the data of a row, not the request: 22 data exception (a value out of range,
#: bad encoding), 23 integrity constraint violation (an operator's CHECK), 54 program limit exceeded (a row or
#: index entry too large). Resending can't fix these. Every other class (08 connection, 40 transaction
#: rollback, 53 insufficient resources, 57 operator intervention, 42 a missing table...) says the server can't
#: take any row now: the batch is retried.
REFUSED_CLASSES = ("22", "23", "54")

#: ``messages`` as a new database gets it: range-partitioned by ``timestamp``, one partition a UTC day
#: (``messages_YYYYMMDD``, made ``PARTITIONS_AHEAD`` days ahead) and a default partition for any other time.
#: A partitioned table's key must hold the partition column: a report is (device_id, seq, timestamp), which a
#: redelivery (the same message) repeats exactly.
MESSAGES = """
CREATE TABLE messages (
    device_id text NOT NULL, seq bigint NOT NULL, kind text NOT NULL, timestamp double precision NOT NULL,
    received double precision NOT NULL,
    stored double precision NOT NULL DEFAULT extract(epoch FROM clock_timestamp()),
    payload text NOT NULL, PRIMARY KEY (device_id, seq, timestamp)
) PARTITION BY RANGE (timestamp);
CREATE TABLE messages_default PARTITION OF messages DEFAULT;
CREATE INDEX messages_timestamp_brin ON messages USING brin (timestamp);
"""

SCHEMA = f"""
CREATE INDEX IF NOT EXISTS messages_device_kind_time ON messages (device_id, kind, timestamp);
CREATE INDEX IF NOT EXISTS messages_kind_time ON messages (kind, timestamp);
CREATE TABLE IF NOT EXISTS devices (
    device_id text PRIMARY KEY, state text, status text, last_seen double precision NOT NULL, last_error text,
    last_error_at double precision
);
CREATE TABLE IF NOT EXISTS running (
    {" ".join(f"{c} text NOT NULL," for c in ("device_id", *RUNNING_COLUMNS))}
    first_seen double precision NOT NULL, last_seen double precision NOT NULL, PRIMARY KEY ({RUNNING_KEY})
);
CREATE TABLE IF NOT EXISTS counters (name text PRIMARY KEY, value bigint NOT NULL);
INSERT INTO counters VALUES ('duplicates', 0), ('rejected', 0) ON CONFLICT DO NOTHING;
"""

#: The newest report and the number of reports per device and kind, kept on insert (``_write_reports``) and
#: by retention. Made, or remade with its ``reports`` column, from ``messages`` when a database lacks it.
LATEST = """
DROP TABLE IF EXISTS latest;
CREATE TABLE latest (
    device_id text NOT NULL, kind text NOT NULL, seq bigint NOT NULL, payload text NOT NULL,
    reports bigint NOT NULL, PRIMARY KEY (device_id, kind)
);
INSERT INTO latest SELECT DISTINCT ON (device_id, kind) device_id, kind, seq, payload,
    count(*) OVER (PARTITION BY device_id, kind) FROM messages ORDER BY device_id, kind, seq DESC;
"""

#: Daily partitions made ahead of the monitor's clock (a device's clock may run ahead by ``max_skew_s``).
PARTITIONS_AHEAD = 7
_PARTITION = re.compile(r"messages_(\d{8})")

_STAGING = (
    "CREATE TEMP TABLE IF NOT EXISTS incoming (device_id text, seq bigint, kind text, "
    "timestamp double precision, received double precision, payload text) ON COMMIT DELETE ROWS"
)


#: Batch upserts as one statement over arrays, one parameter per column (the rows of ``plan_statements``).
_SET_BASED = {
    "seen": "INSERT INTO devices (device_id, last_seen) SELECT * FROM unnest(%s::text[], %s::float8[]) "
    "ON CONFLICT (device_id) DO UPDATE SET last_seen = GREATEST(devices.last_seen, excluded.last_seen)",
    "running": f"INSERT INTO running SELECT * FROM unnest({', '.join(['%s::text[]'] * (len(RUNNING_COLUMNS) + 1))}, "
    f"%s::float8[], %s::float8[]) ON CONFLICT ({RUNNING_KEY}) DO UPDATE SET "
    "first_seen = LEAST(running.first_seen, excluded.first_seen), "
    "last_seen = GREATEST(running.last_seen, excluded.last_seen)",
}


class PostgresStore(FleetStore):
    """PostgreSQL store with the same interface as the SQLite one.

    Args:
        url: a libpq URL, e.g. ``postgresql://edge@db.example/fleet``.
        prefix: topic prefix, to check the topics of incoming messages.
        connect_timeout_s: bound on each connection attempt.

    Raises:
        MissingDependencyError: psycopg is not installed (the ``fleet`` extra).
        TelemetryError: the server can't be reached or the schema can't be created.
    """

    def __init__(self, url: str, prefix: str = "edge-deploy", connect_timeout_s: float = 5.0) -> None:
        super().__init__(prefix)
        self._pg = require("psycopg", "fleet", "the PostgreSQL fleet store")
        self.url = url
        self.connect_timeout_s = connect_timeout_s
        self.location = _safe_location(self._pg, url)
        self._write_conn: Any = None
        self._read_conn: Any = None
        self._read_lock = threading.Lock()
        #: Whether ``messages`` is partitioned (a table an older edge-deploy made is not: retention deletes).
        self.partitioned = True
        self._unpartitioned_told = False
        try:
            with self._lock:
                self._writer()
        except StoreUnavailable as exc:
            raise TelemetryError(str(exc)) from exc

    def _connect(self, autocommit: bool) -> Any:
        try:
            return self._pg.connect(
                self.url, autocommit=autocommit, connect_timeout=max(1, int(self.connect_timeout_s))
            )
        except self._pg.Error as exc:
            raise StoreUnavailable(f"fleet store {self.location}: cannot connect ({_first_line(exc)})") from exc

    def _writer(self) -> Any:
        """The write connection (made, with schema and staging table, on first use or after a loss)."""
        if self._write_conn is None or self._write_conn.closed:
            conn = self._connect(autocommit=False)
            try:
                with conn.transaction():
                    conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
                    self._set_up(conn)
                conn.execute(_STAGING)
                conn.commit()
            except self._pg.Error as exc:
                conn.close()
                raise StoreUnavailable(f"fleet store {self.location}: cannot set up ({_first_line(exc)})") from exc
            self._write_conn = conn
        return self._write_conn

    def _set_up(self, conn: Any) -> None:
        """Create what is missing (inside the caller's transaction, holding the schema lock)."""
        kind = conn.execute("SELECT relkind FROM pg_class WHERE oid = to_regclass('messages')").fetchone()
        if kind is None:
            conn.execute(MESSAGES)
        self.partitioned = kind is None or kind[0] == "p"
        conn.execute(SCHEMA)
        has_counts = conn.execute(
            "SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('latest') AND attname = 'reports'"
        ).fetchone()
        if has_counts is None:
            conn.execute(LATEST)
        if self.partitioned:
            today = time.time() // DAY_S * DAY_S
            add_partitions(conn, today, today + PARTITIONS_AHEAD * DAY_S)

    def write(self, batch: list[Incoming], rejected: int = 0) -> WriteResult:  # noqa: D102 - see FleetStore
        plan = plan_batch(batch)
        with self._lock:
            conn = self._writer()
            try:
                with conn.transaction(), conn.cursor() as cur:
                    stored = self._write_plan(cur, plan)
                    duplicates = len(batch) - len(plan.statuses) - stored
                    cur.executemany(
                        "UPDATE counters SET value = value + %s WHERE name = %s",
                        [(v, k) for k, v in (("duplicates", duplicates), ("rejected", rejected)) if v],
                    )
            except self._pg.Error as exc:
                if _refuses_data(self._pg, exc):
                    raise DataRefused(f"fleet store {self.location}: refuses the message ({_why(exc)})") from exc
                self._drop_writer()  # a fresh connection sets the schema up again
                raise StoreUnavailable(f"fleet store {self.location}: cannot write now ({_why(exc)})") from exc
        return WriteResult(stored, duplicates, len(plan.statuses), rejected)

    def _write_plan(self, cur: Any, plan: BatchPlan) -> int:
        """The batch's statements (inside the caller's transaction); returns the number of new reports.

        The per-device upserts go as one statement each over arrays (``unnest``), not one per row: a batch
        touches up to one row per device in each table.
        """
        stored = self._write_reports(cur, plan.reports)
        statements = plan_statements(plan)
        for name in ("seen", "statuses", "errors", "running"):
            sql, rows = statements[name]
            if not rows:
                continue
            if name in _SET_BASED:
                cur.execute(_SET_BASED[name], [list(column) for column in zip(*rows, strict=True)])
            else:
                cur.executemany(sql.replace("?", "%s"), rows)
        return stored

    @staticmethod
    def _write_reports(cur: Any, reports: list[Incoming]) -> int:
        """COPY the reports into staging, move the new ones into ``messages`` and the newest per device and kind
        into ``latest``; return how many were new."""
        if not reports:
            return 0
        with cur.copy("COPY incoming FROM STDIN") as copy:
            for r in reports:
                copy.write_row((r.device_id, r.message.seq, r.kind.value, r.message.timestamp, r.received, r.text))
        cur.execute(
            "WITH new AS (INSERT INTO messages (device_id, seq, kind, timestamp, received, payload) "
            "SELECT * FROM incoming ORDER BY device_id, seq ON CONFLICT DO NOTHING RETURNING device_id, kind, seq, "
            "payload), counted AS (INSERT INTO latest SELECT DISTINCT ON (device_id, kind) device_id, kind, seq, "
            "payload, count(*) OVER (PARTITION BY device_id, kind) FROM new ORDER BY device_id, kind, seq DESC "
            "ON CONFLICT (device_id, kind) DO UPDATE SET reports = latest.reports + excluded.reports, "
            "seq = GREATEST(latest.seq, excluded.seq), "
            "payload = CASE WHEN excluded.seq > latest.seq THEN excluded.payload ELSE latest.payload END) "
            "SELECT count(*) FROM new"
        )
        return int(cur.fetchone()[0])

    def _drop_writer(self) -> None:
        if self._write_conn is not None:
            self._write_conn.close()
            self._write_conn = None

    def maintain(self, retention_days: int | None, now: float | None = None) -> int:  # noqa: D102 - see FleetStore
        now = time.time() if now is None else now
        try:  # a connection of its own: dropping a partition waits for its lock, never for this store's writer
            with self._connect(autocommit=True) as conn:
                # Waiting for a lock queues every reader and writer behind it: after 2 s give up, try next run.
                conn.execute("SET lock_timeout = '2s'")
                if self.partitioned:
                    with conn.transaction():
                        conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
                        today = now // DAY_S * DAY_S
                        add_partitions(conn, today, today + PARTITIONS_AHEAD * DAY_S)
                # one monitor of a shared group applies retention at a time (the lock goes with the connection)
                if (
                    retention_days is None
                    or not conn.execute("SELECT pg_try_advisory_lock(%s)", (SCHEMA_LOCK + 1,)).fetchone()[0]
                ):
                    return 0
                cutoff = now - retention_days * DAY_S
                if not self.partitioned and not self._unpartitioned_told:
                    self._unpartitioned_told = True
                    log.warning(
                        "fleet store %s: table messages is not partitioned (an older edge-deploy made it): retention "
                        "deletes its old rows in batches instead of dropping partitions (docs/fleet.md, The store)",
                        self.location,
                    )
                removed = drop_partitions(conn, cutoff) if self.partitioned else 0
                return removed + delete_batches(conn, "messages_default" if self.partitioned else "messages", cutoff)
        except self._pg.Error as exc:
            raise StoreUnavailable(f"fleet store {self.location}: cannot drop old reports now ({_why(exc)})") from exc

    def _rows(self, sql: str, params: tuple = ()) -> list[tuple]:
        """Run a read on the autocommit read connection (reconnecting once if it was lost)."""
        sql = sql.replace("?", "%s")
        with self._read_lock:
            try:
                return self._read(sql, params)
            except self._pg.OperationalError:
                self._drop_reader()
            try:
                return self._read(sql, params)
            except self._pg.OperationalError as exc:
                self._drop_reader()
                raise StoreUnavailable(f"fleet store {self.location}: cannot read now ({_first_line(exc)})") from exc

    def _read(self, sql: str, params: tuple) -> list[tuple]:
        if self._read_conn is None or self._read_conn.closed:
            self._read_conn = self._connect(autocommit=True)
        return self._read_conn.execute(sql, params).fetchall()

    def _drop_reader(self) -> None:
        if self._read_conn is not None:
            self._read_conn.close()
            self._read_conn = None

    def close(self) -> None:  # noqa: D102
        with self._lock:
            self._drop_writer()
        with self._read_lock:
            self._drop_reader()


def _day_name(start: float) -> str:
    return f"messages_{datetime.fromtimestamp(start, UTC):%Y%m%d}"


def partitions(conn: Any) -> dict[str, float]:
    """The daily partitions of ``messages``: ``{name: start of its UTC day}``."""
    rows = conn.execute(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "WHERE i.inhparent = to_regclass('messages')"
    ).fetchall()
    days = {name: _PARTITION.fullmatch(name) for (name,) in rows}
    return {n: datetime.strptime(m[1], "%Y%m%d").replace(tzinfo=UTC).timestamp() for n, m in days.items() if m}


def add_partitions(conn: Any, first: float, last: float) -> list[str]:
    """Make the daily partitions from the UTC day of ``first`` to that of ``last`` that are missing; rows of
    those days already in the default partition move into them. Run it holding ``SCHEMA_LOCK``.

    Returns:
        The partitions made.
    """
    have, made = partitions(conn), []
    for start in range(int(first // DAY_S * DAY_S), int(last) + 1, DAY_S):
        name = _day_name(start)
        if name in have:
            continue
        conn.execute(f"CREATE TABLE {name} (LIKE messages INCLUDING DEFAULTS)")
        conn.execute(
            f"WITH moved AS (DELETE FROM messages_default WHERE timestamp >= %s AND timestamp < %s RETURNING *) "
            f"INSERT INTO {name} SELECT * FROM moved",
            (start, start + DAY_S),
        )
        conn.execute(f"ALTER TABLE messages ATTACH PARTITION {name} FOR VALUES FROM ({start}) TO ({start + DAY_S})")
        made.append(name)
    return made


def drop_partitions(conn: Any, cutoff: float) -> int:
    """Drop the daily partitions whose whole day is before ``cutoff``; return the reports they held."""
    removed = 0
    for name, start in sorted(partitions(conn).items()):
        if start + DAY_S > cutoff:
            continue
        with conn.transaction():
            conn.execute("LOCK TABLE messages IN ACCESS EXCLUSIVE MODE")
            counts = conn.execute(
                f"SELECT device_id, kind, count(*) FROM {name} GROUP BY 1, 2 ORDER BY 1, 2"
            ).fetchall()
            conn.execute(f"DROP TABLE {name}")
            removed += _uncount(conn, counts)
    return removed


def delete_batches(conn: Any, table: str, cutoff: float) -> int:
    """Delete the rows of ``table`` with a timestamp before ``cutoff``, ``RETENTION_BATCH`` a transaction."""
    removed = 0
    while True:
        with conn.transaction():
            counts = conn.execute(
                f"WITH gone AS (DELETE FROM {table} WHERE ctid = ANY(ARRAY(SELECT ctid FROM {table} "
                f"WHERE timestamp < %s LIMIT %s)) RETURNING device_id, kind) "
                "SELECT device_id, kind, count(*) FROM gone GROUP BY 1, 2 ORDER BY 1, 2",
                (cutoff, RETENTION_BATCH),
            ).fetchall()
            gone = _uncount(conn, counts)
        removed += gone
        if gone < RETENTION_BATCH:
            return removed


def _uncount(conn: Any, counts: list[tuple[str, str, int]]) -> int:
    """Take removed reports (device_id, kind, n), sorted, off ``latest``; rows left with none go."""
    with conn.cursor() as cur:
        cur.executemany(
            "UPDATE latest SET reports = reports - %s WHERE device_id = %s AND kind = %s",
            [(n, dev, kind) for dev, kind, n in counts],
        )
    if counts:
        conn.execute("DELETE FROM latest WHERE reports <= 0")
    return sum(n for _dev, _kind, n in counts)


def _safe_location(pg: Any, url: str) -> str:
    """``host:port/dbname`` of a libpq URL, without user or password (for messages and logs)."""
    try:
        info = pg.conninfo.conninfo_to_dict(url)
    except pg.ProgrammingError as exc:
        raise TelemetryError(f"fleet store URL: not a valid PostgreSQL URL ({_first_line(exc)})") from exc
    return f"postgresql://{info.get('host', '')}:{info.get('port', 5432)}/{info.get('dbname', '')}"


def _refuses_data(pg: Any, exc: Exception) -> bool:
    """Whether a psycopg error refuses the data (``REFUSED_CLASSES``; or, raised before reaching the server,
    a value psycopg can't send, e.g. a NUL character)."""
    state = getattr(exc, "sqlstate", None)
    if state:
        return state[:2] in REFUSED_CLASSES
    return isinstance(exc, pg.DataError | pg.IntegrityError)


def _why(exc: Exception) -> str:
    """``SQLSTATE 54000: <first line>``, or the first line alone for an error without a SQLSTATE."""
    state = getattr(exc, "sqlstate", None)
    return f"SQLSTATE {state}: {_first_line(exc)}" if state else _first_line(exc)


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
