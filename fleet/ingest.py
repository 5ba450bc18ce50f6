"""Ingest: subscribe to the fleet's topics and commit what arrives, acknowledging only what is committed.

The monitor speaks MQTT v5 with paho's manual acknowledgement: ``on_message`` only queues a message;
after each network-loop step the queue is committed to the store as one batch (when it is full, its
oldest message has waited ``flush_s``, or a loop step brought no new message: the socket is drained), and
only then is each message's PUBACK sent. A monitor killed
between arrival and commit never acknowledged those messages, so the broker redelivers them to its
persistent session (fixed client id, a session that never expires) when it comes back; the store's
(device_id, seq) key drops the copies that were already committed. While the store is down, batches are
retried with backoff and nothing is acknowledged; the v5 Receive Maximum stops the broker from sending
more than ``receive_maximum`` unacknowledged messages, so memory stays bounded and the broker queues the
rest. A message that can never be stored (malformed, misaddressed) is counted as rejected in the same
transaction and acknowledged: resending can't fix it.

``shared_group`` subscribes through ``$share/<group>/<prefix>/#``: the broker hands each message to one
member of the group, so N monitors split the stream.
"""

from __future__ import annotations

import logging
import random
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from edge.errors import TelemetryError
from edge.telemetry.link import BrokerConfig, Link, LinkHooks, backoff_delay
from edge.telemetry.schema import check_prefix
from fleet.records import Incoming, decode
from fleet.store import FleetStore, StoreUnavailable, open_store

log = logging.getLogger(__name__)
_GROUP_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")


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
        flush_s: commit a partial batch once its oldest message waited this long.
        receive_maximum: unacknowledged messages the broker may have in flight to this monitor.
    """

    broker: BrokerConfig
    db_path: Path | str
    prefix: str = "edge-deploy"
    client_id: str = "edge-deploy-monitor"
    persistent_session: bool = True
    shared_group: str | None = None
    batch_max: int = 500
    flush_s: float = 0.05
    receive_maximum: int = 1000

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
        if isinstance(self.flush_s, bool) or not isinstance(self.flush_s, int | float) or not 0 < self.flush_s <= 10:
            raise TelemetryError(f"monitor flush_s = {self.flush_s!r}; expected a number in (0, 10]")

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
        self._rng = random.Random()
        self._subscribed = threading.Event()
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
        self._link.stop(timeout)

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

    def on_connected(self, client: object) -> None:  # noqa: D102
        client.subscribe(self.config.topic, qos=1)

    def _on_subscribe(self, client, userdata, mid, reason_codes, properties) -> None:
        if any(rc.is_failure for rc in reason_codes):
            self._link.last_error = (
                f"broker {self.config.broker.address} refused the subscription {self.config.topic} {reason_codes}"
            )
        else:
            self._subscribed.set()

    def _on_message(self, client, userdata, message) -> None:
        self._arrived += 1
        now = time.time()
        if not self._pending.items:
            self._pending.since = time.monotonic()
        self._pending.items.append(
            (message.topic, message.payload, now, bool(message.retain), message.mid, message.qos)
        )

    def tick(self, client: object) -> bool:  # noqa: D102
        pending = self._pending
        arrived, self._arrived = self._arrived, 0
        if not pending.items or time.monotonic() < self._retry_at:
            return True
        # Commit when the batch is full, when its oldest waited flush_s, or as soon as a loop step brought
        # nothing (the socket is drained): waiting for more then only delays the acknowledgements.
        if (
            not arrived
            or len(pending.items) >= self.config.batch_max
            or time.monotonic() - pending.since >= self.config.flush_s
        ):
            self._flush(client)
        return True

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
        batch, rejected = self._decode(items)
        try:
            self._commit(batch, rejected)
        except StoreUnavailable as exc:
            self.store_error = str(exc)
            self._retry_at = time.monotonic() + backoff_delay(self._failures, 0.2, 5.0, self._rng)
            self._failures += 1
            return
        self._failures, self.store_error = 0, None
        self.committed += len(items)
        del self._pending.items[: len(items)]
        self._pending.since = time.monotonic()
        for *_, mid, qos in items:
            if qos > 0:
                client.ack(mid, qos)

    def _decode(self, items: list[tuple]) -> tuple[list[Incoming], int]:
        batch, rejected = [], 0
        for topic, payload, received, retained, _mid, _qos in items:
            try:
                batch.append(decode(self.config.prefix, topic, payload, received, retained))
            except TelemetryError as exc:
                self.store.last_rejection = str(exc)
                rejected += 1
            except Exception as exc:  # noqa: BLE001 - a network boundary: a poison message must not stop ingest
                log.exception("monitor: message on %r not readable", topic)
                self.store.last_rejection = f"topic {topic}: not readable ({type(exc).__name__}: {exc})"[:300]
                rejected += 1
        return batch, rejected

    def _commit(self, batch: list[Incoming], rejected: int) -> None:
        """Write the batch; if the database refuses its data (not an outage), write one by one, rejecting the bad.

        Raises:
            StoreUnavailable: the store is down (what was committed so far is deduplicated on the retry).
        """
        try:
            self.store.write(batch, rejected)
            return
        except StoreUnavailable:
            raise
        except TelemetryError:
            pass  # e.g. a number beyond the database's range: find the message(s) it refuses
        for item in batch:
            self.store.write_one(item)
        self.store.write([], rejected)
