"""What the fleet store receives and returns: decoded messages, device rows, what a device runs.

``decode`` is the monitor's one parse path for a message off the broker: topic, JSON, schema (every string
bounded), the topic/body agreement and a timestamp not ahead of the monitor's clock by more than
``MAX_CLOCK_SKEW_S``. A message it refuses is counted as rejected and acknowledged (resending can't fix it).
"""

from __future__ import annotations

import json
from dataclasses import astuple, dataclass
from operator import attrgetter
from typing import Any

from edge.errors import TelemetryError
from edge.telemetry.schema import (
    RUNNING_FIELDS,
    DeviceState,
    Message,
    MessageKind,
    Result,
    Telemetry,
    from_json,
    kind_of,
    parse_topic,
)

CSV_COLUMNS = (
    "device_id", "seq", "timestamp", "latency_p50_ms", "latency_p90_ms", "fps", "temperature_c", "window_s",
)  # fmt: skip

#: How far a message's timestamp may be ahead of the monitor's clock (seconds); later ones are refused, else a
#: device with a wrong clock would stay in every "last N minutes" view for ever.
MAX_CLOCK_SKEW_S = 300.0

#: Columns of ``devices`` that say what a device runs now (the same names as the Telemetry fields).
RUNNING_COLUMNS = RUNNING_FIELDS
_running_of = attrgetter(*RUNNING_FIELDS)


@dataclass(frozen=True)
class Incoming:
    """One decoded message, ready to store.

    Attributes:
        device_id: from the topic (checked against the body).
        kind: from the topic (checked against the body).
        message: the typed message.
        text: the payload as received (stored verbatim).
        received: arrival time at the monitor, Unix seconds.
        retained: the broker replayed it as a retained message on subscribe.
    """

    device_id: str
    kind: MessageKind
    message: Message
    text: str
    received: float
    retained: bool = False

    @property
    def seen_at(self) -> float:
        """When this message shows the device was alive: a replayed retained message only when it was made."""
        return self.message.timestamp if self.retained else self.received

    @property
    def running(self) -> tuple[str, ...] | None:
        """What the device said it runs (``RUNNING_FIELDS``), for a telemetry report that names a model."""
        m = self.message
        if not isinstance(m, Telemetry) or not (m.model or m.model_sha256):
            return None
        return _running_of(m)

    @property
    def error(self) -> str | None:
        """``"<task>: <error>"`` for a result that reports an error (its data has an ``error`` key)."""
        m = self.message
        if not isinstance(m, Result) or "error" not in m.data:
            return None
        return f"{m.task}: {m.data['error']}"[:500].replace("\x00", "\ufffd")  # PostgreSQL text can't hold NUL


def decode(
    prefix: str,
    topic: str,
    payload: bytes | str,
    received: float,
    retained: bool = False,
    max_skew_s: float = MAX_CLOCK_SKEW_S,
) -> Incoming:
    """Validate one message off the broker.

    Args:
        prefix: the fleet's topic prefix.
        topic: the MQTT topic it came on.
        payload: the message JSON.
        received: arrival time (Unix seconds).
        retained: whether the broker replayed it as retained.
        max_skew_s: how far its timestamp may be ahead of ``received``.

    Returns:
        The decoded message.

    Raises:
        TelemetryError: naming the topic, if the topic, the JSON or the schema is wrong, the body's kind
            or device differs from the topic's, or its timestamp is more than ``max_skew_s`` ahead.
    """
    device_id, kind = parse_topic(prefix, topic)
    try:
        message = from_json(payload, source=f"topic {topic}")
    except (RecursionError, OverflowError, ValueError) as exc:  # e.g. deep nesting, a 400-digit number
        raise TelemetryError(f"topic {topic}: unreadable message ({type(exc).__name__}: {exc})"[:300]) from exc
    if kind_of(message) is not kind or message.device_id != device_id:
        raise TelemetryError(
            f"topic {topic}: carries a {kind_of(message).value} message from "
            f"{message.device_id!r}; expected a {kind.value} message from {device_id!r}"
        )
    ahead = message.timestamp - received
    if ahead > max_skew_s:
        raise TelemetryError(
            f"topic {topic}: timestamp {message.timestamp} is {ahead:.1f} s ahead of the monitor's clock; expected "
            f"at most {max_skew_s:g} s (is the device's clock set?)"
        )
    text = payload.decode() if isinstance(payload, bytes) else payload
    return Incoming(device_id, kind, message, text, received, retained)


@dataclass(frozen=True)
class WriteResult:
    """What one committed batch did.

    Attributes:
        stored: new reports.
        duplicates: reports already in the store (a QoS 1 redelivery or a device's resend).
        statuses: status messages applied.
        rejected: messages not stored: refused by ``decode`` (counted in the same transaction) or by the
            database (``FleetStore.commit``).
    """

    stored: int = 0
    duplicates: int = 0
    statuses: int = 0
    rejected: int = 0

    def __add__(self, other: WriteResult) -> WriteResult:
        return WriteResult(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))


@dataclass(frozen=True)
class DeviceRow:
    """One line of the fleet table. Figures come from the device's newest telemetry report."""

    device_id: str
    online: bool | None
    latency_p50_ms: float | None
    latency_p90_ms: float | None
    fps: float | None
    temperature_c: float | None
    last_seen: float
    reports: int
    dropped: int
    last_error: str | None = None


@dataclass(frozen=True)
class Running:
    """What a device runs, as its telemetry said, and when the store saw it so.

    Attributes:
        device_id: the device.
        model: model name.
        model_version: model version (the build's tool version or the bundle's version).
        model_sha256: sha256 of the model file.
        bundle_id: the bundle (or models folder) it came in.
        profile: target profile, e.g. ``rpi4``.
        runtime: runtime backend, e.g. ``onnxruntime``.
        precision: e.g. ``int8``, ``fp32``.
        first_seen: first report naming this (Unix seconds, the device's clock).
        last_seen: newest report naming this.
    """

    device_id: str
    model: str
    model_version: str
    model_sha256: str
    bundle_id: str
    profile: str
    runtime: str
    precision: str
    first_seen: float
    last_seen: float


def online_of(state: str | None) -> bool | None:
    """A devices row's state column as the table's online flag (None: no status seen)."""
    return None if state is None else state == DeviceState.ONLINE.value


def body_of(payload: Any) -> dict:
    """A stored payload as a dict (SQLite returns the text)."""
    return json.loads(payload) if isinstance(payload, str | bytes) else dict(payload)
