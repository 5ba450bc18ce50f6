"""Fuzzing every input channel with Hypothesis (issue 17): no traceback, and every error names its input.

Each target gets structured inputs near its schema (right keys, hostile values: NaN, 10^400, lone
surrogates, 5000-deep nesting, control tokens, huge declared image sizes, damaged zips) and raw bytes. The
property: the reader either accepts the input or raises its own typed error whose message names the input
(file, topic, field). Any other exception is a failure, shown by Hypothesis with the smallest input.

Fast tier: ``FAST_CASES`` per target (~400 in all). Slow tier (``-m slow``, run by CI): ``SLOW_CASES`` per
target, 11,000 in all.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import fuzz_strategies as fs

FAST_CASES = 40
SLOW_CASES = 1100
SECRET = b"0123456789abcdef0123456789abcdef"


def _names(exc: BaseException, *what: str) -> None:
    """The error must be one line-ish message naming the input."""
    text = str(exc)
    assert any(w in text for w in what), f"{type(exc).__name__} does not name {what}: {text[:300]}"


# --- the targets: (strategy, check(value, tmp)) ---------------------------------------------------------------


def check_daemon_config(text: str, tmp: Path) -> None:
    from edge.daemon.config import load_config
    from edge.errors import InputError

    for name in ("face", "incoming"):
        (tmp / name).mkdir(exist_ok=True)
    path = tmp / "edge-deploy.toml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        load_config(path)
    except InputError as exc:
        _names(exc, str(path))


DAEMON_BASE = {
    "": {"device_id": "pi-1", "state_dir": "state"},
    "face": {"models": "face", "threshold": 0.6, "threads": 0},
    "source": {"path": "incoming", "kind": "folder", "stride": 1},
    "broker": {"host": "127.0.0.1", "port": 1883, "keepalive_s": 30},
    "telemetry": {"interval_s": 30.0, "commit_interval_s": 0.2, "prefix": "edge-deploy"},
    "commands": {"max_skew_s": 60.0, "bench_runs": 50},
    "text": {"max_new_tokens": 64},
}


def check_profile(text: str, tmp: Path) -> None:
    from edge.errors import ProfileError
    from edge.profiles import load_profile_file

    path = tmp / "rpi4.toml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        load_profile_file(path)
    except ProfileError as exc:
        _names(exc, path.name)


def _profile_base() -> dict:
    import tomllib

    from edge.profiles import DEFAULT_PROFILE_DIR

    data = tomllib.loads((DEFAULT_PROFILE_DIR / "rpi4.toml").read_text())
    return {"": {k: v for k, v in data.items() if not isinstance(v, dict)},
            **{k: v for k, v in data.items() if isinstance(v, dict)}}  # fmt: skip


def check_manifest(data: bytes, tmp: Path) -> None:
    from edge.bundle import parse_manifest
    from edge.errors import BundleError

    try:
        parse_manifest(data, "M/manifest.json")
    except BundleError as exc:
        _names(exc, "M/manifest.json")


def check_models_json(data: bytes, tmp: Path) -> None:
    from edge.errors import InputError
    from edge.face.models import read_models_folder

    (tmp / "m.onnx").write_bytes(b"abc")
    (tmp / "models.json").write_bytes(data)
    try:
        read_models_folder(tmp)
    except InputError as exc:
        _names(exc, str(tmp))


MODELS_BASE = json.loads(json.dumps(fs.MODELS_JSON))
MODELS_BASE["models"][0]["sha256"] = hashlib.sha256(b"abc").hexdigest()


def check_telemetry(data: bytes, tmp: Path) -> None:
    from edge.errors import TelemetryError
    from edge.telemetry.schema import from_json

    try:
        from_json(data, source="topic T")
    except TelemetryError as exc:
        _names(exc, "topic T")


def check_command(data: bytes, tmp: Path) -> None:
    from edge.daemon.commands import CommandRejected, verify_command

    try:
        verify_command(data, SECRET, "pi-1", 60.0, lambda nonce, ts: True, now=1.0)
    except CommandRejected as exc:
        assert isinstance(exc.reason, str) and exc.reason


@st.composite
def signed_commands(draw) -> bytes:
    """Commands that pass the signature check, so the checks after it see hostile values too."""
    from edge.daemon.commands import signature

    body = dict(fs.COMMAND)
    for key in draw(st.lists(st.sampled_from(sorted(body)), max_size=3)):
        body[key] = draw(fs.json_like(max_leaves=4))
    try:
        body["sig"] = signature(SECRET, body)
        return json.dumps(body, allow_nan=True).encode()
    except (UnicodeEncodeError, ValueError, TypeError):
        return b"{}"


def check_text_request(data: bytes, tmp: Path) -> None:
    from edge.daemon.config import TextSettings
    from edge.daemon.text_service import TextService

    task, reply = TextService(TextSettings(None, 64, 4000, 1), 1).answer(data)
    assert task == "text.error" and isinstance(reply["error"], str) and reply["error"]
    json.dumps(reply, allow_nan=False).encode("utf-8")  # the reply itself is storable


def check_gallery(data: bytes, tmp: Path) -> None:
    from edge.errors import InputError
    from edge.face.gallery import Gallery

    path = tmp / "g.npz"
    path.write_bytes(data)
    try:
        Gallery.load(path)
    except InputError as exc:
        _names(exc, str(path))


def check_image(data: bytes, tmp: Path) -> None:
    from edge.errors import InputError
    from edge.imageio import decode_image

    try:
        rgb = decode_image(data, "IMG", max_pixels=4_000_000)
    except InputError as exc:
        _names(exc, "IMG")
        return
    assert rgb.dtype == np.uint8 and rgb.ndim == 3 and rgb.shape[2] == 3


def check_prompt(prompt: str, tmp: Path) -> None:
    from edge.errors import InputError
    from edge.text.chat import ChatFormat

    chat = ChatFormat("<|im_start|>", "\n", "<|im_end|>\n", "<|im_start|>assistant\n", "Be kind.")
    try:
        text = chat.render([{"role": "user", "content": prompt}])
    except InputError as exc:
        _names(exc, "messages[0].content")
        return
    assert text.count("<|im_start|>") == 3 and text.count("<|im_end|>") == 2  # no turn but ours
    text.encode("utf-8")


TARGETS = {
    "daemon_config": (st.builds(fs.toml_text, st.just(DAEMON_BASE)) | fs.mutated_tables(
        DAEMON_BASE, {"face": ["gallery", "min_score"], "source": ["settle_s", "max_fps"]}), check_daemon_config),
    "profile": (fs.mutated_tables(_profile_base(), {}), check_profile),
    "manifest": (fs.payloads(fs.MANIFEST), check_manifest),
    "models_json": (fs.payloads(MODELS_BASE), check_models_json),
    "telemetry": (fs.payloads(fs.TELEMETRY) | fs.payloads(fs.RESULT) | fs.payloads(fs.STATUS), check_telemetry),
    "command": (fs.payloads(fs.COMMAND) | signed_commands(), check_command),
    "text_request": (fs.payloads(fs.TEXT_REQUEST), check_text_request),
    "gallery": (fs.gallery_bytes(), check_gallery),
    "image": (fs.image_bytes(), check_image),
    "prompt": (fs.PROMPTS, check_prompt),
}  # fmt: skip


def _fuzz(name: str, cases: int, tmp: Path) -> None:
    strategy, check = TARGETS[name]

    @settings(max_examples=cases, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(strategy)
    def prop(value) -> None:
        check(value, tmp)

    prop()


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_fuzz_fast(name: str, tmp_path: Path) -> None:
    _fuzz(name, FAST_CASES, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(TARGETS))
def test_fuzz_slow(name: str, tmp_path: Path) -> None:
    _fuzz(name, SLOW_CASES, tmp_path)


def test_the_base_inputs_are_valid(tmp_path: Path) -> None:
    """The structured strategies start from inputs the readers accept (else they would only test refusals)."""
    from edge.bundle import parse_manifest
    from edge.daemon.config import load_config
    from edge.face.models import read_models_folder
    from edge.telemetry.schema import from_json

    for name in ("face", "incoming"):
        (tmp_path / name).mkdir()
    (tmp_path / "edge-deploy.toml").write_text(fs.toml_text(DAEMON_BASE))
    assert load_config(tmp_path / "edge-deploy.toml").device_id == "pi-1"
    for base in (fs.TELEMETRY, fs.RESULT, fs.STATUS):
        from_json(json.dumps(base))
    parse_manifest(json.dumps(fs.MANIFEST).encode(), "m")
    (tmp_path / "m.onnx").write_bytes(b"abc")
    (tmp_path / "models.json").write_text(json.dumps(MODELS_BASE))
    assert list(read_models_folder(tmp_path).entries) == ["embedder"]
    check_profile(fs.toml_text(_profile_base()), tmp_path)
