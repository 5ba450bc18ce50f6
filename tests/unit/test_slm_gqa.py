"""The fused-attention decoder graph on a tiny random llama: the shared KV buffer protocol of edge.text."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import safetensors.numpy as safetensors_numpy

from converters.slm.gqa_graph import build_gqa_onnx
from edge.errors import InferenceError
from edge.text.decoder import OnnxDecoder, SharedKvCache

CONFIG = {
    "model_type": "llama",
    "vocab_size": 48,
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "max_position_embeddings": 64,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "tie_word_embeddings": True,
}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tiny-llama")
    rng = np.random.default_rng(0)
    c = CONFIG
    hidden, inner, dim = c["hidden_size"], c["intermediate_size"], c["head_dim"]
    weights = {"model.embed_tokens.weight": rng.normal(0, 0.5, (c["vocab_size"], hidden))}
    weights["model.norm.weight"] = rng.uniform(0.5, 1.5, hidden)
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes = {
            "self_attn.q_proj.weight": (c["num_attention_heads"] * dim, hidden),
            "self_attn.k_proj.weight": (c["num_key_value_heads"] * dim, hidden),
            "self_attn.v_proj.weight": (c["num_key_value_heads"] * dim, hidden),
            "self_attn.o_proj.weight": (hidden, c["num_attention_heads"] * dim),
            "mlp.gate_proj.weight": (inner, hidden),
            "mlp.up_proj.weight": (inner, hidden),
            "mlp.down_proj.weight": (hidden, inner),
        }
        weights.update({p + k: rng.normal(0, 0.2, s) for k, s in shapes.items()})
        weights[p + "input_layernorm.weight"] = rng.uniform(0.5, 1.5, hidden)
        weights[p + "post_attention_layernorm.weight"] = rng.uniform(0.5, 1.5, hidden)
    safetensors_numpy.save_file({k: v.astype(np.float32) for k, v in weights.items()}, folder / "model.safetensors")
    (folder / "config.json").write_text(json.dumps(CONFIG))
    return build_gqa_onnx(folder, folder / "gqa" / "model.onnx")


def _step(dec: OnnxDecoder, ids: list[int], past: int, cache):
    total = past + len(ids)
    positions = np.arange(past, total)[None]
    return dec.forward(np.array([ids]), np.ones((1, total), np.int64), positions, cache)


def test_incremental_decode_equals_one_prefill_across_buffer_growth(tiny: Path) -> None:
    dec = OnnxDecoder(tiny, threads=1)
    assert dec.shared_buffer and dec.layout.num_layers == 2 and dec.layout.num_kv_heads == 2
    ids = list(np.random.default_rng(1).integers(0, CONFIG["vocab_size"], 20))
    full, _ = _step(dec, ids, 0, dec.empty_cache())
    cache = dec.empty_cache(capacity=4)
    assert isinstance(cache, SharedKvCache) and cache.capacity == 4
    logits, cache = _step(dec, ids[:3], 0, cache)
    rows = [logits[0]]
    for i in range(3, len(ids)):  # capacity 4 -> 8 -> 16 -> 32: three growths, one copy each
        logits, cache = _step(dec, [ids[i]], i, cache)
        rows.append(logits[0])
    assert cache.capacity == 32 and cache.length == 20
    np.testing.assert_allclose(np.concatenate(rows), full[0], rtol=1e-4, atol=1e-4)


def test_mask_must_cover_cache_and_new_tokens(tiny: Path) -> None:
    dec = OnnxDecoder(tiny, threads=1)
    _, cache = _step(dec, [1, 2, 3], 0, dec.empty_cache())
    with pytest.raises(InferenceError) as err:
        dec.forward(np.array([[4]]), np.ones((1, 6), np.int64), np.array([[5]]), cache)
    assert re.fullmatch(
        r".*model\.onnx: attention mask covers 6 positions, the cache holds 3 and 1 come in; expected their "
        r"sum \(left padding is not supported\)",
        str(err.value),
    )
