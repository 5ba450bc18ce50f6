"""Any GGUF: each architecture x tensor type, our export against transformers loading the same file.

Every file is a tiny random-weight decoder (2 layers, hidden 64 — 256 for K-quants —, 4 query / 2 key-value
heads, vocab 48) written with gguf-py's writer; the legacy quantized types are made by gguf-py's port of
llama.cpp's quantizers, the K-quants (which gguf-py cannot quantize) from random codes and scales.
transformers' GGUF loader dequantizes the same file into ``LlamaForCausalLM`` / ``Qwen2ForCausalLM`` /
``Phi3ForCausalLM``: the fp32 reference. Our fp32 ONNX export must give the same logits (atol 1e-4 on
logits of magnitude ~1-20) and the same 8 greedy tokens. The int4 "grid" model (the GGUF's codes repacked
into MatMulNBits, accuracy level 0) holds the file's codes exactly but sums in another order: logits within
3e-5 x max |logit|, same greedy tokens. Q6_K is re-rounded to 8 bits: close, not exact.
"""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import numpy as np
import pytest
import transformers
from gguf import GGMLQuantizationType as QT
from gguf.quants import quantize

from converters.slm.export import export_onnx
from converters.slm.gguf_source import read_gguf, write_hf_folder
from converters.slm.gqa_graph import build_gqa_onnx
from converters.slm.grid_quant import repack_grid
from edge.errors import ConversionError
from edge.text.decoder import OnnxDecoder
from edge_deploy.cli import main

HIDDEN, HEADS, KV_HEADS, FFN, LAYERS = 64, 4, 2, 96, 2
HEAD_DIM = HIDDEN // HEADS
TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", *"abcdefghijklmnopqrstuvwxyz", "Ġ", *"0123456789", "ab", "Ġa"]
TOKENS += [f"t{i}" for i in range(48 - len(TOKENS))]
TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are tiny.<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
ATOL = 1e-4
GRID_RTOL = 3e-5
GREEDY = 8
PROMPT = [1, 5, 9, 14, 3, 22, 30]
ARCHS = ("llama", "qwen2", "phi3")
K_TYPES = (QT.Q4_K, QT.Q5_K, QT.Q6_K)
#: every architecture x the common types; the rest of the types on llama (the dequantization is shared)
FP32_CASES = [(a, t) for a in ARCHS for t in (QT.F32, QT.F16, QT.Q8_0, QT.Q4_0, QT.Q4_1)]
FP32_CASES += [("llama", t) for t in (QT.Q5_0, QT.Q5_1, *K_TYPES)]
#: types whose codes MatMulNBits holds exactly, and at how many bits (Q5_*: 8-bit codes with offsets)
GRID_BITS = {QT.Q8_0: 8, QT.Q4_0: 4, QT.Q4_1: 4, QT.Q5_0: 8, QT.Q5_1: 8, QT.Q4_K: 4, QT.Q5_K: 8}
GRID_CASES = [(a, QT.Q4_0) for a in ARCHS] + [("llama", t) for t in GRID_BITS if t != QT.Q4_0]


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf Q/K permutation (llama only)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _layer_tensors(rng: np.random.Generator, arch: str, i: int, hidden: int, ffn: int) -> dict[str, np.ndarray]:
    p = f"blk.{i}."
    head_dim = hidden // HEADS
    t = {
        p + "attn_norm.weight": rng.uniform(0.5, 1.5, hidden),
        p + "ffn_norm.weight": rng.uniform(0.5, 1.5, hidden),
        p + "attn_q.weight": rng.normal(0, 0.2, (HEADS * head_dim, hidden)),
        p + "attn_k.weight": rng.normal(0, 0.2, (KV_HEADS * head_dim, hidden)),
        p + "attn_v.weight": rng.normal(0, 0.2, (KV_HEADS * head_dim, hidden)),
        p + "attn_output.weight": rng.normal(0, 0.2, (hidden, HEADS * head_dim)),
        p + "ffn_gate.weight": rng.normal(0, 0.2, (ffn, hidden)),
        p + "ffn_up.weight": rng.normal(0, 0.2, (ffn, hidden)),
        p + "ffn_down.weight": rng.normal(0, 0.2, (hidden, ffn)),
    }
    if arch == "llama":
        t[p + "attn_q.weight"] = _permute(t[p + "attn_q.weight"], HEADS)
        t[p + "attn_k.weight"] = _permute(t[p + "attn_k.weight"], KV_HEADS)
    elif arch == "phi3":  # fused q/k/v and gate/up, no permutation
        t[p + "attn_qkv.weight"] = np.concatenate([t.pop(f"{p}attn_{n}.weight") for n in "qkv"])
        t[p + "ffn_up.weight"] = np.concatenate([t.pop(p + "ffn_gate.weight"), t[p + "ffn_up.weight"]])
    else:  # qwen2: q/k/v biases, no permutation
        for n, rows in (("q", HEADS), ("k", KV_HEADS), ("v", KV_HEADS)):
            t[f"{p}attn_{n}.bias"] = rng.normal(0, 0.5, rows * head_dim)
    return t


def _header(w, arch: str, hidden: int = HIDDEN, ffn: int = FFN) -> None:
    w.add_block_count(LAYERS)
    w.add_context_length(1024)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(ffn)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_freq_base(10000.0 if arch == "llama" else 1000000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_vocab_size(len(TOKENS))
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm" if arch == "llama" else "qwen2")
    w.add_token_list(TOKENS)
    w.add_token_types([3, 3, 3] + [1] * (len(TOKENS) - 3))
    w.add_token_merges(["a b", "Ġ a"])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_pad_token_id(0)  # transformers' Phi3Config would default to 32000, outside this vocabulary
    w.add_chat_template(TEMPLATE)


def _finish(w) -> None:
    """Write a GGUFWriter's header, key-values and tensors, and close the file."""
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _kquant(rng: np.random.Generator, shape: tuple[int, int], qtype: QT) -> np.ndarray:
    """Random K-quant blocks (gguf-py cannot quantize to K types): random codes and 6-bit sub-scales, the
    fp16 super-block scales set so weights stay below ~0.5. Any such bytes are a valid tensor of the type."""
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, (shape[0] * shape[1] // block, size), dtype=np.uint8)
    if qtype == QT.Q6_K:  # ql, qh, int8 scales, then d
        raw[:, -2:] = np.full((len(raw), 1), 7e-5, np.float16).view(np.uint8)
    else:  # d, dmin, 6-bit scales and mins, (qh), qs
        d = 3e-4 if qtype == QT.Q4_K else 1.5e-4
        raw[:, 0:4] = np.tile(np.array([d, 1e-3], np.float16).view(np.uint8), (len(raw), 1))
    return raw.reshape(shape[0], -1)


def write_gguf(path: Path, arch: str, qtype: QT, seed: int = 0, tied: bool = True, wide: bool = False) -> Path:
    """A tiny ``arch`` GGUF whose 2-D weights are stored as ``qtype`` (norms and biases F32, as llama.cpp).
    K-quant files (and ``wide`` ones, e.g. an F32 file for llama.cpp to K-quantize) get hidden and FFN sizes
    of 256 (a K-quant row holds whole 256-weight super-blocks)."""
    rng = np.random.default_rng(seed)
    hidden, ffn = (256, 256) if qtype in K_TYPES or wide else (HIDDEN, FFN)
    tensors = {"token_embd.weight": rng.normal(0, 1.0, (len(TOKENS), hidden))}
    tensors["output_norm.weight"] = rng.uniform(0.5, 1.5, hidden)
    if not tied:
        tensors["output.weight"] = rng.normal(0, 0.2, (len(TOKENS), hidden))
    for i in range(LAYERS):
        tensors.update(_layer_tensors(rng, arch, i, hidden, ffn))
    w = gguf.GGUFWriter(str(path), arch)
    _header(w, arch, hidden, ffn)
    for name, value in tensors.items():
        value = value.astype(np.float32)
        if value.ndim == 1 or qtype == QT.F32:
            w.add_tensor(name, value)
        elif qtype == QT.F16:
            w.add_tensor(name, value.astype(np.float16))
        elif qtype in K_TYPES:
            w.add_tensor(name, _kquant(rng, value.shape, qtype), raw_dtype=qtype)
        else:
            w.add_tensor(name, quantize(value, qtype), raw_dtype=qtype)
    _finish(w)
    return path


def _reference(path: Path):
    """transformers' fp32 model loaded from the same GGUF."""
    import torch

    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, torch_dtype=torch.float32
    )
    return model.eval()


def _reference_run(model) -> tuple[np.ndarray, list[int]]:
    import torch

    with torch.no_grad():
        logits = model(torch.tensor([PROMPT])).logits[0].numpy()
        ids = list(PROMPT)
        for _ in range(GREEDY):
            ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
    return logits, ids[len(PROMPT) :]


def _ours(model_path: Path) -> tuple[np.ndarray, list[int]]:
    """Prefill logits and greedy tokens of an ONNX decoder, decoding through its KV cache."""
    dec = OnnxDecoder(model_path, threads=1)
    n = len(PROMPT)
    logits, cache = dec.forward(np.array([PROMPT]), np.ones((1, n), np.int64), np.arange(n)[None], dec.empty_cache())
    out = [int(logits[0, -1].argmax())]
    for step in range(GREEDY - 1):
        total = n + step + 1
        last, cache = dec.forward(np.array([[out[-1]]]), np.ones((1, total), np.int64), np.array([[total - 1]]), cache)
        out.append(int(last[0, -1].argmax()))
    return logits[0], out


def _compare(ours: tuple[np.ndarray, list[int]], ref: tuple[np.ndarray, list[int]], atol: float = ATOL) -> None:
    np.testing.assert_allclose(ours[0], ref[0], rtol=0, atol=atol)
    assert ours[1] == ref[1]


@pytest.mark.parametrize(("arch", "qtype"), FP32_CASES, ids=lambda c: getattr(c, "name", c))
def test_fp32_export_equals_transformers(arch: str, qtype: QT, tmp_path: Path) -> None:
    path = write_gguf(tmp_path / f"tiny-{arch}-{qtype.name}.gguf", arch, qtype)
    model = read_gguf(path)
    assert model.llama.architecture == arch and model.llama.attention_bias == (arch == "qwen2")
    assert model.llama.head_dim == model.llama.hidden_size // HEADS
    folder = write_hf_folder(model, tmp_path / "hf")
    fp32 = export_onnx(folder.path, tmp_path / "fp32" / "model.onnx").path
    ref = _reference_run(_reference(path))
    _compare(_ours(fp32), ref)


@pytest.mark.parametrize(("arch", "qtype"), GRID_CASES, ids=lambda c: getattr(c, "name", c))
def test_int4_grid_equals_transformers(arch: str, qtype: QT, tmp_path: Path) -> None:
    """The GGUF's own codes in MatMulNBits: the same function as the file, so the same logits and tokens."""
    path = write_gguf(tmp_path / f"tiny-{arch}-{qtype.name}.gguf", arch, qtype, seed=1, tied=qtype != QT.Q4_1)
    folder = write_hf_folder(read_gguf(path), tmp_path / "hf")
    fused = build_gqa_onnx(folder.path, tmp_path / "gqa" / "model.onnx")
    counts = repack_grid(fused, tmp_path / "int4" / "model.onnx", accuracy_level=0)
    # 4 weight MatMuls per layer (qkv, o, gate_up, down) + the LM head, all on the file's grid
    bits = GRID_BITS[qtype]
    assert counts[f"int{bits}"] == 4 * LAYERS + 1 and counts[f"int{12 - bits}"] == 0
    assert counts["rerounded_int8"] == 0
    ref = _reference_run(_reference(path))
    # same codes, other arithmetic order (scale * code + blocksum * offset): fp32 rounding, ~1e-5 relative
    _compare(_ours(tmp_path / "int4" / "model.onnx"), ref, GRID_RTOL * float(np.abs(ref[0]).max()))


def test_q6_k_is_re_rounded_to_8_bits(tmp_path: Path) -> None:
    """Q6_K scales every 16 weights: no block-32 MatMulNBits holds it, so each weight is re-rounded to
    symmetric 8 bits (an error below half a step of amax/127 per block) and counted; the gates judge it."""
    path = write_gguf(tmp_path / "tiny-llama-Q6_K.gguf", "llama", QT.Q6_K, seed=1)
    folder = write_hf_folder(read_gguf(path), tmp_path / "hf")
    fused = build_gqa_onnx(folder.path, tmp_path / "gqa" / "model.onnx")
    with pytest.raises(ConversionError, match="lies on no Q4_1, Q4_0 or Q8_0 block grid"):
        repack_grid(fused, tmp_path / "refused.onnx", accuracy_level=0)
    counts = repack_grid(fused, tmp_path / "int4" / "model.onnx", accuracy_level=0, reround=True)
    assert counts["rerounded_int8"] == counts["int8"] == 4 * LAYERS + 1
    ours, ref = _ours(tmp_path / "int4" / "model.onnx"), _reference_run(_reference(path))
    diff = float(np.abs(ours[0] - ref[0]).max())
    # not exact (0.108 on logits up to ~20 here), but close, and the same greedy tokens
    assert 1e-3 < diff < 0.25 and ours[1] == ref[1], diff


def test_convert_slm_gguf_flag_builds_a_gated_qwen2(tmp_path: Path, capsys) -> None:
    """``convert slm --gguf FILE``: the whole chain (fp32 export, int4 grid, both gates) on another GGUF."""
    path = write_gguf(tmp_path / "tiny-qwen2-Q4_0.gguf", "qwen2", QT.Q4_0, seed=2)
    out = tmp_path / "out"
    assert main(["convert", "slm", "--target", "rpi4", "--gguf", str(path), "-o", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["source"]["file"] == path.name and report["source"]["package"] == "file"
    assert report["method"] == "gguf_grid" and report["settings"]["weights_int4"] == 4 * LAYERS + 1
    assert report["perplexity"]["passed"] and abs(report["perplexity"]["ratio"] - 1.0) < 1e-3
    assert report["greedy_agreement"]["passed"]
    assert json.loads((out / "generation.json").read_text())["stop_token_ids"] == [2, 0]


def test_unsupported_architecture_names_the_key(tmp_path: Path) -> None:
    path = tmp_path / "mamba.gguf"
    w = gguf.GGUFWriter(str(path), "mamba")
    _header(w, "mamba")
    w.add_tensor("token_embd.weight", np.zeros((len(TOKENS), HIDDEN), np.float32))
    _finish(w)
    with pytest.raises(ConversionError) as err:
        read_gguf(path)
    assert str(err.value) == f"{path}: general.architecture = 'mamba'; expected one of llama, qwen2, phi3"


def test_partial_rotary_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "partial.gguf"
    w = gguf.GGUFWriter(str(path), "phi3")
    _header(w, "phi3")
    w.add_rope_dimension_count(HEAD_DIM // 2)
    w.add_tensor("token_embd.weight", np.zeros((len(TOKENS), HIDDEN), np.float32))
    _finish(w)
    with pytest.raises(ConversionError) as err:
        read_gguf(path)
    assert str(err.value) == (
        f"{path}: phi3.rope.dimension_count = 8; expected the head size 16 (partial rotary embeddings are not "
        "supported)"
    )


def test_rope_scaling_factors_are_an_unknown_tensor(tmp_path: Path) -> None:
    """Phi-3 128k files carry LongRoPE factors as tensors: refused by name before anything is converted."""
    path = tmp_path / "longrope.gguf"
    w = gguf.GGUFWriter(str(path), "phi3")
    _header(w, "phi3")
    w.add_tensor("rope_factors_long.weight", np.ones(HEAD_DIM // 2, np.float32))
    _finish(w)
    with pytest.raises(ConversionError) as err:
        read_gguf(path)
    assert str(err.value).startswith(
        f"{path}: unknown GGUF tensor 'rope_factors_long.weight'; expected one of token_embd.weight, "
    )


def test_unsupported_tensor_type_names_tensor_and_type(tmp_path: Path) -> None:
    path = tmp_path / "iq4.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    _header(w, "llama")
    # IQ4_NL: blocks of 32 weights in 18 bytes (an fp16 scale + 16 bytes of non-linear 4-bit codes)
    w.add_tensor("token_embd.weight", np.zeros((len(TOKENS), HIDDEN // 32 * 18), np.uint8), raw_dtype=QT.IQ4_NL)
    _finish(w)
    with pytest.raises(ConversionError) as err:
        read_gguf(path)
    assert str(err.value) == (
        f"{path}: tensor 'token_embd.weight' has type IQ4_NL; expected one of F32, F16, BF16, Q8_0, Q4_0, "
        "Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K"
    )
