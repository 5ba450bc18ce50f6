"""The compile stage (ORT format): target platforms and a converter that never finishes."""

from __future__ import annotations

from pathlib import Path

import pytest

from converters.compile import ort_target_platform, to_ort_format, to_ort_format_all
from edge.errors import ConversionError
from edge.profiles import load_profile
from tests.unit.tool_helpers import never_finishing_tool, printed_error


def test_ort_format_platforms():
    assert ort_target_platform(load_profile("rpi4")) == "arm"
    assert ort_target_platform(load_profile("rpi-zero-2w")) == "arm"
    assert ort_target_platform(load_profile("x86_64-host")) == "amd64"
    browser = load_profile("browser-wasm")
    with pytest.raises(ConversionError) as err:
        to_ort_format(Path("m.onnx"), Path("out"), browser)
    assert str(err.value) == f"{browser.source}: cpu.arch = 'wasm32' has no ORT-format build; ship the .onnx"


def test_a_converter_past_its_timeout_is_a_one_line_error(tmp_path, capsys):
    models = [tmp_path / "pnet.onnx", tmp_path / "rnet.onnx"]
    for model in models:
        model.write_bytes(b"not read: the converter never gets that far")
    hung = never_finishing_tool(tmp_path)

    def compile_models() -> list[Path]:
        return to_ort_format_all(models, tmp_path / "out", load_profile("rpi4"), timeout_s=0.5, python=hung)

    code, printed = printed_error(compile_models, capsys)
    assert printed == "Error: ORT-format conversion of pnet.onnx, rnet.onnx for arm did not finish within 0.5 s\n"
    assert code == ConversionError.exit_code
    assert not any((tmp_path / "out").iterdir())
