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
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edge.errors import InputError, TelemetryError
from edge.telemetry.link import BrokerConfig
from edge.telemetry.schema import check_name, check_prefix

#: The example config shipped next to this module (every key, documented).
EXAMPLE_CONFIG = Path(__file__).resolve().parent / "edge-deploy.example.toml"
#: The systemd unit shipped next to this module.
SYSTEMD_UNIT = Path(__file__).resolve().parent / "edge-deploy.service"


class SourceKind(enum.Enum):
    """Where frames come from."""

    FOLDER = "folder"  # a watched folder of image files
    VIDEO = "video"  # a video file, read once
    CAMERA = "camera"  # an OpenCV camera (V4L2 index)


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
    threshold: float
    min_score: float
    threads: int


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
class DaemonConfig:
    """The whole daemon config, as read from one TOML file."""

    source_file: Path
    device_id: str
    state_dir: Path
    target: str | None
    bundle: Path | None
    log_level: LogLevel
    face: FaceSettings
    source: SourceSettings
    broker: BrokerConfig | None
    telemetry: TelemetrySettings
    commands: CommandSettings
    text: TextSettings

    @property
    def state_db(self) -> Path:
        """The daemon's own SQLite state (processed files, video positions, seen command nonces)."""
        return self.state_dir / "state.sqlite"


_REQUIRED = object()
_DEFAULT_STATE = object()  # "a file or folder under state_dir", resolved after state_dir is known

# table -> key -> (kind, default). Kinds: str, int, float, bool, Path, an Enum.
_SCHEMA: dict[str, dict[str, tuple[Any, Any]]] = {
    "": {
        "device_id": (str, None),
        "state_dir": (Path, Path("state")),
        "target": (str, None),
        "log_level": (LogLevel, LogLevel.INFO),
        "bundle": (Path, None),
    },
    "face": {
        "models": (Path, _REQUIRED),
        "gallery": (Path, _DEFAULT_STATE),
        "enroll_dir": (Path, None),
        "threshold": (float, 0.6),
        "min_score": (float, 0.9),
        "threads": (int, 0),
    },
    "source": {
        "kind": (SourceKind, SourceKind.FOLDER),
        "path": (Path, None),
        "camera_index": (int, 0),
        "poll_interval_s": (float, 1.0),
        "settle_s": (float, 1.0),
        "stride": (int, 1),
        "max_fps": (float, 0.0),
        "max_frames": (int, 0),
    },
    "broker": {
        "host": (str, _REQUIRED),
        "port": (int, 1883),
        "username": (str, None),
        "password_file": (Path, None),
        "tls": (bool, False),
        "tls_ca": (Path, None),
        "tls_cert": (Path, None),
        "tls_key": (Path, None),
        "keepalive_s": (int, 30),
    },
    "telemetry": {
        "prefix": (str, "edge-deploy"),
        "interval_s": (float, 30.0),
        "outbox": (Path, _DEFAULT_STATE),
        "outbox_capacity": (int, 10_000),
        "flush_timeout_s": (float, 10.0),
        "commit_interval_s": (float, 0.2),
        "require_subscriber": (bool, False),
    },
    "commands": {
        "secret_file": (Path, None),
        "max_skew_s": (float, 60.0),
        "bench_runs": (int, 50),
        "max_bench_runs": (int, 1000),
    },
    "text": {
        "model_dir": (Path, None),
        "max_new_tokens": (int, 64),
        "max_prompt_chars": (int, 4000),
        "threads": (int, 0),
    },
}

#: (table.key, lowest allowed, whether the bound is inclusive) for numbers.
_RANGES: tuple[tuple[str, float, bool], ...] = (
    ("face.threshold", 0.0, False),
    ("face.min_score", 0.0, True),
    ("face.threads", 0, True),
    ("source.camera_index", 0, True),
    ("source.poll_interval_s", 0.0, False),
    ("source.settle_s", 0.0, True),
    ("source.stride", 1, True),
    ("source.max_fps", 0.0, True),
    ("source.max_frames", 0, True),
    ("broker.keepalive_s", 1, True),
    ("telemetry.interval_s", 0.0, False),
    ("telemetry.outbox_capacity", 1, True),
    ("telemetry.flush_timeout_s", 0.0, False),
    ("telemetry.commit_interval_s", 0.0, True),
    ("commands.max_skew_s", 0.0, False),
    ("commands.bench_runs", 1, True),
    ("commands.max_bench_runs", 1, True),
    ("text.max_new_tokens", 1, True),
    ("text.max_prompt_chars", 1, True),
    ("text.threads", 0, True),
)

_DEFAULT_FILES = {"face.gallery": "gallery.npz", "telemetry.outbox": "outbox.sqlite"}


def _convert(where: str, key: str, value: Any, kind: Any, base: Path) -> Any:
    """Convert one TOML value to the schema's kind, or raise naming file, key, value and what is allowed."""
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        allowed = [m.value for m in kind]
        if value not in allowed:
            raise InputError(f"{where}: {key} = {value!r}; expected one of {', '.join(allowed)}")
        return kind(value)
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InputError(f"{where}: {key} = {value!r}; expected a number")
        return float(value)
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise InputError(f"{where}: {key} = {value!r}; expected a whole number")
        return value
    if kind is bool:
        if not isinstance(value, bool):
            raise InputError(f"{where}: {key} = {value!r}; expected true or false")
        return value
    if not isinstance(value, str) or (kind is Path and not value.strip()):
        expected = "a path (string)" if kind is Path else "a string"
        raise InputError(f"{where}: {key} = {value!r}; expected {expected}")
    return (base / value).resolve() if kind is Path else value


def _read_tables(where: str, data: dict[str, Any], base: Path) -> dict[str, dict[str, Any]]:
    tables: dict[str, dict[str, Any]] = {"": {}}
    for key, value in data.items():
        if isinstance(value, dict):
            if key not in _SCHEMA or key == "":
                allowed = ", ".join(f"[{k}]" for k in sorted(k for k in _SCHEMA if k))
                raise InputError(f"{where}: unknown table [{key}]; expected one of {allowed}")
            tables[key] = value
        else:
            tables[""][key] = value
    for table in ("face", "source"):
        if table not in tables:
            raise InputError(f"{where}: missing table [{table}]")
    out: dict[str, dict[str, Any]] = {}
    for table, spec in _SCHEMA.items():
        raw = tables.get(table)
        if raw is None:
            continue  # optional table: [broker], [telemetry], [commands], [text]
        prefix = f"{table}." if table else ""
        for key in raw:
            if key not in spec:
                raise InputError(f"{where}: unknown key {prefix}{key}; expected one of {', '.join(sorted(spec))}")
        out[table] = {}
        for key, (kind, default) in spec.items():
            if key in raw:
                out[table][key] = _convert(where, prefix + key, raw[key], kind, base)
            elif default is _REQUIRED:
                raise InputError(f"{where}: missing key {prefix}{key}")
    return out


def _with_defaults(table: str, values: dict[str, Any]) -> dict[str, Any]:
    return {key: values.get(key, default) for key, (_, default) in _SCHEMA[table].items()}


def _check_ranges(where: str, t: dict[str, dict[str, Any]]) -> None:
    for dotted, low, inclusive in _RANGES:
        table, key = dotted.split(".")
        value = t.get(table, {}).get(key)
        if value is None:
            continue
        if value < low or (value == low and not inclusive):
            word = "whole number" if isinstance(value, int) else "number"
            op = ">=" if inclusive else ">"
            raise InputError(f"{where}: {dotted} = {value!r}; expected a {word} {op} {low}")
    if "face" in t and t["face"].get("min_score", 0.0) > 1.0:
        raise InputError(f"{where}: face.min_score = {t['face']['min_score']!r}; expected a number in [0, 1]")


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


def _build_broker(where: str, b: dict[str, Any]) -> BrokerConfig:
    password = None
    if b["password_file"] is not None:
        if b["username"] is None:
            raise InputError(f"{where}: broker.password_file is set but broker.username is not; expected both")
        try:
            password = b["password_file"].read_text(encoding="utf-8").splitlines()[0]
        except (OSError, UnicodeDecodeError, IndexError) as exc:
            raise InputError(
                f"{where}: broker.password_file = '{b['password_file']}'; cannot read a password from its "
                f"first line ({exc})"
            ) from exc
    try:
        return BrokerConfig(
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


def _state_path(values: dict[str, Any], dotted: str, state_dir: Path) -> None:
    key = dotted.split(".")[1]
    if values[key] is _DEFAULT_STATE:
        values[key] = state_dir / _DEFAULT_FILES[dotted]


def _build(where: str, path: Path, t: dict[str, dict[str, Any]]) -> DaemonConfig:
    top = _with_defaults("", t[""])
    top["state_dir"] = (path.resolve().parent / top["state_dir"]).resolve()  # the default is relative too
    device_id = top["device_id"] or _default_device_id()
    face, tele = _with_defaults("face", t["face"]), _with_defaults("telemetry", t.get("telemetry", {}))
    _state_path(face, "face.gallery", top["state_dir"])
    _state_path(tele, "telemetry.outbox", top["state_dir"])
    try:
        check_name("device_id", device_id)
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
    commands = _with_defaults("commands", t.get("commands", {}))
    if commands["bench_runs"] > commands["max_bench_runs"]:
        raise InputError(
            f"{where}: commands.bench_runs = {commands['bench_runs']}; expected at most commands.max_bench_runs "
            f"({commands['max_bench_runs']})"
        )
    text = _with_defaults("text", t.get("text", {}))
    if text["model_dir"] is not None and not text["model_dir"].is_dir():
        raise InputError(f"{where}: text.model_dir = '{text['model_dir']}'; expected a converted language-model folder")
    return DaemonConfig(
        source_file=path,
        device_id=device_id,
        state_dir=top["state_dir"],
        target=top["target"],
        bundle=top["bundle"],
        log_level=top["log_level"],
        face=FaceSettings(**face),
        source=_build_source(where, _with_defaults("source", t["source"])),
        broker=_build_broker(where, _with_defaults("broker", t["broker"])) if "broker" in t else None,
        telemetry=TelemetrySettings(**tele),
        commands=CommandSettings(**commands),
        text=TextSettings(**text),
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
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{where}: cannot read the daemon config ({exc.strerror})") from exc
    except UnicodeDecodeError as exc:
        raise InputError(f"{where}: not UTF-8 text ({exc.reason})") from exc
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{where}: not valid TOML ({exc})") from exc
    tables = _read_tables(where, data, path.resolve().parent)
    _check_ranges(where, tables)
    return _build(where, path, tables)
