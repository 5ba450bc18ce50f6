"""The one boundary for JSON that comes from outside the process: MQTT payloads and files named by configs.

Every reader of untrusted JSON (the daemon's command and text-request topics, the telemetry reader that the
monitor uses, bundle manifests, ``models.json``) goes through :func:`parse_json`, which refuses, before or
while decoding and with an error naming the input:

- more than ``max_bytes`` bytes (checked first, before any decoding);
- text that is not UTF-8;
- nesting deeper than ``max_depth`` arrays/objects (counted by a linear scan *before* ``json.loads``, so a
  100,000-deep payload never reaches the recursive decoder);
- an integer outside ``±MAX_INT`` (2^53 - 1, the range a JSON reader in any language holds exactly; a
  400-digit number is refused from its digit count, before Python converts it);
- a number that is not finite (``NaN``, ``Infinity``, or ``1e400``, which decodes to infinity);
- a string holding a lone UTF-16 surrogate (``"\\ud800"``), which no UTF-8 consumer (SQLite, tokenizers)
  can take.

What is left is plain JSON: dicts, lists, str, int, float, bool and None, within these bounds.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from edge.errors import InputError

#: Default size bound of one payload (bytes of encoded JSON).
MAX_PAYLOAD_BYTES = 64 * 1024
#: Default bound on nested arrays/objects (a telemetry report needs 4; a manifest 5).
MAX_DEPTH = 32
#: Largest magnitude of an integer (2^53 - 1: exact in every JSON reader, JavaScript's included).
MAX_INT = 2**53 - 1
_MAX_INT_DIGITS = len(str(MAX_INT))
# A string (closing quote optional, so an unterminated one ends the scan in linear time) or a bracket.
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"?|[\[\]{}]', re.DOTALL)
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class PayloadError(InputError):
    """A payload outside the boundary; the message names the source and what was expected."""


def _depth(text: str) -> int:
    """The deepest array/object nesting of ``text``, counted without decoding it (linear time)."""
    depth = deepest = 0
    for match in _TOKENS.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif token in "]}":
            depth -= 1
    return deepest


def _shown(text: str, count: int, unit: str) -> str:
    """A number's text for a message: whole when short, else its start and its length."""
    return text if len(text) <= 24 else f"{text[:12]}…({count} {unit})"


def _int_hook(source: str):
    def parse_int(digits: str) -> int:
        count = len(digits.lstrip("-"))
        if count > _MAX_INT_DIGITS or abs(value := int(digits)) > MAX_INT:
            shown = _shown(digits, count, "digits")
            raise PayloadError(f"{source}: integer {shown} is out of range; expected at most ±{MAX_INT} (2^53 - 1)")
        return value

    return parse_int


def _float_hook(source: str):
    def parse_float(text: str) -> float:
        if not math.isfinite(value := float(text)):
            shown = _shown(text, len(text), "characters")
            raise PayloadError(f"{source}: number {shown} is not a finite float; expected a finite number")
        return value

    return parse_float


def _no_constant(source: str):
    def parse_constant(name: str) -> Any:
        raise PayloadError(f"{source}: {name} is not allowed; expected a finite number")

    return parse_constant


def has_surrogate_escape(text: str) -> bool:
    """Whether JSON text holds a ``\\uD800``-``\\uDFFF`` escape (only then can a decoded string be invalid)."""
    return _SURROGATE_ESCAPE.search(text) is not None


def check_text(value: str, what: str) -> str:
    """Check that ``value`` is valid Unicode text (encodable as UTF-8: no lone surrogates).

    Raises:
        PayloadError: naming ``what`` and the position of the first bad character.
    """
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = value[exc.start]
        raise PayloadError(
            f"{what}: character {exc.start} is U+{ord(bad):04X}, a lone surrogate; expected valid Unicode text"
        ) from None
    return value


def check_strings(value: Any, source: str) -> None:
    """Check every string (keys included) of a JSON-like value; its depth must be bounded already.

    Raises:
        PayloadError: naming ``source`` at the first string with a lone surrogate.
    """
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            check_text(item, f"{source}: a string")
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def parse_json(
    data: bytes | bytearray | str, source: str, max_bytes: int = MAX_PAYLOAD_BYTES, max_depth: int = MAX_DEPTH
) -> Any:
    """Decode one JSON document from outside, within the bounds in this module's docstring.

    Args:
        data: the payload (bytes are decoded as UTF-8).
        source: how to name it in errors (a topic, a file).
        max_bytes: largest accepted size in bytes.
        max_depth: deepest accepted nesting of arrays and objects.

    Returns:
        The decoded value.

    Raises:
        PayloadError: naming ``source`` and the bound it broke, or why it is not JSON.
    """
    size = len(data) if not isinstance(data, str) else len(data.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise PayloadError(f"{source}: {size} bytes; expected at most {max_bytes}")
    if isinstance(data, bytes | bytearray):
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise PayloadError(f"{source}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    else:
        text = check_text(data, source)
    # Only a payload with more brackets than the bound can be nested deeper than it: skip the scan otherwise.
    depth = _depth(text) if text.count("[") + text.count("{") > max_depth else 0
    if depth > max_depth:
        raise PayloadError(f"{source}: nested {depth} levels deep; expected at most {max_depth}")
    try:
        value = json.loads(
            text,
            parse_int=_int_hook(source),
            parse_float=_float_hook(source),
            parse_constant=_no_constant(source),
        )
    except ValueError as exc:  # JSONDecodeError is a ValueError
        raise PayloadError(f"{source}: not valid JSON ({exc})") from None
    if has_surrogate_escape(text):
        check_strings(value, source)
    return value
