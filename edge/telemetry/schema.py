"""The one place that defines telemetry messages, their topics and their JSON form.

Every message is a frozen dataclass with ``schema_version``, ``device_id``, ``seq`` (per-device report
number, allocated durably by the outbox; 0 for status messages, which are states, not reports) and
``timestamp`` (Unix seconds, when the message was made). On the wire a message is one JSON object with a
``type`` key naming its kind; ``to_json`` and ``from_json`` are the only (de)serialisers.

Topics are ``<prefix>/<device_id>/<kind>``, e.g. ``edge-deploy/pi-kitchen/telemetry``.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import math
import operator
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from edge.errors import TelemetryError, require
from edge.payload import MAX_INT, PayloadError, check_strings, has_surrogate_escape, parse_json

#: Bumped whenever a field is added, removed or changes meaning; readers reject versions they can't read.
SCHEMA_VERSION = 3
#: Versions this reader accepts: 2 added what a device runs to Telemetry (version 1 reports lack it), 3 the
#: CPU's INT8 kernels (``int8_kernels``) to Telemetry and BenchReport.
READABLE_VERSIONS = (1, 2, 3)
#: Largest message a reader accepts (and a writer produces): a face result with 100 faces is ~30 KB.
MAX_MESSAGE_BYTES = 256 * 1024
#: Deepest nesting a reader accepts (a face result: message -> data -> faces -> face -> box = 5).
MAX_MESSAGE_DEPTH = 16

#: Longest text of a string field a reader accepts, in characters (``TEXT_BOUNDS`` names the exceptions).
MAX_TEXT = 64

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}\Z")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # Unicode category Cc
_PREFIX_RE = re.compile(r"^[A-Za-z0-9_.:-]+(/[A-Za-z0-9_.:-]+)*$")


class MessageKind(enum.Enum):
    """The kinds of message; the value is both the JSON ``type`` and the last topic level."""

    STATUS = "status"
    TELEMETRY = "telemetry"
    BENCH = "bench"
    RESULT = "result"


class DeviceState(enum.Enum):
    """What a status message says about its device."""

    ONLINE = "online"
    OFFLINE = "offline"


@dataclass(frozen=True, kw_only=True)
class _Message:
    """Fields every message carries. ``device_id``/``seq``/``timestamp`` are filled in by the outbox."""

    device_id: str = ""
    seq: int = 0
    timestamp: float = 0.0
    schema_version: int = SCHEMA_VERSION


@dataclass(frozen=True, kw_only=True)
class Status(_Message):
    """The device's connection state; published retained (``online`` on connect, ``offline`` as last will).

    Attributes:
        state: online or offline.
        last_seq: highest report sequence number the device had allocated when this status was made.
        dropped: reports the outbox discarded so far because it was full (oldest first).
        pending: reports waiting in the outbox when this status was made.
    """

    state: DeviceState
    last_seq: int = 0
    dropped: int = 0
    pending: int = 0


@dataclass(frozen=True, kw_only=True)
class Telemetry(_Message):
    """Periodic performance figures of the running pipeline.

    Attributes:
        latency_p50_ms: median end-to-end latency over the reporting window, milliseconds.
        latency_p90_ms: 90th percentile latency over the window, milliseconds.
        fps: frames (or requests) processed per second over the window.
        temperature_c: SoC temperature in degrees Celsius, None where the board does not report it.
        window_s: length of the reporting window in seconds.
        model: what runs: model name ("" when the sender does not say; so for every field below).
        model_version: the model's version (the tool version that built it).
        model_sha256: sha256 of the model file.
        bundle_id: the bundle or models folder it came in (sha256 of its manifest / models.json).
        profile: target profile, e.g. ``rpi4``.
        runtime: runtime backend, e.g. ``onnxruntime``.
        precision: e.g. ``int8``, ``fp32``.
        int8_kernels: the INT8 arithmetic this CPU gets (``edge.cpu``), e.g. ``x86-avx2`` (no VNNI: run with
            u8u8 kernels), ``x86-vnni``, ``arm-neon``, ``arm-dotprod``; "" when the sender does not say.
    """

    latency_p50_ms: float
    latency_p90_ms: float
    fps: float
    temperature_c: float | None = None
    window_s: float = 0.0
    model: str = ""
    model_version: str = ""
    model_sha256: str = ""
    bundle_id: str = ""
    profile: str = ""
    runtime: str = ""
    precision: str = ""
    int8_kernels: str = ""


#: The Telemetry fields that say what runs on the device (the fleet store keeps their history).
RUNNING_FIELDS = ("model", "model_version", "model_sha256", "bundle_id", "profile", "runtime", "precision")


@dataclass(frozen=True, kw_only=True)
class BenchReport(_Message):
    """One benchmark run; the first inference is reported apart from the steady state.

    Attributes:
        model: model or bundle name.
        backend: runtime backend name, e.g. ``onnxruntime``.
        runs: steady-state runs measured (the first inference excluded).
        first_ms: latency of the first inference, milliseconds.
        p50_ms: steady-state median latency, milliseconds.
        p90_ms: steady-state 90th percentile latency, milliseconds.
        profile: target profile name, e.g. ``rpi4``.
        int8_kernels: the INT8 arithmetic this CPU gets (as in Telemetry).
    """

    model: str
    backend: str
    runs: int
    first_ms: float
    p50_ms: float
    p90_ms: float
    profile: str = ""
    int8_kernels: str = ""


@dataclass(frozen=True, kw_only=True)
class Result(_Message):
    """One application result, e.g. the faces recognised in a frame.

    Attributes:
        task: what produced it, e.g. ``face.identify``.
        data: a JSON object with the task's output.
    """

    task: str
    data: dict[str, Any] = field(default_factory=dict)


Message = Status | Telemetry | BenchReport | Result

#: String fields whose bound is not ``MAX_TEXT`` characters: a model name is a file's stem (a file name has at
#: most 255 bytes), a bench report's model ``role:file name``; a precision is a word (``int8``). These bounds
#: keep the fleet store's key of what a device runs (device id + ``RUNNING_FIELDS``) within PostgreSQL's index
#: row limit (2,704 bytes) even in 4-byte characters.
TEXT_BOUNDS: dict[type, dict[str, int]] = {Telemetry: {"model": 255, "precision": 32}, BenchReport: {"model": 320}}

_CLASSES: dict[MessageKind, type[_Message]] = {
    MessageKind.STATUS: Status,
    MessageKind.TELEMETRY: Telemetry,
    MessageKind.BENCH: BenchReport,
    MessageKind.RESULT: Result,
}
_KINDS = {cls: kind for kind, cls in _CLASSES.items()}
#: The first schema version that carries each field added after version 1 (older messages must not).
_SINCE = {**dict.fromkeys(RUNNING_FIELDS, 2), "int8_kernels": 3}
#: Fields every message on the wire must carry, although the dataclasses give them defaults.
_ENVELOPE = ("device_id", "seq", "timestamp", "schema_version")


def kind_of(message: Message) -> MessageKind:
    """Return the kind of a message object.

    Raises:
        TelemetryError: if ``message`` is not one of the message classes.
    """
    kind = _KINDS.get(type(message))
    if kind is None:
        raise TelemetryError(
            f"{type(message).__name__} is not a telemetry message; expected Status, Telemetry, BenchReport or Result"
        )
    return kind


def check_name(key: str, value: str) -> str:
    """Check a device id (one topic level: letters, digits, ``_.:-``, at most 64 characters).

    Raises:
        TelemetryError: naming ``key`` and the value if it is not a valid topic level.
    """
    if not isinstance(value, str) or not _NAME_RE.match(value):
        raise TelemetryError(
            f"{key} = {value!r}; expected 1-64 characters of letters, digits, '_', '.', ':' or '-' "
            "(it becomes one MQTT topic level)"
        )
    return value


def check_prefix(value: str) -> str:
    """Check a topic prefix (one or more levels separated by ``/``, no wildcards).

    Raises:
        TelemetryError: naming the prefix if it is empty, has empty levels or wildcards.
    """
    if not isinstance(value, str) or not _PREFIX_RE.match(value):
        raise TelemetryError(
            f"prefix = {value!r}; expected topic levels of letters, digits, '_', '.', ':' or '-' separated "
            "by '/', without wildcards or a leading/trailing '/'"
        )
    return value


def topic_for(prefix: str, device_id: str, kind: MessageKind) -> str:
    """Return the topic ``<prefix>/<device_id>/<kind>``."""
    return f"{check_prefix(prefix)}/{check_name('device_id', device_id)}/{kind.value}"


@functools.lru_cache(maxsize=65536)
def parse_topic(prefix: str, topic: str) -> tuple[str, MessageKind]:
    """Split a topic under ``prefix`` into (device id, kind); a fleet's topics repeat, so answers are cached.

    Raises:
        TelemetryError: if the topic is not ``<prefix>/<device_id>/<kind>`` with a known kind.
    """
    head = check_prefix(prefix) + "/"
    parts = topic[len(head) :].split("/") if topic.startswith(head) else []
    kinds = ", ".join(k.value for k in MessageKind)
    if len(parts) != 2 or parts[1] not in {k.value for k in MessageKind}:
        raise TelemetryError(f"topic {topic!r}; expected {prefix}/<device_id>/<kind> with kind one of {kinds}")
    return check_name("device_id", parts[0]), MessageKind(parts[1])


def check_fields(message: Message, envelope: bool = True) -> dict[str, Any]:
    """Check a message's fields against the reader's rules (``from_json``) without serialising it.

    What is nested inside a field (a result's ``data``) is checked only by ``to_json``.

    Args:
        message: the message.
        envelope: also check ``device_id`` and ``seq`` (False: the caller set them itself, e.g. the outbox,
            which numbers the report).

    Returns:
        The message as the JSON body's dict (``type`` first), ready for ``json.dumps``.

    Raises:
        TelemetryError: naming the field, if a reader would reject it (e.g. NaN, a string for a number).
    """
    kind = kind_of(message)
    body: dict[str, Any] = {"type": kind.value}
    cls: type = type(message)  # as a plain type: mypy takes a frozen dataclass's class for unhashable
    for name, plain, hint, bound in _checks(cls):
        value = getattr(message, name)
        if not envelope and name in ("device_id", "seq"):
            body[name] = value
            continue
        # Fast path for the common case (this runs on the device's inference thread for every report).
        if (
            type(value) in plain
            and (type(value) is not float or math.isfinite(value))
            and (type(value) is not int or value >= 0)
            and (type(value) is not str or bound is None or (len(value) <= bound and not _CONTROL_RE.search(value)))
        ):
            body[name] = value
            continue
        if isinstance(value, float) and not math.isfinite(value):
            raise TelemetryError(
                f"{kind.value} message from {message.device_id!r}: field {name!r} = {value!r}; expected a finite number"
            )
        value = value.value if isinstance(value, enum.Enum) else value
        _convert(f"{kind.value} message to send", name, value, hint, bound)
        body[name] = value
    if envelope:
        check_name(f"{kind.value} message to send: field 'device_id'", message.device_id)
    return body


def to_json(message: Message) -> str:
    """Serialise a message to compact JSON (the wire format); never what a reader would reject.

    Raises:
        TelemetryError: if a field (or anything nested in it) has a value JSON cannot carry faithfully
            (e.g. NaN, a numpy scalar) or a reader would reject.
    """
    return body_json(check_fields(message), message)


def body_json(body: dict[str, Any], message: Message) -> str:
    """The wire JSON of a body ``check_fields`` made from ``message``.

    Raises:
        TelemetryError: if something nested in a field can't be JSON (NaN, a numpy scalar).
    """
    try:
        text = json.dumps(body, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise TelemetryError(f"{body['type']} message from {message.device_id!r} cannot be JSON: {exc}") from exc
    if len(text) > MAX_MESSAGE_BYTES // 6 and len(text.encode("utf-8", "surrogatepass")) > MAX_MESSAGE_BYTES:
        raise TelemetryError(
            f"{body['type']} message from {message.device_id!r} cannot be JSON: {len(text.encode())} bytes; "
            f"expected at most {MAX_MESSAGE_BYTES} (a reader refuses more)"
        )
    if has_surrogate_escape(text):  # json.dumps escapes a lone surrogate; every reader refuses it
        try:
            check_strings(body, f"{body['type']} message from {message.device_id!r}")
        except PayloadError as exc:
            raise TelemetryError(f"{exc} (a reader refuses it)") from None
    return text


def from_json(data: str | bytes, source: str = "message") -> Message:
    """Parse and validate one message.

    msgspec decodes and checks it against typed structs made from the message classes and the bounds above
    (``_wire_decoder``); a message it refuses goes through ``explain_refusal``, which names the field at fault.
    msgspec is imported on the first call: a device that only sends never needs it.

    Args:
        data: the JSON text (or UTF-8 bytes) of one message.
        source: where it came from (topic or file), for error messages.

    Returns:
        The typed message.

    Raises:
        TelemetryError: naming ``source`` and the field if the JSON is malformed, the type unknown, the
            schema version different from ``SCHEMA_VERSION``, a field missing, unknown or of the wrong type, or
            a string longer than its bound (``MAX_TEXT``, ``TEXT_BOUNDS``) or holding a control character.
        MissingDependencyError: msgspec is not installed (it comes with the ``device`` extra).
    """
    decoder, errors, builders = _wire_decoder()
    if len(data) <= MAX_MESSAGE_BYTES // 4 or len(_utf8(data)) <= MAX_MESSAGE_BYTES:
        try:
            struct = decoder.decode(data)
        except errors as exc:
            refusal: str = str(exc)
        except RecursionError:
            refusal = f"nested more than {MAX_MESSAGE_DEPTH} levels deep"
        else:
            build = builders[type(struct)]
            message = build(struct)
            if message is not None:
                return message
            refusal = "a field its schema version does not carry, or a result's data out of bounds"
    else:
        refusal = f"{len(_utf8(data))} bytes; expected at most {MAX_MESSAGE_BYTES}"
    explain_refusal(data, source)  # raises the named error; the refusal stands even where it would not
    raise TelemetryError(f"{source}: {refusal}")


def _utf8(data: str | bytes) -> bytes:
    return data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass")


def explain_refusal(data: str | bytes, source: str) -> Message:
    """The reader's rules, checked one by one in plain Python: names the field at fault when msgspec refused
    (``from_json``); returns the message if they all hold. Several times slower than ``from_json``.

    Raises:
        TelemetryError: naming ``source`` and the field, for the first rule the message breaks.
    """
    try:
        body = parse_json(data, source, MAX_MESSAGE_BYTES, MAX_MESSAGE_DEPTH)
    except PayloadError as exc:
        raise TelemetryError(str(exc)) from None
    if not isinstance(body, dict):
        raise TelemetryError(f"{source}: expected a JSON object, got {type(body).__name__}")
    kinds = ", ".join(k.value for k in MessageKind)
    raw_kind = body.pop("type", None)
    if not isinstance(raw_kind, str) or raw_kind not in {k.value for k in MessageKind}:
        raise TelemetryError(f"{source}: field 'type' = {raw_kind!r}; expected one of {kinds}")
    version = body.get("schema_version")
    if version not in READABLE_VERSIONS or isinstance(version, bool):
        raise TelemetryError(
            f"{source}: field 'schema_version' = {version!r}; expected one of "
            f"{', '.join(map(str, READABLE_VERSIONS))} (sender and reader run different edge-deploy schema versions)"
        )
    cls = _CLASSES[MessageKind(raw_kind)]
    fields, hints, names = _layout(cast(type, cls))  # a plain type: mypy takes the class for unhashable
    bounds = _bounds(cast(type, cls))
    too_new = {name for name in body if _SINCE.get(name, 1) > version}
    unknown = sorted((set(body) - names) | too_new)
    if unknown:
        raise TelemetryError(f"{source}: unknown field {unknown[0]!r} in a {raw_kind} message")
    values = {}
    for f in fields:
        if f.name not in body:
            if _required(f):
                raise TelemetryError(f"{source}: field {f.name!r} is missing from a {raw_kind} message")
            continue
        values[f.name] = _convert(source, f.name, body[f.name], hints[f.name], bounds.get(f.name))
    message = cls(**values)
    check_name(f"{source}: field 'device_id'", message.device_id)
    return message  # type: ignore[return-value]


#: A string field's text: no control character (Unicode category Cc) anywhere, a final newline included.
_TEXT_PATTERN = r"^[^\x00-\x1f\x7f-\x9f]*\Z"


@functools.cache
def _wire_decoder() -> tuple[Any, tuple[type[BaseException], ...], dict[type, Callable[[Any], Message | None]]]:
    """msgspec's decoder of the tagged union of the message classes, the errors it raises, and per struct
    the function that turns a decoded struct into its message (None: a rule msgspec can't state refuses it).

    The structs are made from the message classes, ``MAX_TEXT``/``TEXT_BOUNDS``, ``READABLE_VERSIONS`` and
    ``_SINCE``: the bounds are declared once, above, for the writer (``check_fields``) and this reader.
    """
    msgspec = require("msgspec", "device", "Reading telemetry messages")
    builders: dict[type, Callable[[Any], Message | None]] = {}
    for kind, cls in _CLASSES.items():
        fields = _wire_fields(msgspec, cast(type, cls))
        struct = msgspec.defstruct(
            f"Wire{cls.__name__}", fields, tag_field="type", tag=kind.value, forbid_unknown_fields=True, kw_only=True
        )
        builders[struct] = _builder(msgspec, cast(type, cls))
    decoder = msgspec.json.Decoder(functools.reduce(operator.or_, builders))
    return decoder, (msgspec.DecodeError, UnicodeError), builders


def _wire_fields(msgspec: Any, cls: type) -> list[tuple]:
    """msgspec ``defstruct`` fields of a message class: each field's constrained type and default."""
    fields, hints, _ = _layout(cls)
    bounds = _bounds(cls)
    out: list[tuple] = []
    for f in fields:
        if f.name == "device_id":
            hint: Any = typing.Annotated[str, msgspec.Meta(pattern=_NAME_RE.pattern)]
        elif f.name == "schema_version":
            hint = typing.Literal[READABLE_VERSIONS]
        else:
            hint = _wire_type(msgspec, hints[f.name], bounds.get(f.name))
        if f.name in _SINCE:  # absent (UNSET) and present are told apart: an older version must not carry it
            out.append((f.name, hint | msgspec.UnsetType, msgspec.UNSET))
        elif _required(f):
            out.append((f.name, hint))
        elif f.default_factory is not dataclasses.MISSING:
            out.append((f.name, hint, msgspec.field(default_factory=f.default_factory)))
        else:
            out.append((f.name, hint, f.default))
    return out


def _wire_type(msgspec: Any, hint: Any, bound: int | None) -> Any:
    """The msgspec type of a field's hint: integers within +-2^53 - 1 (>= 0 where an int), finite numbers,
    strings within ``bound`` without control characters."""
    meta = msgspec.Meta
    options = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    out: list[Any] = []
    for option in options:
        if option is str:
            out.append(typing.Annotated[str, meta(max_length=bound, pattern=_TEXT_PATTERN)])
        elif option is int:
            out.append(typing.Annotated[int, meta(ge=0, le=MAX_INT)])
        elif option is float:  # a JSON integer here is bounded like any other (parse_json's rule)
            out += [typing.Annotated[int, meta(ge=-MAX_INT, le=MAX_INT)], float]
        else:
            out.append(option)
    return functools.reduce(operator.or_, out)


def _builder(msgspec: Any, cls: type) -> Callable[[Any], Message | None]:
    """Turn a decoded struct into its message class (no constructor run, as ``stamped``); None if a field is
    newer than the message's schema version or a result's data breaks ``parse_json``'s bounds."""
    fields, hints, _ = _layout(cls)
    names = tuple(f.name for f in fields)
    numbers = tuple(f.name for f in fields if float in (typing.get_args(hints[f.name]) or (hints[f.name],)))
    since = tuple((f.name, _SINCE[f.name], f.default) for f in fields if f.name in _SINCE)
    astuple, unset, has_data = msgspec.structs.astuple, msgspec.UNSET, cls is Result

    def build(struct: Any) -> Message | None:
        values = dict(zip(names, astuple(struct), strict=True))
        for name, first, default in since:
            if values[name] is unset:
                values[name] = default
            elif values["schema_version"] < first:
                return None
        for name in numbers:
            if type(values[name]) is int:
                values[name] = float(values[name])
        if has_data and not _data_within_bounds(values["data"]):
            return None
        message: Any = object.__new__(cls)
        message.__dict__.update(values)
        return cast(Message, message)

    return build


def _data_within_bounds(data: dict) -> bool:
    """Whether a result's data nests at most ``MAX_MESSAGE_DEPTH`` levels (the message's own level counted)
    and holds no integer beyond +-2^53 - 1 (msgspec already refused non-finite numbers and lone surrogates)."""
    stack: list[tuple[Any, int]] = [(data, 2)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            if level > MAX_MESSAGE_DEPTH:
                return False
            stack.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item))
        elif type(item) is int and abs(item) > MAX_INT:
            return False
    return True


@functools.cache
def _layout(cls: type) -> tuple[tuple[dataclasses.Field, ...], dict[str, Any], frozenset[str]]:
    """A message class's fields, resolved type hints and field names (resolving hints is slow: once)."""
    fields = dataclasses.fields(cls)
    return fields, typing.get_type_hints(cls), frozenset(f.name for f in fields)


@functools.cache
def _bounds(cls: type) -> dict[str, int]:
    """The longest text each string field of a message class may hold (``device_id``: see ``check_name``)."""
    fields, hints, _ = _layout(cls)
    special = TEXT_BOUNDS.get(cls, {})
    return {f.name: special.get(f.name, MAX_TEXT) for f in fields if hints[f.name] is str and f.name != "device_id"}


@functools.cache
def _checks(cls: type) -> tuple[tuple[str, frozenset[type], Any, int | None], ...]:
    """Per field of a message class: its name, the plain types a value may have as is, its type hint, and the
    longest text it may hold (``device_id`` is checked by ``check_name``)."""
    fields, hints, _ = _layout(cls)
    out = []
    for f in fields:
        hint = hints[f.name]
        options = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
        plain = {o for o in options if o in (int, float, str, type(None))}
        plain |= {dict for o in options if typing.get_origin(o) is dict}
        out.append((f.name, frozenset(plain), hint, _bounds(cls).get(f.name)))
    return tuple(out)


def stamped(message: Message, device_id: str, seq: int, timestamp: float) -> Message:
    """A copy of ``message`` with its envelope set, made without re-running the dataclass constructor.

    ``dataclasses.replace`` does the same at several times the cost; the outbox does this for every report
    on the device's inference thread. The message classes are plain frozen dataclasses (no slots, no
    ``__post_init__``), so copying the instance dict is a faithful copy.
    """
    copy = object.__new__(type(message))
    copy.__dict__.update(message.__dict__, device_id=device_id, seq=seq, timestamp=timestamp)
    return copy


def _required(f: dataclasses.Field) -> bool:
    if f.name in _ENVELOPE:
        return True
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def _convert(source: str, name: str, value: Any, hint: Any, bound: int | None = None) -> Any:
    """Check one JSON value against a field's type hint (and a string against ``bound``); return it as the
    field's type."""
    options = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    for option in options:
        ok, converted = _try_type(value, option)
        if ok:
            if bound is not None and isinstance(converted, str):
                _check_text(source, name, converted, bound)
            return converted
    expected = " or ".join(_describe(o) for o in options)
    raise TelemetryError(f"{source}: field {name!r} = {value!r}; expected {expected}")


def _check_text(source: str, name: str, value: str, bound: int) -> None:
    """Refuse a string field longer than ``bound`` characters or holding a control character."""
    if len(value) > bound:
        raise TelemetryError(
            f"{source}: field {name!r} = {value[:24]!r}... ({len(value)} characters); expected at most {bound}"
        )
    bad = _CONTROL_RE.search(value)
    if bad:
        raise TelemetryError(
            f"{source}: field {name!r} = {value!r:.80} holds control character U+{ord(bad.group()):04X}; "
            "expected printable text"
        )


def _try_type(value: Any, hint: Any) -> tuple[bool, Any]:
    if hint is type(None):
        return value is None, None
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        valid = {m.value: m for m in hint}
        return (value in valid, valid.get(value)) if isinstance(value, str) else (False, None)
    if isinstance(value, bool):
        return False, None
    if hint is int:
        return isinstance(value, int) and value >= 0, value
    if hint is float:
        ok = isinstance(value, int | float) and math.isfinite(value)
        return ok, float(value) if ok else None
    if hint is str:
        return isinstance(value, str), value
    if typing.get_origin(hint) is dict:
        return isinstance(value, dict), value
    return False, None


def _describe(hint: Any) -> str:
    if hint is type(None):
        return "null"
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return "one of " + ", ".join(m.value for m in hint)
    if hint is int:
        return "an integer >= 0"
    if hint is float:
        return "a finite number"
    if hint is str:
        return "a string"
    return "a JSON object"
