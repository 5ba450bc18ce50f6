"""SmolLM2-135M to TFLite through litert-torch (prefill + decode signatures), run with ai-edge-litert.

Once per session, ``convert_slm(rpi5, fp32)`` with the LiteRT twin (what ``edge-deploy convert slm --format
tflite`` runs; ``slm_twin`` in tests/conftest.py, shared with test_build_slm), reusing the session conversion's
fp32 export (``slm_int4``): the ONNX
fp32 build, then the HF folder -> fp32 ``.tflite`` with litert-torch in ``.venv-litert-torch`` (created by
``scripts/setup_litert_torch.sh`` if missing: ~3.5 min and 2.1 GB the first time; the conversion itself
~3 min), gated teacher-forced against the fp32 ONNX and named in generation.json. Then: greedy tokens of
the TFLite decoder inside ``TextGenerator`` equal the ONNX fp32 decoder's for 24 tokens on 3 prompts;
chunked prefill (a prompt longer than the prefill signature) gives the same logits as token-by-token
decode; the readable errors.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from converters.slm.build import ARITHMETIC_LITERT, SlmOptions, TfliteTwin, convert_slm
from converters.slm.tflite import (
    TfliteOptions,
    convert_tflite,
)
from edge.errors import ConversionError, InputError, MissingDependencyError
from edge.profiles import Precision, load_profile
from edge.text import SamplingConfig, TextGenerator
from edge.text.decoder import OnnxDecoder
from edge.text.litert_decoder import LiteRtDecoder
from tests.conftest import TWIN_KV_LEN, TWIN_PREFILL

pytestmark = pytest.mark.integration

KV_LEN = TWIN_KV_LEN
PREFILL = TWIN_PREFILL
NEW_TOKENS = 24
PROMPTS = [
    ("Explain how a bicycle works.", True),
    ("Write a short poem about the sea.", True),
    ("The history of the printing press begins", False),
]


@pytest.fixture(scope="module")
def build(slm_twin):
    """``convert slm --format tflite`` at fp32 for rpi5 (what the CLI runs): the session's shared conversion
    (``slm_twin`` in tests/conftest.py, KV buffer ``KV_LEN``, ``prefill_{PREFILL}``)."""
    return slm_twin


@pytest.fixture(scope="module")
def generators(build):
    onnx_gen = TextGenerator(build["out"], threads=2, max_context=KV_LEN, model_file=build["out"] / "model.onnx")
    tfl_gen = TextGenerator(build["out"], threads=2, max_context=KV_LEN)
    assert isinstance(tfl_gen.decoder, LiteRtDecoder)  # generation.json: runtime = litert
    assert isinstance(onnx_gen.decoder, OnnxDecoder)
    yield onnx_gen, tfl_gen
    onnx_gen.close()
    tfl_gen.close()


def test_the_build_gates_the_twin_and_names_it_in_generation_json(build) -> None:
    import json

    out, twin = build["out"], build["tflite"]
    spec = json.loads((out / "generation.json").read_text())
    assert (spec["runtime"], spec["litert_file"], spec["model_file"]) == ("litert", "model_none.tflite", "model.onnx")
    assert twin.greedy.passed and len(twin.greedy.prompts) == 5  # the five fixed prompts, 16 tokens
    print(twin.gate.line())
    assert twin.gate.passed and twin.gate.arithmetic == ARITHMETIC_LITERT and twin.gate.divergence.tokens >= 8000
    report = json.loads((out / "report.json").read_text())
    assert report["tflite"]["greedy_agreement"]["passed"] is True and report["tflite"]["quant"] == "none"
    assert report["tflite"]["passed"] is True and report["tflite"]["gate"]["passed"] is True
    # fp32 on XNNPACK against fp32 on onnxruntime: summation order only, far inside llama.cpp's drift
    assert report["tflite"]["gate"]["mean_kld"] < 1e-4
    assert "model_none.tflite" in report["files"]
    assert "LiteRT twin `model_none.tflite` (none," in (out / "report.md").read_text()


def test_int4_has_no_litert_twin(build, tmp_path) -> None:
    with pytest.raises(ConversionError) as err:
        convert_slm(load_profile("rpi4"), Precision.INT4, tmp_path / "x", options=SlmOptions(tflite=TfliteTwin()))
    assert str(err.value) == (
        "--format tflite at int4: litert-torch offers no int4 recipe here; expected fp32 or int8 (ONNX is what "
        "int4 ships)"
    )
    assert not (tmp_path / "x").exists()  # refused before any work


def test_tflite_file_has_prefill_and_decode_signatures(build) -> None:
    tfl = build["tflite"]
    decoder = LiteRtDecoder(tfl.path)
    assert decoder.prefill_lengths == (PREFILL,)
    assert decoder.layout.num_layers == 30
    assert decoder.layout.shape == (1, KV_LEN, 3, 64)
    assert decoder.context_length == KV_LEN
    # fp32 weights: 134.5 M parameters * 4 bytes, the tied embedding stored once
    assert 500e6 < tfl.size_bytes < 600e6


@pytest.mark.parametrize(("prompt", "chat"), PROMPTS)
def test_fp32_tflite_greedy_equals_onnx_fp32(generators, prompt: str, chat: bool) -> None:
    onnx_gen, tfl_gen = generators
    config = SamplingConfig(max_new_tokens=NEW_TOKENS, temperature=0.0, stop_token_ids=())
    want = onnx_gen.generate(prompt, config, chat=chat)
    got = tfl_gen.generate(prompt, config, chat=chat)
    assert len(want.token_ids) >= 16
    assert got.token_ids == want.token_ids
    assert got.text == want.text


def test_fp32_tflite_logits_close_to_onnx(generators) -> None:
    onnx_gen, tfl_gen = generators
    ids = onnx_gen.encode(onnx_gen.prompt_text("Name three colours."))
    feeds = (np.array([ids]), np.ones((1, len(ids)), np.int64), np.arange(len(ids))[None])
    want, _ = onnx_gen.decoder.forward(*feeds, onnx_gen.decoder.empty_cache())
    got, _ = tfl_gen.decoder.forward(*feeds, tfl_gen.decoder.empty_cache())
    assert got.shape == (1, 1, want.shape[-1])
    assert np.max(np.abs(got[0, -1] - want[0, -1])) < 1e-2


def test_chunked_prefill_equals_token_by_token(generators) -> None:
    _, tfl_gen = generators
    dec = tfl_gen.decoder
    ids = tfl_gen.encode("The quick brown fox jumps over the lazy dog. " * 8)
    assert len(ids) > 2 * PREFILL  # two full prefill chunks and a padded third
    n = len(ids)
    chunked, _ = dec.forward(np.array([ids]), np.ones((1, n), np.int64), np.arange(n)[None], dec.empty_cache())
    cache = dec.empty_cache()
    for i, token in enumerate(ids):
        step, cache = dec.forward(np.array([[token]]), np.ones((1, i + 1), np.int64), np.array([[i]]), cache)
    assert np.max(np.abs(chunked - step)) < 1e-3


def test_position_past_the_kv_cache_is_a_readable_error(build, generators) -> None:
    _, tfl_gen = generators
    dec = tfl_gen.decoder
    with pytest.raises(InputError) as err:
        dec.forward(np.array([[1]]), np.ones((1, KV_LEN + 1), np.int64), np.array([[KV_LEN]]), dec.empty_cache())
    assert str(err.value) == (
        f"positions {KV_LEN}..{KV_LEN}; expected below the KV cache length {KV_LEN} of model_none.tflite "
        "(prompt plus new tokens too long)"
    )


def test_missing_venv_is_a_readable_error(build, tmp_path: Path) -> None:
    venv = tmp_path / "no-venv"
    with pytest.raises(MissingDependencyError) as err:
        convert_tflite(build["hf_dir"], tmp_path / "out", options=TfliteOptions(venv=venv))
    assert str(err.value) == (
        f"{venv}: no ready litert-torch environment (missing bin/python or .edge-deploy-setup); "
        "create it with: bash scripts/setup_litert_torch.sh"
    )


def test_failing_conversion_quotes_the_log(build, tmp_path: Path) -> None:
    hf = tmp_path / "hf"
    shutil.copytree(build["hf_dir"], hf)
    config = (hf / "config.json").read_text(encoding="utf-8")
    (hf / "config.json").write_text(config.replace('"hidden_act": "silu"', '"hidden_act": "gelu"'), encoding="utf-8")
    with pytest.raises(ConversionError) as err:
        convert_tflite(hf, tmp_path / "out", options=TfliteOptions(kv_cache_max_len=64, prefill_lengths=(8,)))
    message = str(err.value)
    log = tmp_path / "out" / "litert_export_none.log"
    assert message.startswith(f"{hf}: litert-torch conversion (none) exited with 1; last lines of {log}:\n    ")
    assert message.endswith(f"\n    {hf / 'config.json'}: hidden_act = 'gelu'; expected 'silu'")
    assert os.path.isfile(tmp_path / "out" / "litert_export_none.log")


def test_a_missing_venv_is_refused_before_the_onnx_build(tmp_path: Path) -> None:
    twin = TfliteTwin(options=TfliteOptions(venv=tmp_path / "no-venv"))
    with pytest.raises(MissingDependencyError, match="create it with: bash scripts/setup_litert_torch.sh"):
        convert_slm(load_profile("rpi5"), Precision.FP32, tmp_path / "x", options=SlmOptions(tflite=twin))
    assert not (tmp_path / "x").exists()
