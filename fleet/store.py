"""The fleet store's interface, shared by the SQLite (embedded default) and PostgreSQL backends.

A backend commits each batch of decoded messages in one transaction and keys reports by
(device_id, seq), so a QoS 1 redelivery or a device's resend never counts twice. Both keep a ``latest`` table
(the newest report and the number of reports per device and kind) in the transaction that stores the reports,
so the fleet table and ``latest`` never scan ``messages``. Reads are plain SQL over the same tables in both
backends (``?`` placeholders; the PostgreSQL backend translates them).

Query API (also what other tools, e.g. rollouts, read):

- ``devices()``: the fleet table, one ``DeviceRow`` per device.
- ``running()``: which device runs which model now; ``running_history(device_id)``: what it ran before.
- ``latest(kind, device_id=None, limit=1)``: the newest reports of a kind, as dicts, per device.
- ``telemetry(device_id=None, since=None)``: telemetry reports as dicts of ``CSV_COLUMNS``.
- ``count``, ``seqs``, ``duplicates``, ``rejected``: what was stored and dropped.

Maintenance: ``maintain(retention_days)`` (the monitor runs it every ``MAINTAIN_EVERY_S``) drops old reports.
"""

from __future__ import annotations

import csv
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edge.errors import TelemetryError
from edge.telemetry.schema import MessageKind, check_prefix
from fleet.records import (
    CSV_COLUMNS,
    RUNNING_COLUMNS,
    DeviceRow,
    Incoming,
    Running,
    WriteResult,
    body_of,
    decode,
    online_of,
)

#: Rows deleted per transaction by retention (``FleetStore.maintain``): ingest waits at most for one batch.
RETENTION_BATCH = 5000
#: The ``running`` table's primary key: one row per thing a device ran.
RUNNING_KEY = ", ".join(("device_id", *RUNNING_COLUMNS))
DAY_S = 86400


class StoreUnavailable(TelemetryError):
    """The store can't commit right now (database down or restarting); the batch is to be retried."""


class DataRefused(TelemetryError):
    """The database refuses a batch's data (a value out of its range, a row too large for an index): a message
    in the batch can never be stored; ``FleetStore.commit`` finds it and rejects it."""


class FleetStore:
    """Base of the store backends: the query API and the single-message path over ``write``.

    Backends implement ``write``, ``_rows`` and ``close``.

    Args:
        prefix: topic prefix, to check the topics of incoming messages.
    """

    #: Where the store is, for messages (a path or a URL without password).
    location: str = ""

    def __init__(self, prefix: str) -> None:
        self.prefix = check_prefix(prefix)
        self.last_rejection: str | None = None
        self._lock = threading.Lock()

    # -- writing ----------------------------------------------------------------------------------------

    def write(self, batch: list[Incoming], rejected: int = 0) -> WriteResult:
        """Commit a batch in one transaction: reports (duplicates ignored), statuses, device rows.

        Args:
            batch: decoded messages, in arrival order.
            rejected: messages of the same delivery that ``decode`` refused, counted in the same transaction.

        Raises:
            StoreUnavailable: the database can't be reached; nothing was committed, retry the batch.
            DataRefused: the database refuses a message of the batch; nothing was committed (see ``commit``).
        """
        raise NotImplementedError

    def commit(self, batch: list[Incoming], rejected: int = 0) -> WriteResult:
        """Commit a batch; messages the database refuses are found by halving the batch, rejected and counted.

        The halves are committed in arrival order, each in its own transaction: one bad message in a batch of
        n costs about 2 log2(n) more transactions, and the good messages around it are stored.

        Args:
            batch: decoded messages, in arrival order.
            rejected: messages of the same delivery that ``decode`` refused.

        Returns:
            What was committed; its ``rejected`` includes the messages the database refused.

        Raises:
            StoreUnavailable: the database can't be reached; retry the batch (a message already committed is
                then counted as a duplicate).
        """
        try:
            return self.write(batch, rejected)
        except DataRefused as exc:
            if not batch:  # only the counters were written: the server, not a message, is the problem
                raise StoreUnavailable(str(exc)) from exc
            if len(batch) == 1:
                item = batch[0]
                self.last_rejection = f"topic {self.prefix}/{item.device_id}/{item.kind.value}: {exc}"
                return self.commit([], rejected + 1)
        half = len(batch) // 2
        return self.commit(batch[:half], rejected) + self.commit(batch[half:])

    def handle(self, topic: str, payload: bytes | str, received: float | None = None, retained: bool = False) -> str:
        """Validate and store one incoming message (a batch of one).

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
            incoming = decode(self.prefix, topic, payload, received, retained)
        except TelemetryError as exc:
            self.count_rejected(str(exc))
            return "rejected"
        return self.write_one(incoming)

    def count_rejected(self, reason: str) -> None:
        """Count a message that was not stored (in its own transaction), and keep why (``last_rejection``)."""
        self.last_rejection = reason
        self.write([], rejected=1)

    def write_one(self, item: Incoming) -> str:
        """Commit one decoded message; one the database refuses (e.g. a row too large) is rejected.

        Returns:
            ``"stored"``, ``"duplicate"``, ``"status"`` or ``"rejected"`` (see ``last_rejection``).

        Raises:
            StoreUnavailable: the database can't be reached; retry.
        """
        result = self.commit([item])
        if result.rejected:
            return "rejected"
        if result.statuses:
            return "status"
        return "stored" if result.stored else "duplicate"

    # -- reading ----------------------------------------------------------------------------------------

    def _rows(self, sql: str, params: tuple = ()) -> list[tuple]:
        """Run one read query (``?`` placeholders) and return all rows."""
        raise NotImplementedError

    def _counter(self, name: str) -> int:
        rows = self._rows("SELECT value FROM counters WHERE name = ?", (name,))
        return int(rows[0][0]) if rows else 0

    @property
    def duplicates(self) -> int:
        """Copies of already stored reports received and dropped (since the database was created)."""
        return self._counter("duplicates")

    @property
    def rejected(self) -> int:
        """Malformed or misaddressed messages received (since the database was created)."""
        return self._counter("rejected")

    def count(self, device_id: str | None = None) -> int:
        """Number of distinct reports stored, for one device or all."""
        if device_id is None:
            return int(self._rows("SELECT COUNT(*) FROM messages")[0][0])
        return int(self._rows("SELECT COUNT(*) FROM messages WHERE device_id = ?", (device_id,))[0][0])

    def seqs(self, device_id: str) -> list[int]:
        """Sequence numbers stored for a device, ascending."""
        return [r[0] for r in self._rows("SELECT seq FROM messages WHERE device_id = ? ORDER BY seq", (device_id,))]

    def latest(self, kind: MessageKind, device_id: str | None = None, limit: int = 1) -> dict[str, list[dict]]:
        """The newest ``limit`` reports of ``kind`` per device (highest seq first), as dicts.

        ``limit`` 1 reads the ``latest`` table (one row per device and kind, kept on insert); more reads each
        device's newest rows of ``messages`` through its primary key.

        Args:
            kind: telemetry, bench or result.
            device_id: one device, or every device.
            limit: reports per device.

        Returns:
            ``{device_id: [report, ...]}`` for devices that have such reports.
        """
        where, params = ("AND device_id = ?", (device_id,)) if device_id is not None else ("", ())
        newest = self._rows(
            f"SELECT device_id, payload FROM latest WHERE kind = ? {where} ORDER BY device_id", (kind.value, *params)
        )
        if limit == 1:
            return {dev: [body_of(payload)] for dev, payload in newest}
        out: dict[str, list[dict]] = {}
        for dev, _payload in newest:
            rows = self._rows(
                "SELECT payload FROM messages WHERE device_id = ? AND kind = ? ORDER BY seq DESC LIMIT ?",
                (dev, kind.value, int(limit)),
            )
            out[dev] = [body_of(payload) for (payload,) in rows]
        return out

    def results(self, tasks: tuple[str, ...], device_id: str | None = None) -> list[dict]:
        """Result reports whose ``task`` is one of ``tasks`` (e.g. ``update.accepted``), by device then seq.

        Args:
            tasks: the tasks wanted.
            device_id: one device, or every device.

        Returns:
            The reports as dicts, oldest first per device.
        """
        if not tasks:
            return []
        likes = " OR ".join("payload LIKE ?" for _ in tasks)  # a cheap prefilter; the JSON decides
        where, params = ("AND device_id = ?", (device_id,)) if device_id is not None else ("", ())
        rows = self._rows(
            f"SELECT payload FROM messages WHERE kind = ? AND ({likes}) {where} ORDER BY device_id, seq",
            (MessageKind.RESULT.value, *(f"%{t}%" for t in tasks), *params),
        )
        bodies = (body_of(payload) for (payload,) in rows)
        return [b for b in bodies if b.get("task") in tasks]

    def devices(self, offset: int = 0, limit: int | None = None) -> list[DeviceRow]:
        """The fleet table: one row per device seen, sorted by device id.

        Args:
            offset: rows to skip (with ``limit``: a page of the table).
            limit: rows at most; None: every device (``offset`` then ignored).
        """
        sql = (  # each device's newest telemetry and report count from ``latest``: never a scan of ``messages``
            "SELECT d.device_id, state, status, last_seen, last_error, reports, payload FROM devices AS d LEFT JOIN "
            "(SELECT device_id, SUM(reports) AS reports, MAX(CASE WHEN kind = ? THEN payload END) AS payload "
            "FROM latest GROUP BY device_id) AS l ON l.device_id = d.device_id ORDER BY d.device_id"
        )
        params: tuple = (MessageKind.TELEMETRY.value,)
        if limit is not None:
            sql, params = sql + " LIMIT ? OFFSET ?", (*params, int(limit), int(offset))
        rows = []
        for device_id, state, status, last_seen, last_error, reports, payload in self._rows(sql, params):
            t = body_of(payload) if payload is not None else {}
            rows.append(
                DeviceRow(
                    device_id=device_id,
                    online=online_of(state),
                    latency_p50_ms=t.get("latency_p50_ms"),
                    latency_p90_ms=t.get("latency_p90_ms"),
                    fps=t.get("fps"),
                    temperature_c=t.get("temperature_c"),
                    last_seen=last_seen,
                    reports=int(reports or 0),
                    dropped=body_of(status)["dropped"] if status else 0,
                    last_error=last_error,
                )
            )
        return rows

    def state_counts(self) -> dict[str, int]:
        """``{"devices": n, "online": n, "offline": n}`` over the whole fleet (one aggregate query)."""
        counts = {"devices": 0, "online": 0, "offline": 0}
        for state, n in self._rows("SELECT state, COUNT(*) FROM devices GROUP BY state"):
            counts["devices"] += int(n)
            online = online_of(state)
            if online is not None:
                counts["online" if online else "offline"] += int(n)
        return counts

    def running(self, device_ids: tuple[str, ...] | None = None) -> list[Running]:
        """What each device (or each of ``device_ids``) runs now: its newest telemetry that named a model."""
        cols = ", ".join(RUNNING_COLUMNS)
        where = "" if device_ids is None else f"WHERE device_id IN ({', '.join('?' * len(device_ids))})"
        if device_ids is not None and not device_ids:
            return []
        rows = self._rows(
            f"SELECT device_id, {cols}, first_seen, last_seen FROM (SELECT *, ROW_NUMBER() OVER "
            f"(PARTITION BY device_id ORDER BY last_seen DESC) AS rank FROM running {where}) AS r WHERE rank = 1 "
            "ORDER BY device_id",
            tuple(device_ids or ()),
        )
        return [Running(*row) for row in rows]

    def models_in_use(self) -> list[tuple[str, str, str, str, int]]:
        """(model, model_version, precision, runtime, devices) over what every device runs now, most used first."""
        rows = self._rows(
            "SELECT model, model_version, precision, runtime, COUNT(*) FROM (SELECT *, ROW_NUMBER() OVER "
            "(PARTITION BY device_id ORDER BY last_seen DESC) AS rank FROM running) AS r WHERE rank = 1 "
            "GROUP BY model, model_version, precision, runtime ORDER BY COUNT(*) DESC, model, model_version"
        )
        return [(*row[:4], int(row[4])) for row in rows]

    def running_history(self, device_id: str) -> list[Running]:
        """Everything ``device_id`` was seen running, oldest first."""
        cols = ", ".join(RUNNING_COLUMNS)
        rows = self._rows(
            f"SELECT device_id, {cols}, first_seen, last_seen FROM running WHERE device_id = ? ORDER BY first_seen",
            (device_id,),
        )
        return [Running(*row) for row in rows]

    def telemetry(
        self,
        device_id: str | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: int | None = None,
    ) -> list[dict]:
        """Telemetry reports as dicts of ``CSV_COLUMNS``, by device then seq.

        Args:
            device_id: one device, or all.
            since: only reports made at or after this time (Unix seconds, the device's clock).
            until: only reports made at or before this time.
            limit: only the newest ``limit`` reports (highest ``stored`` first, then returned in order).
        """
        sql = "SELECT device_id, seq, payload FROM messages WHERE kind = ?"
        params: list[Any] = [MessageKind.TELEMETRY.value]
        for clause, value in (("device_id = ?", device_id), ("timestamp >= ?", since), ("timestamp <= ?", until)):
            if value is not None:
                sql, params = f"{sql} AND {clause}", [*params, value]
        if limit is not None:  # the newest by arrival (``stored``), so a device's clock can't pick what is kept
            sql, params = f"{sql} ORDER BY stored DESC, seq DESC LIMIT ?", [*params, int(limit)]
            sql = f"SELECT device_id, seq, payload FROM ({sql}) AS newest"
        out = []
        for _dev, _seq, payload in self._rows(sql + " ORDER BY device_id, seq", tuple(params)):
            body = body_of(payload)
            out.append({k: body.get(k) for k in CSV_COLUMNS})
        return out

    # -- dashboard queries (fleet/dashboard_page.py, fleet/alerts.py) ------------------------------------

    def recent_results(
        self, tasks: tuple[str, ...], device_id: str | None = None, since: float | None = None, limit: int = 100
    ) -> list[dict]:
        """The newest result reports whose ``task`` is one of ``tasks``, newest first (bounded by ``limit``).

        Args:
            tasks: the tasks wanted, e.g. ``("face.identify",)``.
            device_id: one device, or every device.
            since: only reports made at or after this time (Unix seconds, the device's clock).
            limit: reports at most (of those the prefilter passes).

        Returns:
            The reports as dicts (``device_id``, ``timestamp``, ``task``, ``data``...).
        """
        if not tasks:
            return []
        likes = " OR ".join("payload LIKE ?" for _ in tasks)  # a cheap prefilter; the JSON decides
        sql, params = f"SELECT payload FROM messages WHERE kind = ? AND ({likes})", [MessageKind.RESULT.value]
        params += [f"%{t}%" for t in tasks]
        for clause, value in (("device_id = ?", device_id), ("timestamp >= ?", since)):
            if value is not None:
                sql, params = f"{sql} AND {clause}", [*params, value]
        rows = self._rows(f"{sql} ORDER BY timestamp DESC LIMIT ?", (*params, int(limit)))
        return [b for b in (body_of(p) for (p,) in rows) if b.get("task") in tasks]

    def device(self, device_id: str) -> DeviceRow | None:
        """One device's row of the fleet table (``devices``' row at its place in id order), or None."""
        rows = self._rows("SELECT COUNT(*) FROM devices WHERE device_id < ?", (device_id,))
        found = self.devices(offset=int(rows[0][0]), limit=1)
        return found[0] if found and found[0].device_id == device_id else None

    def export_csv(self, path: Path, limit: int | None = None) -> int:
        """Write telemetry reports as CSV (``CSV_COLUMNS``); return the number of data rows.

        Args:
            path: the CSV file (parent created).
            limit: only the newest ``limit`` reports (None: all).

        Raises:
            TelemetryError: if the file can't be written.
        """
        rows = self.telemetry(limit=limit)
        try:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            with open(path, "w", newline="", encoding="utf-8") as fh:
                writer = csv.DictWriter(fh, fieldnames=CSV_COLUMNS)
                writer.writeheader()
                writer.writerows(rows)
        except OSError as exc:
            raise TelemetryError(f"cannot write CSV {path}: {exc}") from exc
        return len(rows)

    def maintain(self, retention_days: int | None, now: float | None = None) -> int:
        """Keep the store's shape: make the coming days' partitions (PostgreSQL) and drop reports whose
        ``timestamp`` is more than ``retention_days`` before ``now`` (None: keep every report).

        PostgreSQL drops whole daily partitions once all their day is past the retention, and deletes the
        rest (reports with a timestamp before the oldest partition, or an unpartitioned table an older
        edge-deploy made) in batches; SQLite deletes in batches of ``RETENTION_BATCH`` rows, each its own short
        transaction, so ingest is never blocked for long. The ``latest`` table's report counts follow.

        Returns:
            The number of reports removed.

        Raises:
            StoreUnavailable: the database can't be reached (try again at the next run).
        """
        raise NotImplementedError

    def close(self) -> None:
        """Close the database connections."""
        raise NotImplementedError

    def __enter__(self) -> FleetStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


@dataclass(frozen=True)
class BatchPlan:
    """A batch sorted for writing.

    Attributes:
        reports: the first copy of each (device_id, seq), in arrival order.
        statuses: status messages in arrival order (the newest to arrive wins).
        seen: newest sighting per device, sorted by device id (rows are locked in that order).
        errors: (device_id, timestamp, text) of the newest error result per device, sorted.
    """

    reports: list[Incoming]
    statuses: list[Incoming]
    seen: list[tuple[str, float]]
    errors: list[tuple[str, float, str]]


def plan_batch(batch: list[Incoming]) -> BatchPlan:
    """Split a batch for writing (see ``BatchPlan``)."""
    reports: dict[tuple[str, int], Incoming] = {}
    statuses: list[Incoming] = []
    seen: dict[str, float] = {}
    errors: dict[str, tuple[float, str]] = {}
    for item in batch:
        seen[item.device_id] = max(seen.get(item.device_id, item.seen_at), item.seen_at)
        if item.kind is MessageKind.STATUS:
            statuses.append(item)
            continue
        reports.setdefault((item.device_id, item.message.seq), item)
        error = item.error
        if error is not None and item.message.timestamp >= errors.get(item.device_id, (-1.0, ""))[0]:
            errors[item.device_id] = (item.message.timestamp, error)
    return BatchPlan(
        list(reports.values()),
        statuses,
        sorted(seen.items()),
        [(dev, ts, text) for dev, (ts, text) in sorted(errors.items())],
    )


def _newer(column: str, table: str, pick: str = ">") -> str:
    """``column = the larger (or smaller) of the row's and the new value`` in portable SQL (upsert)."""
    new, old = f"excluded.{column}", f"{table}.{column}"
    return f"{column} = CASE WHEN {new} {pick} {old} THEN {new} ELSE {old} END"


def plan_statements(plan: BatchPlan) -> dict[str, tuple[str, list[tuple]]]:
    """The device-row and model-history statements of a batch (``?`` placeholders), both backends' SQL.

    Returns:
        ``{"seen" | "statuses" | "errors" | "running": (sql, rows)}``, in the order to run them. Rows are
        sorted by device id, so concurrent writers lock rows in one order and never deadlock.
    """
    return {
        "seen": (
            f"INSERT INTO devices (device_id, last_seen) VALUES (?, ?) ON CONFLICT (device_id) DO UPDATE SET "
            f"{_newer('last_seen', 'devices')}",
            plan.seen,
        ),
        "statuses": (
            "UPDATE devices SET state = ?, status = ? WHERE device_id = ?",
            [(s.message.state.value, s.text, s.device_id) for s in plan.statuses],
        ),
        "errors": (
            "UPDATE devices SET last_error_at = ?, last_error = ? WHERE device_id = ? "
            "AND (last_error_at IS NULL OR last_error_at <= ?)",
            [(ts, text, dev, ts) for dev, ts, text in plan.errors],
        ),
        "running": (
            f"INSERT INTO running VALUES ({', '.join('?' * (len(RUNNING_COLUMNS) + 3))}) ON CONFLICT ({RUNNING_KEY}) "
            f"DO UPDATE SET {_newer('first_seen', 'running', '<')}, {_newer('last_seen', 'running')}",
            running_rows(plan.reports),
        ),
    }


def running_rows(reports: list[Incoming]) -> list[tuple]:
    """``running`` rows (device_id, *RUNNING_COLUMNS, first_seen, last_seen), one per thing a device ran, sorted."""
    spans: dict[tuple, tuple[float, float]] = {}
    for item in reports:
        running = item.running
        if running is not None:
            key, ts = (item.device_id, *running), item.message.timestamp
            first, last = spans.get(key, (ts, ts))
            spans[key] = (min(first, ts), max(last, ts))
    return [(*key, first, last) for key, (first, last) in sorted(spans.items())]


def open_store(target: str | Path, prefix: str = "edge-deploy") -> FleetStore:
    """Open the store ``target`` names: a ``postgresql://`` URL, else a SQLite file path.

    Raises:
        TelemetryError: if the database can't be opened or set up.
        MissingDependencyError: for PostgreSQL without psycopg (the ``fleet`` extra).
    """
    text = str(target)
    if text.startswith(("postgresql://", "postgres://")):
        from fleet.store_postgres import PostgresStore

        return PostgresStore(text, prefix)
    from fleet.store_sqlite import SqliteStore

    return SqliteStore(Path(text), prefix)
