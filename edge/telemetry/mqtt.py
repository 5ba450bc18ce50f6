"""The device's telemetry client: reports go to the durable outbox, a background link drains it.

``TelemetryClient.report`` numbers the message and hands it to the SQLite outbox, whose writer thread
group-commits it to disk within ``commit_interval_s``; it returns at once and never waits for the network
(nor, unless asked with ``wait=True``, for the disk).

The link thread publishes outbox rows with QoS 1 (at most ``queue_bound`` in flight) and
deletes a row only when the broker's PUBACK for it arrived. After a reconnect every row still in the
outbox is sent again, so a message may arrive twice: consumers drop duplicates by (device_id, seq).

On connect the client publishes a retained ``online`` status; its last will (set before connecting) is a
retained ``offline`` status, and ``close`` publishes ``offline`` itself (a clean disconnect fires no will).
Bad credentials raise ``TelemetryError`` from ``connect``/``check``/``close`` and stop the retries.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from edge.errors import TelemetryError
from edge.telemetry.homeassistant import DEFAULT_HA_PREFIX, discovery_messages
from edge.telemetry.link import BrokerConfig, Link, LinkHooks, MqttClient
from edge.telemetry.outbox import DEFAULT_CAPACITY, DEFAULT_COMMIT_INTERVAL_S, Outbox
from edge.telemetry.schema import (
    DeviceState,
    Message,
    MessageKind,
    Status,
    check_name,
    check_prefix,
    to_json,
    topic_for,
)

__all__ = ["BrokerConfig", "ClientHealth", "TelemetryClient", "TelemetryConfig"]


#: MQTT v5 PUBACK reason code: the broker took the message but no subscription matched it.
_NO_MATCHING_SUBSCRIBERS = 0x10


@dataclass(frozen=True)
class TelemetryConfig:
    """Everything the device's telemetry client needs.

    Attributes:
        device_id: this device's id (one topic level); also numbers the outbox.
        outbox_path: SQLite outbox file.
        broker: where to publish, or None: no broker configured, reports wait in the outbox.
        prefix: topic prefix; topics are ``<prefix>/<device_id>/<kind>``.
        outbox_capacity: most reports kept unacknowledged; beyond it the oldest are dropped (counted).
        queue_bound: most messages handed to the MQTT library (in flight, unacknowledged) at once.
        ack_timeout_s: a PUBACK later than this drops the connection; everything unacked is resent.
        ha_discovery: publish Home Assistant discovery configs on every connect.
        ha_prefix: Home Assistant's discovery prefix.
        commit_interval_s: least time between two group commits of the outbox (0: as fast as the disk).
        require_subscriber: keep a report in the outbox until the broker says a subscriber took it (MQTT v5:
            a PUBACK with "No matching subscribers" counts as not delivered; the client reconnects and resends).
            For fleets whose monitor subscribes through a shared subscription, which mosquitto 2.0 does not
            restore after a broker restart until the monitor subscribes again.
    """

    device_id: str
    outbox_path: Path
    broker: BrokerConfig | None = None
    prefix: str = "edge-deploy"
    outbox_capacity: int = DEFAULT_CAPACITY
    queue_bound: int = 100
    ack_timeout_s: float = 30.0
    ha_discovery: bool = False
    ha_prefix: str = DEFAULT_HA_PREFIX
    commit_interval_s: float = DEFAULT_COMMIT_INTERVAL_S
    require_subscriber: bool = False

    def __post_init__(self) -> None:
        check_name("device_id", self.device_id)
        check_prefix(self.prefix)
        for key in ("queue_bound", "outbox_capacity"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise TelemetryError(f"telemetry {key} = {value!r}; expected an integer >= 1")
        if isinstance(self.ack_timeout_s, bool) or not isinstance(self.ack_timeout_s, int | float):
            raise TelemetryError(f"telemetry ack_timeout_s = {self.ack_timeout_s!r}; expected a number > 0")
        if self.ack_timeout_s <= 0:
            raise TelemetryError(f"telemetry ack_timeout_s = {self.ack_timeout_s!r}; expected a number > 0")

    def topic(self, kind: MessageKind) -> str:
        """This device's topic for ``kind``."""
        return topic_for(self.prefix, self.device_id, kind)


@dataclass(frozen=True)
class ClientHealth:
    """A snapshot of the client's state, for logs and the runner's status line."""

    connected: bool
    pending: int
    dropped: int
    last_seq: int
    attempts: int
    last_error: str | None
    fatal_error: str | None


class TelemetryClient(LinkHooks):
    """Durable MQTT telemetry for one device. Use as a context manager or call ``close``.

    Args:
        config: the client's configuration.

    Raises:
        TelemetryError: if the outbox can't be opened.
    """

    def __init__(self, config: TelemetryConfig) -> None:
        self.config = config
        self._outbox = Outbox(config.outbox_path, config.device_id, config.outbox_capacity, config.commit_interval_s)
        self._closed = False
        self._inflight: dict[int, tuple[int, float]] = {}  # mid -> (seq, time sent); link thread only
        self._acked: list[int] = []
        self._last_removal = 0.0
        self._last_sent = 0
        self._final_mid: int | None = None
        self._final_acked = False
        self._link: Link | None = None
        self._final_health: ClientHealth | None = None
        self._unheard: str | None = None  # a report the broker had no subscriber for
        self._unheard_streak = 0  # reconnects in a row for that reason: each waits longer
        if config.broker is not None:
            self._link = Link(
                config.broker,
                client_id=f"edge-deploy-{config.device_id}",
                hooks=self,
                clean_session=True,  # the outbox, not the broker session, makes delivery durable
                name=f"telemetry-{config.device_id}",
                mqtt5=config.require_subscriber,  # v5's PUBACK says whether anyone subscribed
            )

    # -- the runner's side -------------------------------------------------------------------------

    def connect(self, timeout: float = 10.0) -> bool:
        """Start the background link and wait up to ``timeout`` seconds for the first connection.

        Returns:
            True if connected; False if no broker is configured or it isn't reachable yet (the link
            keeps retrying with backoff; reports wait in the outbox meanwhile).

        Raises:
            TelemetryError: if the broker refused us for good (e.g. bad username/password) or its TLS
                certificate does not verify.
        """
        if self._link is None:
            return False
        self._link.start()
        return self._link.wait_connected(timeout)

    def report(self, message: Message, key: str | None = None, wait: bool = False) -> Message:
        """Queue a report for the outbox's next group commit; never waits for the network.

        Args:
            message: a Telemetry, BenchReport or Result; device id, seq and timestamp are filled in.
            key: a receipt stored in the same transaction (``reported`` answers for it across restarts).
            wait: return only once the report is on disk (see ``flush`` for many at once).

        Returns:
            The message with its sequence number.

        Raises:
            TelemetryError: if the client is closed or the outbox can't store it.
        """
        if self._closed:
            raise TelemetryError(f"telemetry client for {self.config.device_id!r} is closed; cannot report")
        return self._outbox.add(message, key=key, wait=wait)

    def reported(self, key: str) -> bool:
        """Whether a report with receipt ``key`` was made (stored before, or queued by this process)."""
        return self._outbox.has_key(key)

    @property
    def storage_error(self) -> TelemetryError | None:
        """The outbox's disk error (full, read-only), or None when it stores reports (see ``Outbox``)."""
        return self._outbox.storage_error

    @property
    def stored_seq(self) -> int:
        """Highest sequence number on disk; reports up to it survive a crash."""
        return self._outbox.stored_seq

    def flush(self, timeout: float = 10.0) -> None:
        """Wait until every report made so far is on disk.

        Raises:
            TelemetryError: if the disk does not take them within ``timeout`` seconds.
        """
        self._outbox.flush(timeout)

    def check(self) -> None:
        """Raise the link's fatal error (e.g. bad credentials), if it stopped on one."""
        if self._link is not None and self._link.fatal is not None:
            raise self._link.fatal

    def health(self) -> ClientHealth:
        """Return a snapshot of connection and outbox state (after ``close``: the state at closing)."""
        if self._final_health is not None:
            return self._final_health
        link = self._link
        return ClientHealth(
            connected=bool(link and link.connected.is_set()),
            pending=self._outbox.count(),
            dropped=self._outbox.dropped,
            last_seq=self._outbox.last_seq,
            attempts=link.attempts if link else 0,
            last_error=link.last_error if link else "no broker configured",
            fatal_error=str(link.fatal) if link and link.fatal else None,
        )

    def wait_drained(self, timeout: float) -> bool:
        """Wait until the outbox is empty (everything acknowledged) or ``timeout`` seconds passed.

        Returns:
            True if the outbox is empty.
        """
        deadline = time.monotonic() + timeout
        while self._outbox.count() > 0:
            link = self._link
            if link is None or not link.running or time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True

    def close(self, timeout: float = 10.0) -> int:
        """Flush what the broker can take within ``timeout``, publish ``offline``, disconnect.

        Reports not acknowledged in time stay in the outbox and are sent after the next start.

        Returns:
            The number of reports still waiting in the outbox.

        Raises:
            TelemetryError: the link's fatal error (e.g. bad credentials), or reports the disk would not
                take (they are lost with the process), after closing.
        """
        if self._closed:
            return 0
        self._closed = True
        deadline = time.monotonic() + timeout
        ended = True
        disk_error: TelemetryError | None = None
        try:
            self._outbox.flush(timeout)  # on disk first: then the link can send them, or the next start will
        except TelemetryError as exc:
            disk_error = exc
        if self._link is not None:
            # Wait even while the link is between attempts (e.g. a broker that has just come back and the
            # link is in its backoff): the timeout, not the link's state at this instant, bounds the flush.
            if self._link.running:
                self.wait_drained(max(deadline - time.monotonic(), 0.0))
            ended = self._link.stop(max(deadline - time.monotonic(), 0.1))
        self._final_health = self.health()
        left = self._final_health.pending
        if ended:  # else the link thread (a daemon) still uses the outbox; the process exit closes it
            try:
                self._outbox.close(max(deadline - time.monotonic(), 0.1))
            except TelemetryError as exc:
                disk_error = disk_error or exc
        self.check()
        if disk_error is not None:
            raise disk_error
        return left

    def __enter__(self) -> TelemetryClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- the link thread's side (LinkHooks) ---------------------------------------------------------

    def _status(self, state: DeviceState) -> str:
        return to_json(
            Status(
                device_id=self.config.device_id,
                timestamp=time.time(),
                state=state,
                last_seq=self._outbox.last_seq,
                dropped=self._outbox.dropped,
                pending=self._outbox.count(),
            )
        )

    def configure(self, client: MqttClient) -> None:  # noqa: D102
        client.will_set(self.config.topic(MessageKind.STATUS), self._status(DeviceState.OFFLINE), qos=1, retain=True)
        client.max_inflight_messages_set(self.config.queue_bound)
        client.on_publish = self._on_publish

    def on_connected(self, client: MqttClient) -> None:  # noqa: D102
        self._inflight.clear()
        self._last_sent = 0
        client.publish(self.config.topic(MessageKind.STATUS), self._status(DeviceState.ONLINE), qos=1, retain=True)
        if self.config.ha_discovery:
            for topic, payload in discovery_messages(self.config.prefix, self.config.device_id, self.config.ha_prefix):
                client.publish(topic, payload, qos=1, retain=True)

    def _on_publish(self, client, userdata, mid, reason_code, properties) -> None:
        if mid in self._inflight and getattr(reason_code, "value", 0) == _NO_MATCHING_SUBSCRIBERS:
            self._unheard = f"seq {self._inflight[mid][0]}"  # stays in flight: resent after the reconnect
            return
        sent = self._inflight.pop(mid, None)
        if sent is not None:
            self._acked.append(sent[0])
            self._unheard_streak = 0
        elif mid == self._final_mid:
            self._final_acked = True

    def tick(self, client: MqttClient) -> bool:  # noqa: D102
        now = time.monotonic()
        # Acknowledged rows are deleted in one transaction per commit interval, not one per PUBACK.
        if self._acked and now - self._last_removal >= max(self.config.commit_interval_s, 0.01):
            self._flush_acked()
            self._last_removal = now
        if self._unheard is not None:
            self._link.last_error = (
                f"broker {self.config.broker.address} has no subscriber for report {self._unheard} (is the fleet "
                "monitor subscribed?); keeping it in the outbox and reconnecting to resend"
            )
            self._unheard = None
            self._unheard_streak += 1
            self._link.hold_off(self._unheard_streak)  # back off as after failed connects: no reconnect each second
            return False
        if self._inflight and now - min(t for _, t in self._inflight.values()) > self.config.ack_timeout_s:
            link = self._hook_link()
            link.last_error = (
                f"no PUBACK from broker {link.broker.address} in {self.config.ack_timeout_s} s; reconnecting to resend"
            )
            return False
        room = self.config.queue_bound - len(self._inflight)
        if room <= 0 or self._outbox.stored_seq <= self._last_sent:
            return True  # nothing new on disk: no need to ask the database
        for row in self._outbox.pending(after=self._last_sent, limit=room):
            info = client.publish(self.config.topic(row.kind), row.payload, qos=1)
            if info.rc != 0:
                self._hook_link().last_error = f"publish of seq {row.seq} failed (rc {info.rc})"
                return False
            self._inflight[info.mid] = (row.seq, now)
            self._last_sent = row.seq
        return True

    def _hook_link(self) -> Link:
        """The link whose thread runs the hooks (only a client with a broker has one)."""
        if self._link is None:
            raise TelemetryError(f"telemetry client for {self.config.device_id!r} has no broker link")
        return self._link

    def _flush_acked(self) -> None:
        if self._acked:
            acked, self._acked = self._acked, []
            self._outbox.remove(acked)

    def on_lost(self) -> None:  # noqa: D102
        self._flush_acked()
        self._inflight.clear()
        self._last_sent = 0

    def on_stopping(self, client: MqttClient) -> None:  # noqa: D102
        # A clean DISCONNECT fires no last will, so say "offline" ourselves; wait briefly for its PUBACK.
        self._final_acked = False
        info = client.publish(
            self.config.topic(MessageKind.STATUS), self._status(DeviceState.OFFLINE), qos=1, retain=True
        )
        self._final_mid = info.mid
        deadline = time.monotonic() + min(2.0, self._hook_link().broker.connect_timeout_s)
        while not self._final_acked and time.monotonic() < deadline:
            if client.loop(0.05) != 0:
                break
        self._flush_acked()
