"""One typed TOML reader for every config file: target profiles and the daemon config.

A schema maps table -> key -> :class:`Field` (``""`` is the top level). :func:`read_toml` reads and parses a
file within a size bound; :func:`read_tables` checks it against a schema in the documented order: reject
unknown tables and keys -> convert each value to its kind (enums, numbers, paths, lists) -> check each
number's range. Numbers must be finite (TOML allows ``nan`` and ``inf``; NaN passes every ``<``/``>``
check, so it is refused first), strings must be valid text without control characters, paths at most
4096 bytes. Every error names the file and the dotted key, the value found and what is allowed::

    edge-deploy.toml: commands.max_skew_s = nan; expected a finite number

Cross-field rules stay with each config's own loader; the error class is the caller's (ProfileError for
profiles, InputError for the daemon config).
"""

from __future__ import annotations

import enum
import math
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edge.errors import EdgeDeployError

#: Largest config file read (a real one is a few kB).
MAX_TOML_BYTES = 1 << 20
#: Longest path accepted in a config (Linux PATH_MAX) and longest path component (NAME_MAX).
MAX_PATH_BYTES = 4096
MAX_NAME_BYTES = 255


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


#: ``Field.default`` of a key that must be present.
REQUIRED: Any = _Required()


@dataclass(frozen=True)
class Field:
    """One key of a schema.

    Attributes:
        kind: ``str``, ``int``, ``float``, ``bool``, ``Path``, an Enum class, or ``[kind]`` for a list.
        default: the value when the key is absent; ``REQUIRED`` when it must be given.
        low, high: inclusive bounds of a number (None: unbounded).
        low_open, high_open: make that bound exclusive.
    """

    kind: Any
    default: Any = REQUIRED
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    def range_text(self, whole: bool) -> str:
        """What the bounds allow, e.g. ``a number > 0.0`` or ``a whole number in 1..65535``."""
        word = "whole number" if whole else "number"
        if self.low is not None and self.high is not None:
            if whole and not (self.low_open or self.high_open):
                return f"a {word} in {self.low:g}..{self.high:g}"
            left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
            return f"a {word} in {left}{self.low:g}, {self.high:g}{right}"
        if self.low is not None:
            return f"a {word} {'>' if self.low_open else '>='} {self.low}"
        return f"a {word} {'<' if self.high_open else '<='} {self.high}"

    def in_range(self, value: float) -> bool:
        """Whether a (finite) number is within the bounds."""
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            return False
        return not (self.high is not None and (value > self.high or (self.high_open and value == self.high)))


Schema = dict[str, dict[str, Field]]


def read_toml(path: Path, where: str, error: type[EdgeDeployError], what: str) -> dict[str, Any]:
    """Read and parse a TOML file of at most ``MAX_TOML_BYTES``.

    Raises:
        error: naming ``where`` when the file is unreadable, too large, not UTF-8, not TOML, or nested
            deeper than the parser can follow.
    """
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_TOML_BYTES + 1)
    except OSError as exc:
        raise error(f"{where}: cannot read the {what} ({exc.strerror})") from exc
    except ValueError as exc:  # a NUL in the path
        raise error(f"{where}: cannot read the {what} ({exc})") from exc
    if len(raw) > MAX_TOML_BYTES:
        raise error(f"{where}: larger than {MAX_TOML_BYTES} bytes; expected a {what} of a few kB")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{where}: not UTF-8 text ({exc.reason})") from exc
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{where}: not valid TOML ({exc})") from exc
    except RecursionError:  # tomllib is a recursive-descent parser: [[[[... 100k deep ends here
        raise error(f"{where}: not valid TOML (nested too deeply to read); expected a flat config") from None


def _check_string(where: str, key: str, value: str, error: type[EdgeDeployError], path: bool) -> str:
    """Refuse NUL anywhere, and any control character in a path."""
    bad = next((c for c in value if c == "\0" or (path and ord(c) < 32)), None)
    if bad is not None:
        shown = value if len(value) <= 80 else value[:60] + "…"
        raise error(f"{where}: {key} = {shown!r}; expected text without control characters (found {bad!r})")
    return value


def _check_path(where: str, key: str, value: str, base: Path, error: type[EdgeDeployError]) -> Path:
    encoded = os.fsencode(value)
    shown = value if len(value) <= 80 else value[:60] + f"…({len(value)} characters)"
    if not value.strip():
        raise error(f"{where}: {key} = {value!r}; expected a path (string)")
    if len(encoded) > MAX_PATH_BYTES or any(len(p) > MAX_NAME_BYTES for p in encoded.split(b"/")):
        raise error(
            f"{where}: {key} = {shown!r}; expected a path of at most {MAX_PATH_BYTES} bytes with names of at "
            f"most {MAX_NAME_BYTES}"
        )
    return (base / value).resolve()


def convert(where: str, key: str, value: Any, field: Field, error: type[EdgeDeployError], base: Path) -> Any:
    """Convert one TOML value to ``field.kind`` and check its range, or raise naming file, key and value."""
    kind = field.kind
    if isinstance(kind, list):
        if not isinstance(value, list):
            raise error(f"{where}: {key} = {value!r}; expected a list")
        item = Field(kind[0])
        return [convert(where, f"{key}[{i}]", v, item, error, base) for i, v in enumerate(value)]
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        allowed = [m.value for m in kind]
        if not isinstance(value, str) or value not in allowed:
            raise error(f"{where}: {key} = {value!r}; expected one of {', '.join(allowed)}")
        return kind(value)
    if kind is bool:
        if not isinstance(value, bool):
            raise error(f"{where}: {key} = {value!r}; expected true or false")
        return value
    if kind in (int, float):
        return _number(where, key, value, field, error)
    if not isinstance(value, str):
        raise error(f"{where}: {key} = {value!r}; expected {'a path (string)' if kind is Path else 'a string'}")
    _check_string(where, key, value, error, path=kind is Path)
    return _check_path(where, key, value, base, error) if kind is Path else value


def _number(where: str, key: str, value: Any, field: Field, error: type[EdgeDeployError]) -> int | float:
    whole = field.kind is int
    if isinstance(value, bool) or not isinstance(value, int if whole else int | float):
        raise error(f"{where}: {key} = {value!r}; expected a {'whole number' if whole else 'number'}")
    if not whole:
        try:
            number = float(value)
        except OverflowError:  # an int beyond float's range: math.isfinite itself would raise
            number = math.inf
        if not math.isfinite(number):
            raise error(f"{where}: {key} = {value!r}; expected a finite number")
        value = number
    if not field.in_range(value):
        raise error(f"{where}: {key} = {value!r}; expected {field.range_text(whole)}")
    return value


def read_tables(
    where: str,
    data: dict[str, Any],
    schema: Schema,
    error: type[EdgeDeployError],
    required_tables: tuple[str, ...],
    base: Path = Path("."),
) -> dict[str, dict[str, Any]]:
    """Check parsed TOML against ``schema``.

    Args:
        where: the file, as named in errors.
        data: what ``read_toml`` returned.
        schema: table -> key -> Field.
        error: the error class to raise.
        required_tables: tables that must be present (the top level always is).
        base: folder that relative ``Path`` values are resolved against.

    Returns:
        Per table present (the top level always), every key of its schema: the converted value or the
        default. Absent optional tables are absent.

    Raises:
        error: for an unknown or missing table or key, a value of the wrong kind or out of range.
    """
    tables: dict[str, dict[str, Any]] = {"": {}}
    for key, value in data.items():
        if isinstance(value, dict):
            if key not in schema or key == "":
                allowed = ", ".join(f"[{k}]" for k in sorted(k for k in schema if k))
                raise error(f"{where}: unknown table [{key}]; expected one of {allowed}")
            tables[key] = value
        else:
            tables[""][key] = value
    for table in required_tables:
        if table not in tables:
            raise error(f"{where}: missing table [{table}]")
    out: dict[str, dict[str, Any]] = {}
    for table, spec in schema.items():
        if table in tables:
            out[table] = _read_table(where, table, tables[table], spec, error, base)
    return out


def _read_table(
    where: str, table: str, raw: dict[str, Any], spec: dict[str, Field], error: type[EdgeDeployError], base: Path
) -> dict[str, Any]:
    prefix = f"{table}." if table else ""
    for key in raw:
        if key not in spec:
            shown = key if len(key) <= 80 else key[:60] + "…"
            raise error(f"{where}: unknown key {prefix}{shown}; expected one of {', '.join(sorted(spec))}")
    values: dict[str, Any] = {}
    for key, field in spec.items():
        if key in raw:
            values[key] = convert(where, prefix + key, raw[key], field, error, base)
        elif field.default is REQUIRED:
            raise error(f"{where}: missing key {prefix}{key}")
        else:
            values[key] = field.default
    return values
