"""The daemon's TOML config, loaded into frozen dataclasses and validated like the target profiles.

Load order: parse TOML -> reject unknown tables and keys -> convert values (enums, numbers, paths) ->
check ranges and cross-field rules. Every error names the file and the key, the value found and what is
allowed, e.g.::

    edge-deploy.toml: source.stride = 0; expected a whole number >= 1

Relative paths are taken relative to the config file's folder. A minimal config needs only
``face.models`` and ``source.path``; everything else has a default (see ``edge-deploy.example.toml``).
"""

from __future__ import annotations

import enum
import re
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edge.daemon import EXAMPLE_CONFIG as EXAMPLE_CONFIG
from edge.errors import InputError, TelemetryError
from edge.face.models import Detector
from edge.face.track import KEEP_DESCRIPTOR_WITHIN, MAX_DETECT_EVERY, VIDEO_DETECT_EVERY
from edge.filemode import check_private_mode
from edge.telemetry.link import BrokerConfig
from edge.telemetry.schema import check_name, check_prefix
from edge.tomlschema import Field, Schema, read_tables, read_toml

#: The systemd unit shipped next to this module.
SYSTEMD_UNIT = Path(__file__).resolve().parent / "edge-deploy.service"


class SourceKind(enum.Enum):
    """Where frames come from."""

    FOLDER = "folder"  # a watched folder of image files
    VIDEO = "video"  # a video file, read once
    CAMERA = "camera"  # an OpenCV camera (V4L2 index)


#: ``face.detect_every`` when the config leaves it out, per source kind: a folder's images are unrelated stills,
#: each detected afresh; a video's or a camera's frames follow one another, so faces are followed between
#: detector frames (``VIDEO_DETECT_EVERY``: how it was chosen, docs/daemon.md and section ``face-track`` of
#: docs/benchmarks.md).
DEFAULT_DETECT_EVERY = {
    SourceKind.FOLDER: 1,
    SourceKind.VIDEO: VIDEO_DETECT_EVERY,
    SourceKind.CAMERA: VIDEO_DETECT_EVERY,
}


class LogLevel(enum.Enum):
    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


@dataclass(frozen=True)
class FaceSettings:
    """``[face]``: the face models, the gallery and the recognition thresholds."""

    models: Path
    gallery: Path
    enroll_dir: Path | None
    threshold: float | None  # None: the models folder's (dlib's 0.6, or a user embedder's calibrated one)
    min_score: float | None  # None: the detector's (edge.face.models.default_min_score: 0.9 MTCNN, 0 BlazeFace)
    detector: Detector | None  # None: the models folder's (models.json 'detector', else MTCNN)
    threads: int
    # video, camera: the detector on every n-th frame, faces followed between (edge.face.track); a folder: always 1
    detect_every: int = 1
    # a followed face keeps its descriptor while its chip is within this many grey levels of the chip it came from
    keep_descriptor_within: float = KEEP_DESCRIPTOR_WITHIN


@dataclass(frozen=True)
class SourceSettings:
    """``[source]``: where frames come from and how fast they are taken."""

    kind: SourceKind
    path: Path | None
    camera_index: int
    poll_interval_s: float
    settle_s: float
    stride: int
    max_fps: float
    max_frames: int


@dataclass(frozen=True)
class TelemetrySettings:
    """``[telemetry]``: topics, the durable outbox and the reporting period."""

    prefix: str
    interval_s: float
    outbox: Path
    outbox_capacity: int
    flush_timeout_s: float
    commit_interval_s: float
    require_subscriber: bool


@dataclass(frozen=True)
class CommandSettings:
    """``[commands]``: who may command the daemon (see docs/daemon.md, "Command authorisation")."""

    secret_file: Path | None
    max_skew_s: float
    bench_runs: int
    max_bench_runs: int


@dataclass(frozen=True)
class TextSettings:
    """``[text]``: the optional language-model service answering prompts on the request topic."""

    model_dir: Path | None
    max_new_tokens: int
    max_prompt_chars: int
    threads: int


@dataclass(frozen=True)
class UpdateSettings:
    """``[update]``: over-the-air bundle updates (docs/fleet.md, "Over-the-air updates")."""

    max_bytes: int
    download_timeout_s: float
    min_bytes_per_s: int
    max_latency_ms: float
    bench_runs: int
    crash_limit: int
    crash_window_s: float


@dataclass(frozen=True)
class DaemonConfig:
    """The whole daemon config, as read from one TOML file."""

    source_file: Path
    device_id: str
    state_dir: Path
    target: str | None
    bundle: Path | None
    trusted_keys: tuple[Path, ...]
    tags: tuple[str, ...]
    log_level: LogLevel
    face: FaceSettings
    source: SourceSettings
    broker: BrokerConfig | None
    #: The broker is off this machine and reached without TLS, accepted by ``broker.allow_insecure = true``.
    broker_insecure: bool
    telemetry: TelemetrySettings
    commands: CommandSettings
    text: TextSettings
    update: UpdateSettings

    @property
    def slots_dir(self) -> Path:
        """The A/B slots of over-the-air updates (``edge.update.slots``)."""
        return self.state_dir / "slots"

    @property
    def state_db(self) -> Path:
        """The daemon's own SQLite state (processed files, video positions, seen command nonces)."""
        return self.state_dir / "state.sqlite"


_DEFAULT_STATE: Any = object()  # "a file or folder under state_dir", resolved after state_dir is known
#: Most threads a thread-count key accepts (more only costs memory: a Pi has 4 cores).
MAX_THREADS = 256
_DAY_S = 86_400.0
#: ``update.min_bytes_per_s``'s default: a server that trickles fails after the grace period, not at the deadline.
DEFAULT_MIN_BYTES_PER_S = 4096


def _seconds(default: float, low_open: bool = True, high: float = _DAY_S) -> Field:
    return Field(float, default, low=0.0, high=high, low_open=low_open)


# table -> key -> Field (read by edge.tomlschema). Every number has a documented range (docs/daemon.md).
_SCHEMA: Schema = {
    "": {
        "device_id": Field(str, None),
        "state_dir": Field(Path, Path("state")),
        "target": Field(str, None),
        "log_level": Field(LogLevel, LogLevel.INFO),
        "bundle": Field(Path, None),
        # Public keys (edge-deploy keygen's .pub): when set, the bundle must be signed by one of them.
        "trusted_keys": Field([Path], []),
        # Group tags (edge-deploy fleet rollout --group TAG): announced at every start.
        "tags": Field([str], []),
    },
    "face": {
        "models": Field(Path),
        "gallery": Field(Path, _DEFAULT_STATE),
        "enroll_dir": Field(Path, None),
        "threshold": Field(float, None, low=0.0, high=2.0, low_open=True),
        "min_score": Field(float, None, low=0.0, high=1.0),
        "detector": Field(Detector, None),
        "threads": Field(int, 0, low=0, high=MAX_THREADS),
        "detect_every": Field(int, None, low=1, high=MAX_DETECT_EVERY),  # None: DEFAULT_DETECT_EVERY[source.kind]
        "keep_descriptor_within": Field(float, KEEP_DESCRIPTOR_WITHIN, low=0.0, high=255.0),
    },
    "source": {
        "kind": Field(SourceKind, SourceKind.FOLDER),
        "path": Field(Path, None),
        "camera_index": Field(int, 0, low=0, high=1023),
        "poll_interval_s": _seconds(1.0, high=3600.0),
        "settle_s": _seconds(1.0, low_open=False, high=3600.0),
        "stride": Field(int, 1, low=1, high=100_000),
        "max_fps": Field(float, 0.0, low=0.0, high=1000.0),
        "max_frames": Field(int, 0, low=0, high=10**12),
    },
    "broker": {
        "host": Field(str),
        "port": Field(int, 1883, low=1, high=65535),
        "username": Field(str, None),
        "password_file": Field(Path, None),
        "tls": Field(bool, False),
        "tls_ca": Field(Path, None),
        "tls_cert": Field(Path, None),
        "tls_key": Field(Path, None),
        "keepalive_s": Field(int, 30, low=1, high=65535),  # MQTT's keepalive is a 16-bit field
        # A broker off this machine without TLS is refused unless this says the clear text is accepted.
        "allow_insecure": Field(bool, False),
    },
    "telemetry": {
        "prefix": Field(str, "edge-deploy"),
        "interval_s": _seconds(30.0),
        "outbox": Field(Path, _DEFAULT_STATE),
        "outbox_capacity": Field(int, 10_000, low=1, high=10_000_000),
        "flush_timeout_s": _seconds(10.0, high=3600.0),
        "commit_interval_s": _seconds(0.2, low_open=False, high=10.0),
        "require_subscriber": Field(bool, False),
    },
    "commands": {
        "secret_file": Field(Path, None),
        "max_skew_s": _seconds(60.0),
        "bench_runs": Field(int, 50, low=1, high=100_000),
        "max_bench_runs": Field(int, 1000, low=1, high=100_000),
    },
    "update": {
        "max_bytes": Field(int, 1 << 30, low=1024, high=1 << 34),
        "download_timeout_s": _seconds(600.0),
        # Least average download speed, from edge.update.download.SPEED_GRACE_S after the request on (0: off).
        "min_bytes_per_s": Field(int, DEFAULT_MIN_BYTES_PER_S, low=0, high=1 << 30),
        "max_latency_ms": Field(float, 1000.0, low=0.0, high=600_000.0, low_open=True),
        "bench_runs": Field(int, 10, low=1, high=10_000),
        "crash_limit": Field(int, 3, low=1, high=100),
        "crash_window_s": _seconds(600.0),
    },
    "text": {
        "model_dir": Field(Path, None),
        "max_new_tokens": Field(int, 64, low=1, high=8192),
        "max_prompt_chars": Field(int, 4000, low=1, high=65_536),
        "threads": Field(int, 0, low=0, high=MAX_THREADS),
    },
}

_DEFAULT_FILES = {"face.gallery": "gallery.npz", "telemetry.outbox": "outbox.sqlite"}


def _with_defaults(table: str, t: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Table ``table`` as read, or every key at its default when the table is absent."""
    if table in t:
        return dict(t[table])
    return {key: f.default for key, f in _SCHEMA[table].items()}


def _default_device_id() -> str:
    """The host name, cut to a valid topic level (``edge-deploy`` when nothing is left)."""
    name = re.sub(r"[^A-Za-z0-9_.:-]", "-", socket.gethostname()).strip("-.")[:64]
    return name or "edge-deploy"


def _build_source(where: str, s: dict[str, Any]) -> SourceSettings:
    kind: SourceKind = s["kind"]
    path: Path | None = s["path"]
    if kind is SourceKind.CAMERA:
        if path is not None:
            raise InputError(
                f"{where}: source.path = '{path}' with source.kind = 'camera'; a camera takes camera_index"
            )
    elif path is None:
        raise InputError(f"{where}: missing key source.path (source.kind = '{kind.value}' needs it)")
    elif kind is SourceKind.FOLDER and not path.is_dir():
        raise InputError(f"{where}: source.path = '{path}'; expected an existing folder to watch")
    elif kind is SourceKind.VIDEO and not path.is_file():
        raise InputError(f"{where}: source.path = '{path}'; expected an existing video file")
    return SourceSettings(**s)


def _detect_every(configured: int | None, kind: SourceKind) -> int:
    """``face.detect_every`` as the daemon runs it: a folder's images are each detected (1, whatever the config
    says: its frames do not follow one another); a video or a camera takes the configured value, else its
    kind's default."""
    if kind is SourceKind.FOLDER or configured is None:
        return DEFAULT_DETECT_EVERY[kind]
    return configured


def _build_broker(where: str, b: dict[str, Any]) -> BrokerConfig:
    password = None
    if b["password_file"] is not None:
        if b["username"] is None:
            raise InputError(f"{where}: broker.password_file is set but broker.username is not; expected both")
        check_private_mode(b["password_file"], f"{where}: broker.password_file = '{b['password_file']}'")
        try:
            password = b["password_file"].read_text(encoding="utf-8").splitlines()[0]
        except (OSError, UnicodeDecodeError, IndexError) as exc:
            raise InputError(
                f"{where}: broker.password_file = '{b['password_file']}'; cannot read a password from its "
                f"first line ({exc})"
            ) from exc
    if b["tls_key"] is not None and Path(b["tls_key"]).is_file():
        check_private_mode(b["tls_key"], f"{where}: broker.tls_key = '{b['tls_key']}'")
    try:
        broker = BrokerConfig(
            host=b["host"],
            port=b["port"],
            username=b["username"],
            password=password,
            tls=b["tls"],
            tls_ca=b["tls_ca"],
            tls_cert=b["tls_cert"],
            tls_key=b["tls_key"],
            keepalive_s=b["keepalive_s"],
        )
    except TelemetryError as exc:
        raise InputError(f"{where}: [broker] {exc}") from exc
    if not broker.uses_tls and not broker.is_loopback and not b["allow_insecure"]:
        raise InputError(
            f"{where}: broker.host = '{broker.host}' without TLS; expected tls = true (or tls_ca) for a broker off "
            "this machine (the password, commands and results would cross the network in clear), or "
            "broker.allow_insecure = true to accept that"
        )
    return broker


def _state_path(values: dict[str, Any], dotted: str, state_dir: Path) -> None:
    key = dotted.split(".")[1]
    if values[key] is _DEFAULT_STATE:
        values[key] = state_dir / _DEFAULT_FILES[dotted]


def _build(where: str, path: Path, t: dict[str, dict[str, Any]]) -> DaemonConfig:
    top = _with_defaults("", t)
    top["state_dir"] = (path.resolve().parent / top["state_dir"]).resolve()  # the default is relative too
    device_id = top["device_id"] or _default_device_id()
    face, tele = _with_defaults("face", t), _with_defaults("telemetry", t)
    _state_path(face, "face.gallery", top["state_dir"])
    _state_path(tele, "telemetry.outbox", top["state_dir"])
    try:
        check_name("device_id", device_id)
        for i, tag in enumerate(top["tags"]):
            check_name(f"tags[{i}]", tag)
    except TelemetryError as exc:
        raise InputError(f"{where}: {exc}") from exc
    try:
        check_prefix(tele["prefix"])
    except TelemetryError as exc:
        raise InputError(f"{where}: telemetry.{exc}") from exc
    if not face["models"].is_dir():
        raise InputError(
            f"{where}: face.models = '{face['models']}'; expected a folder written by 'edge-deploy convert face'"
        )
    if face["enroll_dir"] is not None and not face["enroll_dir"].is_dir():
        raise InputError(f"{where}: face.enroll_dir = '{face['enroll_dir']}'; expected a folder of per-person folders")
    commands = _with_defaults("commands", t)
    if commands["bench_runs"] > commands["max_bench_runs"]:
        raise InputError(
            f"{where}: commands.bench_runs = {commands['bench_runs']}; expected at most commands.max_bench_runs "
            f"({commands['max_bench_runs']})"
        )
    broker = _build_broker(where, t["broker"]) if "broker" in t else None
    text = _with_defaults("text", t)
    if text["model_dir"] is not None and not text["model_dir"].is_dir():
        raise InputError(f"{where}: text.model_dir = '{text['model_dir']}'; expected a converted language-model folder")
    source = _build_source(where, _with_defaults("source", t))
    face["detect_every"] = _detect_every(face["detect_every"], source.kind)
    return DaemonConfig(
        source_file=path,
        device_id=device_id,
        state_dir=top["state_dir"],
        target=top["target"],
        bundle=top["bundle"],
        trusted_keys=tuple(top["trusted_keys"]),
        tags=tuple(dict.fromkeys(top["tags"])),
        log_level=top["log_level"],
        face=FaceSettings(**face),
        source=source,
        broker=broker,
        broker_insecure=broker is not None and not broker.uses_tls and not broker.is_loopback,
        telemetry=TelemetrySettings(**tele),
        commands=CommandSettings(**commands),
        text=TextSettings(**text),
        update=UpdateSettings(**_with_defaults("update", t)),
    )


def load_config(path: Path) -> DaemonConfig:
    """Load and validate the daemon config.

    Args:
        path: the TOML file; relative paths inside it are relative to its folder.

    Returns:
        The validated config.

    Raises:
        InputError: naming the file and key when the file is unreadable, not TOML, or a table or key is
            unknown, missing, of the wrong type or out of range.
    """
    path = Path(path)
    where = str(path)
    data = read_toml(path, where, InputError, "daemon config")
    tables = read_tables(where, data, _SCHEMA, InputError, ("face", "source"), base=path.resolve().parent)
    return _build(where, path, tables)
