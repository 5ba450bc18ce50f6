"""Signed commands: what is obeyed, and the exact reason for everything that is not."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from edge.daemon.commands import (
    Command,
    CommandRejected,
    canonical,
    load_secret,
    sign_command,
    signature,
    verify_command,
    write_secret,
)
from edge.errors import InputError

SECRET = b"0123456789abcdef0123456789abcdef"
NOW = 1_800_000_000.0
NONCE = "n" * 32


class Nonces:
    def __init__(self) -> None:
        self.seen: set[str] = set()

    def __call__(self, nonce: str, ts: float) -> bool:
        if nonce in self.seen:
            return False
        self.seen.add(nonce)
        return True


def verify(payload: str | bytes, secret: bytes | None = SECRET, nonces: Nonces | None = None) -> Command:
    data = payload.encode() if isinstance(payload, str) else payload
    return verify_command(data, secret, "pi-a", 60.0, nonces or Nonces(), now=NOW)


def reason(payload: str | bytes, **kw) -> str:
    with pytest.raises(CommandRejected) as info:
        verify(payload, **kw)
    return info.value.reason


def signed(cmd: str = "bench", args: dict | None = None, **kw) -> str:
    kw.setdefault("ts", NOW)
    kw.setdefault("nonce", NONCE)
    return sign_command(SECRET, kw.pop("device", "pi-a"), cmd, args, **kw)


def test_a_correctly_signed_command_is_obeyed_once() -> None:
    nonces = Nonces()
    assert verify(signed("bench", {"runs": 5}), nonces=nonces) == Command("bench", {"runs": 5}, NONCE)
    assert reason(signed("bench", {"runs": 5}), nonces=nonces) == f"replayed command: nonce {NONCE} was already used"


def test_the_signature_covers_every_field_in_canonical_form() -> None:
    body = json.loads(signed("reload"))
    assert canonical(body) == (
        b'{"args":{},"cmd":"reload","device":"pi-a","nonce":"' + NONCE.encode() + b'","ts":1800000000.0,"v":1}'
    )
    assert body["sig"] == signature(SECRET, body)
    body["cmd"] = "enroll"  # any change breaks the signature
    assert reason(json.dumps(body)) == "bad signature: HMAC-SHA256 over the command does not match the shared secret"


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        (
            b"\xff\xfe",
            "malformed command: not UTF-8 text (byte 0: invalid start byte)",
        ),  # fmt: skip
        ("[1, 2]", "malformed command: expected a JSON object, got list"),
        (
            '{"cmd": "bench"}',
            "malformed command: missing field 'v'; expected fields v, device, cmd, args, ts, nonce, sig",
        ),
        (
            '{"v": 1, "device": "pi-a", "cmd": "bench", "args": [], "ts": 1, "nonce": "'
            + NONCE
            + '", "sig": "'
            + "0" * 64
            + '"}',
            "malformed command: field 'args' = []; expected a JSON object",
        ),  # fmt: skip
        (b"x" * 5000, "malformed command: 5000 bytes; expected at most 4096"),
        ('{"v": NaN}', "malformed command: NaN is not allowed; expected a finite number"),
        # issue 17, defect 1: these crashed the daemon (RecursionError, OverflowError) before any signature check
        ("[" * 1500, "malformed command: nested 1500 levels deep; expected at most 4"),
        (
            '{"v": 1, "device": "pi-a", "cmd": "bench", "args": {}, "ts": ' + "9" * 400 + ', "nonce": "'
            + NONCE + '", "sig": "' + "0" * 64 + '"}',
            "malformed command: integer 999999999999…(400 digits) is out of range; expected at most "
            "±9007199254740991 (2^53 - 1)",
        ),  # fmt: skip
        ('{"v": 1, "ts": 1e400}', "malformed command: number 1e400 is not a finite float; expected a finite number"),
    ],
)
def test_malformed_messages_are_rejected_with_a_reason(payload: str | bytes, expected: str) -> None:
    assert reason(payload) == expected


def test_other_refusals() -> None:
    assert reason(signed(), secret=None) == "commands are disabled: no commands.secret_file configured"
    assert reason(sign_command(b"another-secret-of-enough-bytes!!", "pi-a", "bench", ts=NOW, nonce=NONCE)) == (
        "bad signature: HMAC-SHA256 over the command does not match the shared secret"
    )
    assert reason(signed(device="pi-b")) == "command is for device 'pi-b'; this is 'pi-a'"
    assert reason(signed(ts=NOW - 61)) == "stale command: ts is -61.0 s from this device's clock; expected within 60 s"
    assert reason(signed(ts=NOW + 90)) == "stale command: ts is +90.0 s from this device's clock; expected within 60 s"
    assert reason(signed("reboot")) == "unknown command 'reboot'; expected one of bench, reload, enroll, update"
    assert reason(signed("bench", {"model": "x"})) == "bench: unknown argument 'model'; expected runs, role"
    assert reason(signed("reload", {"x": 1})) == "reload: unknown argument 'x'; expected none"
    body = json.loads(signed())
    body["extra"] = 1
    assert reason(json.dumps(body)) == (
        "malformed command: unknown field 'extra'; expected fields v, device, cmd, args, ts, nonce, sig"
    )


def test_rejections_carry_nonce_and_cmd_when_readable() -> None:
    with pytest.raises(CommandRejected) as info:
        verify(signed(device="pi-b"))
    assert (info.value.nonce, info.value.cmd) == (NONCE, "bench")


def test_secret_file_rules(tmp_path: Path) -> None:
    path = write_secret(tmp_path / "key")
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert len(load_secret(path)) == 64
    with pytest.raises(InputError) as info:
        write_secret(path)
    assert str(info.value) == f"{path}: cannot create the secret file (File exists); expected a new file"
    os.chmod(path, 0o644)
    with pytest.raises(InputError) as info:
        load_secret(path)
    assert str(info.value) == (
        f"commands.secret_file = '{path}': mode 644 lets group or others read it; expected 600 (chmod 600 '{path}')"
    )
    short = tmp_path / "short"
    short.write_text("abc\n")
    os.chmod(short, 0o600)
    with pytest.raises(InputError) as info:
        load_secret(short)
    assert str(info.value) == (
        f"commands.secret_file = '{short}': 3 bytes; expected at least 16 (e.g. head -c 32 /dev/urandom | base64)"
    )


def test_a_nan_skew_bound_refuses_a_stale_signed_command() -> None:
    """Issue 17, defect 4: with max_skew_s = nan a validly signed command 10^6 s old was executed (NaN made
    the skew comparison false). The config reader now refuses nan; the check itself fails closed too."""
    stale = signed("reload", ts=NOW - 1e6).encode()
    with pytest.raises(CommandRejected) as info:
        verify_command(stale, SECRET, "pi-a", float("nan"), Nonces(), now=NOW)
    assert info.value.reason == "stale command: ts is -1000000.0 s from this device's clock; expected within nan s"
