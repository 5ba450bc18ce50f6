"""Signed commands on ``<prefix>/<device_id>/cmd``: the wire format, signing and verification.

A command is one JSON object::

    {"v": 1, "device": "pi-kitchen", "cmd": "bench", "args": {"runs": 20},
     "ts": 1764489600.0, "nonce": "3f2a...", "sig": "<64 hex digits>"}

``sig`` is HMAC-SHA256, keyed with the shared secret (a file named by ``commands.secret_file``), over the
canonical JSON of every other field (keys sorted, no spaces, UTF-8). The daemon obeys a command only if the
signature verifies, ``device`` is its own id (a command for one device can't be replayed to another that
shares the secret), ``ts`` is within ``max_skew_s`` of its clock, and the ``nonce`` was not seen within the
window (nonces are kept durably, so a replay after a restart is refused too). Everything else is rejected
with a reason; nothing here raises on bad input from the network.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import os
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edge.errors import InputError
from edge.filemode import check_private_mode
from edge.payload import MAX_INT, PayloadError, parse_json

COMMAND_VERSION = 1
#: Commands the daemon knows, with the arguments each accepts.
COMMAND_ARGS: dict[str, tuple[str, ...]] = {
    "bench": ("runs", "role"),
    "reload": (),
    "enroll": (),
    "update": ("url", "sha256"),  # a bundle archive and its sha256 (edge.daemon.updater)
}
MIN_SECRET_BYTES = 16
MAX_COMMAND_BYTES = 4096
#: A command is an object holding ``args``, whose values are scalars or short lists.
MAX_COMMAND_DEPTH = 4
_NONCE_RE = re.compile(r"^[A-Za-z0-9_-]{16,64}$")
_SIG_RE = re.compile(r"^[0-9a-f]{64}$")
_FIELDS = ("v", "device", "cmd", "args", "ts", "nonce", "sig")


@dataclass(frozen=True)
class Command:
    """A verified command: what to do and the nonce that identifies this request."""

    name: str
    args: dict[str, Any] = field(default_factory=dict)
    nonce: str = ""


class CommandRejected(Exception):
    """A command message that must not be obeyed; ``reason`` says why (for the log and the rejection report).

    Not an EdgeDeployError: it is an expected outcome of untrusted input, handled by the daemon itself.
    """

    def __init__(self, reason: str, nonce: str | None = None, cmd: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.nonce = nonce
        self.cmd = cmd


def load_secret(path: Path) -> bytes:
    """Read the shared command secret.

    The file must be readable by its owner only (mode 600 or stricter), like an SSH key, and hold at least
    16 bytes (trailing newlines are stripped). Make one with ``head -c 32 /dev/urandom | base64 > FILE``.

    Raises:
        InputError: if the file is missing, readable by group or others, or too short.
    """
    path = Path(path)
    check_private_mode(path, f"commands.secret_file = '{path}'")
    try:
        data = path.read_bytes().rstrip(b"\r\n")
    except OSError as exc:
        raise InputError(f"commands.secret_file = '{path}': cannot read ({exc.strerror})") from exc
    if len(data) < MIN_SECRET_BYTES:
        raise InputError(
            f"commands.secret_file = '{path}': {len(data)} bytes; expected at least {MIN_SECRET_BYTES} "
            "(e.g. head -c 32 /dev/urandom | base64)"
        )
    return data


def canonical(body: dict[str, Any]) -> bytes:
    """The bytes that are signed: every field but ``sig``, as compact JSON with sorted keys, UTF-8."""
    unsigned = {k: v for k, v in body.items() if k != "sig"}
    return json.dumps(unsigned, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def signature(secret: bytes, body: dict[str, Any]) -> str:
    """HMAC-SHA256 of ``canonical(body)`` as 64 lowercase hex digits."""
    return hmac.new(secret, canonical(body), hashlib.sha256).hexdigest()


def sign_command(
    secret: bytes,
    device_id: str,
    cmd: str,
    args: dict[str, Any] | None = None,
    ts: float | None = None,
    nonce: str | None = None,
) -> str:
    """Make a signed command message (the JSON text to publish on the device's cmd topic).

    Args:
        secret: the shared secret (``load_secret``).
        device_id: the device that is to obey it.
        cmd: ``bench``, ``reload`` or ``enroll``.
        args: the command's arguments.
        ts: Unix time of signing; now if None.
        nonce: a fresh random token if None (use a new one for every command).

    Returns:
        The JSON text.
    """
    body: dict[str, Any] = {
        "v": COMMAND_VERSION,
        "device": device_id,
        "cmd": cmd,
        "args": dict(args or {}),
        "ts": time.time() if ts is None else ts,
        "nonce": nonce or secrets.token_hex(16),
    }
    body["sig"] = signature(secret, body)
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False)


def _parse(payload: bytes) -> dict[str, Any]:
    try:
        body = parse_json(payload, "malformed command", MAX_COMMAND_BYTES, MAX_COMMAND_DEPTH)
    except PayloadError as exc:
        raise CommandRejected(str(exc)) from None
    if not isinstance(body, dict):
        raise CommandRejected(f"malformed command: expected a JSON object, got {type(body).__name__}")
    nonce = body.get("nonce") if isinstance(body.get("nonce"), str) else None
    cmd = body.get("cmd") if isinstance(body.get("cmd"), str) else None
    missing = [k for k in _FIELDS if k not in body]
    unknown = sorted(set(body) - set(_FIELDS))
    if missing or unknown:
        what = f"missing field '{missing[0]}'" if missing else f"unknown field '{unknown[0]}'"
        raise CommandRejected(f"malformed command: {what}; expected fields {', '.join(_FIELDS)}", nonce, cmd)
    checks = (
        ("v", body["v"] == COMMAND_VERSION and not isinstance(body["v"], bool), f"{COMMAND_VERSION}"),
        ("device", isinstance(body["device"], str), "a string"),
        ("cmd", isinstance(body["cmd"], str), "a string"),
        ("args", isinstance(body["args"], dict), "a JSON object"),
        ("ts", _is_number(body["ts"]), "a number (Unix seconds)"),
        ("nonce", isinstance(body["nonce"], str) and bool(_NONCE_RE.match(body["nonce"])), "16-64 of [A-Za-z0-9_-]"),
        ("sig", isinstance(body["sig"], str) and bool(_SIG_RE.match(body["sig"])), "64 lowercase hex digits"),
    )
    for key, ok, expected in checks:
        if not ok:
            raise CommandRejected(f"malformed command: field '{key}' = {body[key]!r}; expected {expected}", nonce, cmd)
    return body


def _is_number(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):  # math.isfinite(10**400) raises OverflowError: compare as an integer
        return abs(value) <= MAX_INT
    return isinstance(value, float) and math.isfinite(value)


def verify_command(
    payload: bytes,
    secret: bytes | None,
    device_id: str,
    max_skew_s: float,
    claim_nonce: Callable[[str, float], bool],
    now: float | None = None,
) -> Command:
    """Check a command message and return it if the daemon may obey it.

    Args:
        payload: the raw MQTT payload.
        secret: the shared secret, or None when commands are disabled.
        device_id: this device's id.
        max_skew_s: largest accepted difference between ``ts`` and this device's clock.
        claim_nonce: records a nonce with its ts; returns False if it was already used.
        now: current Unix time (for tests); ``time.time()`` if None.

    Returns:
        The verified command.

    Raises:
        CommandRejected: with the reason, for malformed, unsigned, wrongly signed, misaddressed, stale,
            replayed or unknown commands and bad arguments.
    """
    body = _parse(payload)
    nonce, cmd = body["nonce"], body["cmd"]
    if secret is None:
        raise CommandRejected("commands are disabled: no commands.secret_file configured", nonce, cmd)
    if not hmac.compare_digest(signature(secret, body), body["sig"]):
        raise CommandRejected(
            "bad signature: HMAC-SHA256 over the command does not match the shared secret", nonce, cmd
        )
    if body["device"] != device_id:
        raise CommandRejected(f"command is for device {body['device']!r}; this is {device_id!r}", nonce, cmd)
    now = time.time() if now is None else now
    skew = body["ts"] - now
    if not abs(skew) <= max_skew_s:  # written so that a NaN bound refuses, never accepts
        raise CommandRejected(
            f"stale command: ts is {skew:+.1f} s from this device's clock; expected within {max_skew_s:g} s", nonce, cmd
        )
    if cmd not in COMMAND_ARGS:
        raise CommandRejected(f"unknown command {cmd!r}; expected one of {', '.join(COMMAND_ARGS)}", nonce, cmd)
    unknown = sorted(set(body["args"]) - set(COMMAND_ARGS[cmd]))
    if unknown:
        allowed = ", ".join(COMMAND_ARGS[cmd]) or "none"
        raise CommandRejected(f"{cmd}: unknown argument {unknown[0]!r}; expected {allowed}", nonce, cmd)
    if not claim_nonce(nonce, float(body["ts"])):
        raise CommandRejected(f"replayed command: nonce {nonce} was already used", nonce, cmd)
    return Command(cmd, dict(body["args"]), nonce)


def write_secret(path: Path, nbytes: int = 32) -> Path:
    """Create a new random secret file (mode 600; hex text). Refuses to overwrite an existing file.

    Raises:
        InputError: if the file exists or can't be written.
    """
    path = Path(path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise InputError(f"{path}: cannot create the secret file ({exc.strerror}); expected a new file") from exc
    with os.fdopen(fd, "w", encoding="ascii") as fh:
        fh.write(secrets.token_hex(nbytes) + "\n")
    return path
