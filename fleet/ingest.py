"""Ingest: subscribe to the fleet's topics and commit what arrives, acknowledging only what is committed.

The monitor speaks MQTT v5 over paho with manual acknowledgement: a received message is only queued (the
PUBLISH frames the socket holds are read in bulk by ``fleet.frames``, anything else by paho); after each
network-loop step the queue is committed to the store as one batch (when it is full, or its oldest message
has waited ``flush_s``), and only then are the batch's PUBACKs sent, in one write. A monitor killed
between arrival and commit never acknowledged those messages, so the broker redelivers them to its
persistent session (fixed client id, a session that never expires) when it comes back; the store's
(device_id, seq) key drops the copies that were already committed. While the store is down, batches are
retried with backoff and nothing is acknowledged; the v5 Receive Maximum stops the broker from sending
more than ``receive_maximum`` unacknowledged messages, so memory stays bounded and the broker queues the
rest; the outage is logged once when it starts (then once a minute) and once when it ends. A message that
can never be stored is counted as rejected and acknowledged, resending can't fix it: one ``decode`` refuses
(malformed, misaddressed, a string beyond its bound, a timestamp from the future) in the same transaction,
one the database refuses (``DataRefused``) after ``FleetStore.commit`` has isolated it from the rest of its
batch.

``shared_group`` subscribes through ``$share/<group>/<prefix>/#``: the broker hands each message to one
member of the group, so N monitors split the stream.
"""

from __future__ import annotations

import logging
import queue
import random
import re
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from edge.errors import TelemetryError
from edge.telemetry.link import BrokerConfig, Link, LinkHooks, backoff_delay
from edge.telemetry.schema import check_prefix
from fleet.frames import pubacks, split_publishes
from fleet.records import MAX_CLOCK_SKEW_S, Incoming, WriteResult, decode
from fleet.store import FleetStore, StoreUnavailable, open_store

log = logging.getLogger(__name__)
_GROUP_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
#: Seconds between two log lines about the same ongoing problem (an outage, rejected messages).
LOG_EVERY_S = 60.0
#: How many bytes of the socket one bulk read looks at (a full batch of ~500-byte reports).
_PEEK_BYTES = 256 * 1024
#: MQTT PUBACK packet type (the first byte of a PUBACK).
PUBACK = 0x40


class BrokerUnreachable(TelemetryError):
    """The monitor never reached its broker during a watch (exit code 8, as every telemetry error)."""

    exit_code = 8


@dataclass(frozen=True)
class MonitorConfig:
    """Where the monitor listens and stores.

    Attributes:
        broker: the broker to subscribe to.
        db_path: the store: a SQLite file, or a ``postgresql://`` URL.
        prefix: topic prefix the devices publish under.
        client_id: MQTT client id; keep it fixed so the broker keeps the session between runs (one per
            instance when several share a group).
        persistent_session: let the broker queue reports while the monitor is away.
        shared_group: subscribe as a member of this MQTT v5 shared-subscription group (None: alone).
        batch_max: commit at most this many messages per transaction.
        flush_s: commit a partial batch once its oldest message waited this long (the most ingest adds to a
            report's lag; at high rates batches fill first, which keeps the CPU per message low).
        receive_maximum: unacknowledged messages the broker may have in flight to this monitor.
        max_skew_s: how far a message's timestamp may be ahead of the monitor's clock (seconds).
        retention_days: drop reports whose timestamp is older than this many days (None: keep all); see
            ``FleetStore.maintain``, which the monitor runs at start and then every ``maintain_every_s``.
        maintain_every_s: seconds between two runs of the store's maintenance.
    """

    broker: BrokerConfig
    db_path: Path | str
    prefix: str = "edge-deploy"
    client_id: str = "edge-deploy-monitor"
    persistent_session: bool = True
    shared_group: str | None = None
    batch_max: int = 1000
    flush_s: float = 0.2
    receive_maximum: int = 2000
    max_skew_s: float = MAX_CLOCK_SKEW_S
    retention_days: int | None = None
    maintain_every_s: float = 3600.0

    def __post_init__(self) -> None:
        check_prefix(self.prefix)
        if self.shared_group is not None and not _GROUP_RE.match(self.shared_group):
            raise TelemetryError(
                f"shared group = {self.shared_group!r}; expected 1-64 letters, digits, '_', '.', ':' or '-'"
            )
        for key, low, high in (("batch_max", 1, 65535), ("receive_maximum", 1, 65535)):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise TelemetryError(f"monitor {key} = {value!r}; expected an integer in {low}..{high}")
        days = self.retention_days
        if days is not None and (isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= 36500):
            raise TelemetryError(
                f"monitor retention_days = {days!r}; expected a whole number of days in 1..36500 (or none: keep all)"
            )
        for key, top in (("flush_s", 10.0), ("max_skew_s", 86400.0), ("maintain_every_s", 86400.0)):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= top:
                raise TelemetryError(f"monitor {key} = {value!r}; expected a number in (0, {top:g}]")

    @property
    def topic(self) -> str:
        """The subscription: ``<prefix>/#``, or ``$share/<group>/<prefix>/#`` in a shared group."""
        base = f"{self.prefix}/#"
        return base if self.shared_group is None else f"$share/{self.shared_group}/{base}"


@dataclass
class _Pending:
    """Messages received and not yet committed, with what is needed to acknowledge them."""

    items: list[tuple[str, bytes, float, bool, int, int]]
    since: float = 0.0


class Monitor(LinkHooks):
    """Subscribes to a fleet's topics and keeps a deduplicated record in a fleet store. Call ``close``.

    Args:
        config: broker, store and prefix.
        store: an open store to write to (default: ``open_store(config.db_path)``, closed by ``close``).

    Raises:
        TelemetryError: if the store can't be opened.
    """

    def __init__(self, config: MonitorConfig, store: FleetStore | None = None) -> None:
        self.config = config
        self._own_store = store is None
        self.store = open_store(config.db_path, config.prefix) if store is None else store
        self.committed = 0
        self.store_error: str | None = None
        self._pending = _Pending([])
        self._arrived = 0
        self._retry_at = 0.0
        self._failures = 0
        self._down_since: float | None = None
        self._down_logged = 0.0
        self._unlogged_rejections = 0
        self._rejections_logged = -LOG_EVERY_S
        self._rng = random.Random()
        self._outgoing: queue.SimpleQueue[tuple[str, str]] = queue.SimpleQueue()
        self._subscribed = threading.Event()
        self._stopping = threading.Event()
        self._maintainer: threading.Thread | None = None
        #: Whether the monitor was subscribed at any time since it started.
        self.ever_subscribed = False
        self._link = Link(
            config.broker,
            config.client_id,
            self,
            clean_session=not config.persistent_session,
            name="monitor",
            mqtt5=True,
            receive_maximum=config.receive_maximum,
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
        if self._maintainer is None:
            self._maintainer = threading.Thread(target=self._maintain_loop, name="monitor-maintain", daemon=True)
            self._maintainer.start()
        if not self._link.wait_connected(timeout):
            return False
        return self._subscribed.wait(max(deadline - time.monotonic(), 0.0))

    @property
    def connected(self) -> bool:
        """Whether the monitor is connected and subscribed."""
        return self._subscribed.is_set()

    @property
    def last_error(self) -> str | None:
        """The last connection or store problem, if any."""
        return self._link.last_error or self.store_error

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

    def stop(self, timeout: float = 5.0) -> None:
        """Stop ingesting: commit and acknowledge what has arrived, disconnect (the broker keeps the session).

        The store stays open for reading (the final table and the export); calling it again does nothing.
        """
        self._stopping.set()
        if self._maintainer is not None:
            self._maintainer.join(timeout)
        self._link.stop(timeout)

    def maintain(self) -> int:
        """Run the store's maintenance now (``FleetStore.maintain`` with ``retention_days``); log what it removed.

        Returns:
            The number of reports removed (0 when the store was unavailable: logged, tried again next time).
        """
        try:
            removed = self.store.maintain(self.config.retention_days)
        except StoreUnavailable as exc:
            log.warning("monitor: store maintenance failed, next try in %.0f s: %s", self.config.maintain_every_s, exc)
            return 0
        if removed:
            log.info("monitor: retention removed %d report(s) (retention_days %s)", removed, self.config.retention_days)
        return removed

    def _maintain_loop(self) -> None:
        while not self._stopping.is_set():
            self.maintain()
            self._stopping.wait(self.config.maintain_every_s)

    def close(self, timeout: float = 5.0) -> None:
        """Stop ingesting (see ``stop``), close the store."""
        self.stop(timeout)
        if self._own_store:
            self.store.close()
        self.check()

    def __enter__(self) -> Monitor:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- link hooks (link thread) -------------------------------------------------------------------

    def configure(self, client: object) -> None:  # noqa: D102
        client.manual_ack_set(True)
        client.on_message = self._on_message
        client.on_subscribe = self._on_subscribe
        paho_read = client.loop_read

        def loop_read(max_packets: int = 1) -> int:
            # paho's loop step reads through this: the PUBLISH frames the socket holds first, in bulk.
            return 0 if self._take_publishes(client) else paho_read(max_packets)

        client.loop_read = loop_read

    def on_connected(self, client: object) -> None:  # noqa: D102
        client.subscribe(self.config.topic, qos=1)

    def _on_subscribe(self, client, userdata, mid, reason_codes, properties) -> None:
        if any(rc.is_failure for rc in reason_codes):
            self._link.last_error = (
                f"broker {self.config.broker.address} refused the subscription {self.config.topic} {reason_codes}"
            )
        else:
            self.ever_subscribed = True
            self._subscribed.set()

    def _on_message(self, client, userdata, message) -> None:
        self._arrived += 1
        now = time.time()
        if not self._pending.items:
            self._pending.since = time.monotonic()
        self._pending.items.append(
            (message.topic, message.payload, now, bool(message.retain), message.mid, message.qos)
        )

    def publish(self, topic: str, payload: str) -> None:
        """Publish ``payload`` retained at QoS 1 on ``topic`` from the monitor's connection (e.g. an alert); sent
        by the link thread at its next turn while connected."""
        self._outgoing.put((topic, payload))

    def tick(self, client: object) -> bool:  # noqa: D102
        while not self._outgoing.empty():
            client.publish(*self._outgoing.get(), qos=1, retain=True)
        pending = self._pending
        if self._arrived:
            self._read_burst(client)
        self._arrived = 0
        if not pending.items or time.monotonic() < self._retry_at:
            return True
        # Commit when the batch is full or its oldest waited flush_s. Committing whenever the socket was found
        # empty made batches small where the stream is split (a shared group) or the broker briefly slow: two
        # monitors then spent 1.4x the CPU per message of one, the store's commits more.
        if len(pending.items) >= self.config.batch_max or time.monotonic() - pending.since >= self.config.flush_s:
            self._flush(client)
        return True

    def _read_burst(self, client) -> None:
        """Read the packets the socket already holds, up to a full batch.

        paho's loop step reads one packet (after a ``select``, then the link's tick) in four ``recv`` calls and
        parses it into objects. Its ``loop_read`` is replaced (``configure``): the PUBLISH frames at the head of
        the socket are peeked, parsed by ``fleet.frames`` and consumed in one read; what that leaves (another
        packet type, a frame not yet complete, a TLS socket) paho reads.
        """
        from paho.mqtt.client import MQTT_ERR_SUCCESS as ok

        while len(self._pending.items) < self.config.batch_max:
            before = self._arrived
            if client.loop_read() != ok or self._arrived == before:
                return

    def _take_publishes(self, client) -> int:
        """Move the complete PUBLISH frames at the head of paho's socket into the batch; how many were taken."""
        sock = client.socket()
        reading = getattr(client, "_in_packet", {}).get("command", 1)  # paho's packet in progress (0: none)
        if type(sock) is not socket.socket or reading != 0:
            return 0  # TLS (no MSG_PEEK), or paho is in the middle of a packet
        try:
            head = sock.recv(_PEEK_BYTES, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except OSError:
            return 0  # nothing yet (BlockingIOError), or a broken connection paho will find
        publishes, size = split_publishes(head, len(head))  # the broker's Receive Maximum bounds what it sent
        if not publishes:
            return 0
        while size:
            size -= len(sock.recv(size))  # the bytes are in the kernel's buffer: this does not block
        client._last_bytes_received = time.monotonic()  # paho's keepalive clock
        pending = self._pending
        if not pending.items:
            pending.since = time.monotonic()
        now = time.time()
        pending.items.extend((p.topic, p.payload, now, p.retain, p.mid, p.qos) for p in publishes)
        self._arrived += len(publishes)
        return len(publishes)

    def on_stopping(self, client: object) -> None:  # noqa: D102
        # Take what is already in flight (paho reads about a packet a step), so the commit below includes it.
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            before = len(self._pending.items)
            client.loop(0.02)
            if len(self._pending.items) == before:
                break
        if self._pending.items:
            self._flush(client)
            client.loop(0.05)  # send the last acknowledgements before DISCONNECT

    def on_lost(self) -> None:  # noqa: D102
        # Unacknowledged messages die with the connection: the broker redelivers them to the session.
        self._pending = _Pending([])
        self._subscribed.clear()

    def _flush(self, client: object) -> None:
        """Commit up to ``batch_max`` pending messages, then acknowledge them; on a store outage retry later."""
        items = self._pending.items[: self.config.batch_max]
        try:
            result = commit_messages(self.store, self.config.prefix, [i[:4] for i in items], self.config.max_skew_s)
        except StoreUnavailable as exc:
            self._store_down(exc, len(items))
            return
        self._store_up(len(items))
        self._note_rejections(result.rejected)
        self.committed += len(items)
        del self._pending.items[: len(items)]
        self._pending.since = time.monotonic()
        mids = [mid for *_, mid, qos in items if qos == 1]
        if mids:  # one write for the batch's PUBACKs, queued behind anything paho has yet to send
            client._packet_queue(PUBACK, pubacks(mids), 0, 0)

    def _store_down(self, exc: StoreUnavailable, waiting: int) -> None:
        """Schedule the retry (backoff with jitter); log when the outage starts, then once a minute."""
        now = time.monotonic()
        self.store_error = str(exc)
        self._retry_at = now + backoff_delay(self._failures, 0.2, 5.0, self._rng)
        self._failures += 1
        if self._down_since is None:
            self._down_since = self._down_logged = now
            log.warning(
                "monitor: fleet store unavailable (%s); %d message(s) wait unacknowledged, retrying with backoff",
                exc,
                waiting,
            )
        elif now - self._down_logged >= LOG_EVERY_S:
            self._down_logged = now
            log.warning(
                "monitor: fleet store still unavailable after %.0f s (%s); %d message(s) wait",
                now - self._down_since,
                exc,
                waiting,
            )

    def _store_up(self, committed: int) -> None:
        if self._down_since is not None:
            log.warning(
                "monitor: fleet store back after %.1f s; %d message(s) committed",
                time.monotonic() - self._down_since,
                committed,
            )
        self._down_since, self._failures, self.store_error = None, 0, None

    def _note_rejections(self, count: int) -> None:
        """Log rejected messages: the first at once, then at most one line a minute (a flood stays one line)."""
        self._unlogged_rejections += count
        now = time.monotonic()
        if self._unlogged_rejections and now - self._rejections_logged >= LOG_EVERY_S:
            log.warning(
                "monitor: %d message(s) rejected (the last: %s)", self._unlogged_rejections, self.store.last_rejection
            )
            self._unlogged_rejections, self._rejections_logged = 0, now


def commit_messages(
    store: FleetStore,
    prefix: str,
    items: list[tuple[str, bytes, float, bool]],
    max_skew_s: float = MAX_CLOCK_SKEW_S,
) -> WriteResult:
    """Decode and commit one delivery of messages off the broker: the monitor's path from payload to row.

    Args:
        store: where to commit.
        prefix: the fleet's topic prefix.
        items: ``(topic, payload, received, retained)`` per message, in arrival order.
        max_skew_s: how far a timestamp may be ahead of its arrival (seconds).

    Returns:
        What was committed; ``rejected`` counts the messages ``decode`` or the database refused
        (``store.last_rejection`` says why, for the last of them).

    Raises:
        StoreUnavailable: the store is down; retry the delivery (what was committed is deduplicated).
    """
    batch: list[Incoming] = []
    rejected = 0
    for topic, payload, received, retained in items:
        try:
            batch.append(decode(prefix, topic, payload, received, retained, max_skew_s))
        except TelemetryError as exc:
            store.last_rejection = str(exc)
            rejected += 1
        except Exception as exc:  # noqa: BLE001 - a network boundary: a poison message must not stop ingest
            log.exception("monitor: message on %r not readable", topic)
            store.last_rejection = f"topic {topic}: not readable ({type(exc).__name__}: {exc})"[:300]
            rejected += 1
    return store.commit(batch, rejected)
