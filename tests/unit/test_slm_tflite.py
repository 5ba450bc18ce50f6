"""Fast checks of the TFLite language-model route: option checks, venv lookup, log tail, decoder errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from converters.slm.tflite import NOISE, TfliteOptions, TfliteQuant, convert_tflite, venv_python
from converters.tools import log_tail
from edge.errors import InputError, MissingDependencyError
from edge.text.litert_decoder import LiteRtDecoder, cache_names


def _hf(tmp_path: Path) -> Path:
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text("{}", encoding="utf-8")
    (hf / "model.safetensors").write_bytes(b"")
    return hf


def test_quant_names_are_litert_torch_flags() -> None:
    assert [q.value for q in TfliteQuant] == ["none", "dynamic_int8", "weight_only_int8"]


def test_missing_weights_are_named(tmp_path: Path) -> None:
    with pytest.raises(InputError) as err:
        convert_tflite(tmp_path, tmp_path / "out")
    assert str(err.value) == f"{tmp_path / 'config.json'}: missing; expected an HF llama folder"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (TfliteOptions(kv_cache_max_len=1), "kv_cache_max_len = 1; expected at least 2"),
        (TfliteOptions(prefill_lengths=()), "prefill_lengths = (); expected one or more lengths of at least 2"),
        (
            TfliteOptions(kv_cache_max_len=64, prefill_lengths=(128,)),
            "prefill_lengths = (128,); expected none above kv_cache_max_len = 64",
        ),
    ],
)
def test_bad_options_are_named(tmp_path: Path, options: TfliteOptions, message: str) -> None:
    with pytest.raises(InputError) as err:
        convert_tflite(_hf(tmp_path), tmp_path / "out", options=options)
    assert str(err.value) == message


def test_venv_without_stamp_is_not_ready(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").write_text("", encoding="utf-8")
    with pytest.raises(MissingDependencyError) as err:
        venv_python(tmp_path)
    assert str(err.value) == (
        f"{tmp_path}: no ready litert-torch environment (missing bin/python or .edge-deploy-setup); "
        "create it with: bash scripts/setup_litert_torch.sh"
    )
    (tmp_path / ".edge-deploy-setup").write_text("x", encoding="utf-8")
    assert venv_python(tmp_path) == tmp_path / "bin" / "python"


def test_log_tail_drops_info_chatter(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    lines = [f"line {i}" for i in range(30)] + [
        "I0000 00:00 port.cc:153] oneDNN",
        "",
        "W1130 08:45:32 x",
        "SystemExit: boom",
    ]
    log.write_text("\n".join(lines), encoding="utf-8")
    assert log_tail(log, 3, noise=NOISE) == "    line 28\n    line 29\n    SystemExit: boom"
    assert log_tail(tmp_path / "none.log") == "    (no log)"


def test_cache_names_follow_the_onnx_cache_order() -> None:
    assert cache_names(2) == ["kv_cache_k_0", "kv_cache_v_0", "kv_cache_k_1", "kv_cache_v_1"]


def test_decoder_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError) as err:
        LiteRtDecoder(tmp_path / "model.tflite")
    assert str(err.value) == f"{tmp_path / 'model.tflite'}: missing; expected the language model's .tflite file"
