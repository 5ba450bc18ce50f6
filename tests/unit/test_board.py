"""edge.board: board detection from a device-tree model file and SoC state from a sysfs tree.

The device-tree and sysfs files are written into tmp_path exactly as a Pi's kernel presents them (data,
not mocks). One test runs a stand-in ``vcgencmd`` script to exercise the subprocess path only.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from edge.board import (
    CPU_CLOCK,
    THERMAL_TEMP,
    detect_board,
    parse_throttled,
    read_device_tree_model,
    read_soc_state,
    read_throttled,
)
from edge.errors import ProfileError
from edge.profiles import available_targets


def _device_tree(tmp_path: Path, model: bytes) -> Path:
    path = tmp_path / "model"
    path.write_bytes(model)  # the kernel's file is NUL-terminated
    return path


@pytest.mark.parametrize(
    ("model", "target"),
    [
        (b"Raspberry Pi 4 Model B Rev 1.4\x00", "rpi4"),
        (b"Raspberry Pi 5 Model B Rev 1.0\x00", "rpi5"),
        (b"Raspberry Pi Zero 2 W Rev 1.0\x00", "rpi-zero-2w"),
    ],
)
def test_a_pi_is_matched_to_its_profile(tmp_path, model, target):
    board = detect_board(_device_tree(tmp_path, model))
    assert board.model == model.rstrip(b"\x00").decode()
    assert board.profile is not None and board.profile.name == target
    assert board.source == "device-tree"
    assert board.to_dict() == {"model": board.model, "profile": target, "source": "device-tree"}


def test_an_unknown_board_keeps_its_model_but_has_no_profile(tmp_path):
    board = detect_board(_device_tree(tmp_path, b"Pine64 RockPro64 v2.1\x00"))
    assert (board.model, board.profile, board.source) == ("Pine64 RockPro64 v2.1", None, "unknown")


def test_no_device_tree_is_not_an_error(tmp_path):
    board = detect_board(tmp_path / "absent")
    assert (board.model, board.profile, board.source) == (None, None, "unknown")
    assert read_device_tree_model(tmp_path / "absent") is None
    assert read_device_tree_model(_device_tree(tmp_path, b"\x00")) is None


def test_an_override_wins_over_detection(tmp_path):
    board = detect_board(_device_tree(tmp_path, b"Raspberry Pi 4 Model B Rev 1.4\x00"), override="rpi5")
    assert board.profile is not None and board.profile.name == "rpi5"
    assert (board.model, board.source) == ("Raspberry Pi 4 Model B Rev 1.4", "override")


def test_an_unknown_override_lists_the_targets(tmp_path, repo_root, monkeypatch):
    monkeypatch.chdir(repo_root)
    with pytest.raises(ProfileError) as err:
        detect_board(tmp_path / "absent", override="rpi9")
    assert str(err.value) == (
        f"unknown target 'rpi9'; expected one of {', '.join(available_targets())} (profiles in firmware_configs); "
        "did you mean 'rpi4' or 'rpi5'?"
    )
    assert "rpi4" in available_targets()


# --- SoC state -------------------------------------------------------------------------------------------


def _sysfs(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


PI4_THROTTLED = "sys/devices/platform/soc/soc:firmware/get_throttled"


def test_a_pi_sysfs_tree_is_read_in_celsius_mhz_and_flags(tmp_path):
    root = _sysfs(
        tmp_path,
        {str(THERMAL_TEMP): "48312\n", str(CPU_CLOCK): "1500000\n", PI4_THROTTLED: "50005\n"},
    )
    state = read_soc_state(root, vcgencmd=None)
    assert state.temperature_c == pytest.approx(48.312)
    assert state.cpu_mhz == 1500.0
    assert state.throttled is not None
    assert state.throttled.raw == 0x50005
    assert state.throttled.flags == ("under_voltage", "throttled", "under_voltage_occurred", "throttled_occurred")
    assert json.loads(json.dumps(state.to_dict())) == {
        "temperature_c": pytest.approx(48.312),
        "cpu_mhz": 1500.0,
        "throttled": {
            "raw": "0x50005",
            "flags": ["under_voltage", "throttled", "under_voltage_occurred", "throttled_occurred"],
        },
    }


def test_the_pi5_firmware_path_is_found_too(tmp_path):
    root = _sysfs(tmp_path, {"sys/devices/platform/soc@107c000000/soc@107c000000:firmware/get_throttled": "0\n"})
    state = read_throttled(root, vcgencmd=None)
    assert state is not None and (state.raw, state.flags) == (0, ())


def test_absent_or_garbled_values_are_none_not_errors(tmp_path):
    assert read_soc_state(tmp_path, vcgencmd=None).to_dict() == {
        "temperature_c": None,
        "cpu_mhz": None,
        "throttled": None,
    }
    root = _sysfs(tmp_path, {str(THERMAL_TEMP): "n/a\n", str(CPU_CLOCK): "", PI4_THROTTLED: "zz\n"})
    state = read_soc_state(root, vcgencmd="vcgencmd-is-not-installed-here")
    assert (state.temperature_c, state.cpu_mhz, state.throttled) == (None, None, None)


@pytest.mark.parametrize(
    ("text", "raw", "flags"),
    [
        ("throttled=0x0\n", 0, ()),
        ("throttled=0x80008\n", 0x80008, ("soft_temperature_limit", "soft_temperature_limit_occurred")),
        ("20002", 0x20002, ("arm_frequency_capped", "arm_frequency_capped_occurred")),
    ],
)
def test_throttling_words_are_decoded(text, raw, flags):
    state = parse_throttled(text)
    assert state is not None and (state.raw, state.flags) == (raw, flags)


def test_a_non_hex_throttling_word_is_none():
    assert parse_throttled("throttled=maybe") is None
    assert parse_throttled("") is None


def test_vcgencmd_is_asked_when_sysfs_has_no_throttling_file(tmp_path):
    # A stand-in for the Pi's vcgencmd: it prints what the real one prints for `get_throttled`.
    script = tmp_path / "bin" / "vcgencmd"
    script.parent.mkdir()
    script.write_text('#!/bin/sh\n[ "$1" = get_throttled ] && echo "throttled=0x4" && exit 0\nexit 1\n')
    os.chmod(script, 0o755)
    state = read_throttled(tmp_path / "empty-root", vcgencmd=str(script))
    assert state is not None and (state.raw, state.flags) == (4, ("throttled",))
