"""The daemon's inbound MQTT: one subscription link for the command and text-request topics.

Messages are put on a bounded queue and handled by the daemon's loop, one at a time, on its own thread
(the link thread never runs a model). When the queue is full new messages are dropped and counted: a
flood of messages can't grow memory without bound.
"""

from __future__ import annotations

import queue
from dataclasses import dataclass

from edge.telemetry.link import BrokerConfig, Link, LinkHooks
from edge.telemetry.schema import check_name, check_prefix

QUEUE_BOUND = 100


def command_topic(prefix: str, device_id: str) -> str:
    """``<prefix>/<device_id>/cmd``."""
    return f"{check_prefix(prefix)}/{check_name('device_id', device_id)}/cmd"


def text_request_topic(prefix: str, device_id: str) -> str:
    """``<prefix>/<device_id>/text/request``."""
    return f"{check_prefix(prefix)}/{check_name('device_id', device_id)}/text/request"


@dataclass(frozen=True)
class Inbound:
    """One received message."""

    topic: str
    payload: bytes


class Listener(LinkHooks):
    """Subscribes to the given topics (QoS 1) and queues what arrives. Call ``stop`` when done.

    Args:
        broker: the broker.
        client_id: MQTT client id (distinct from the telemetry client's).
        topics: topics to subscribe to.
    """

    def __init__(self, broker: BrokerConfig, client_id: str, topics: tuple[str, ...]) -> None:
        self.topics = topics
        self.queue: queue.Queue[Inbound] = queue.Queue(QUEUE_BOUND)
        self.dropped = 0
        self.subscribed = False
        self._link = Link(broker, client_id, self, clean_session=True, name="daemon-inbound")

    def start(self, timeout: float) -> bool:
        """Start the link; wait up to ``timeout`` s for the connection (it keeps retrying after)."""
        self._link.start()
        return self._link.wait_connected(timeout)

    @property
    def last_error(self) -> str | None:
        """The link's last connection problem."""
        return self._link.last_error

    def check(self) -> None:
        """Raise the link's fatal error (e.g. bad credentials), if it stopped on one."""
        if self._link.fatal is not None:
            raise self._link.fatal

    def get(self) -> Inbound | None:
        """The next queued message, or None."""
        try:
            return self.queue.get_nowait()
        except queue.Empty:
            return None

    def stop(self, timeout: float) -> None:
        """Disconnect and end the link thread."""
        self._link.stop(timeout)

    # -- link hooks (link thread) -------------------------------------------------------------------

    def configure(self, client: object) -> None:  # noqa: D102
        client.on_message = self._on_message

    def on_connected(self, client: object) -> None:  # noqa: D102
        client.on_subscribe = self._on_subscribe
        client.subscribe([(t, 1) for t in self.topics])

    def _on_subscribe(self, client, userdata, mid, reason_codes, properties) -> None:
        self.subscribed = not any(rc.is_failure for rc in reason_codes)

    def _on_message(self, client, userdata, message) -> None:
        try:
            self.queue.put_nowait(Inbound(message.topic, bytes(message.payload)))
        except queue.Full:
            self.dropped += 1

    def on_lost(self) -> None:  # noqa: D102
        self.subscribed = False
