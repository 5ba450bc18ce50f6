"""Tiny random-weight GGUF decoders (llama, qwen2, phi3) written with gguf-py, and how to run one.

The tests' proofs that our GGUF export equals transformers, and the llama.cpp-quantized benchmark, share them.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as QT
from gguf.quants import quantize

from edge.text.decoder import OnnxDecoder

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
GREEDY = 8
PROMPT = [1, 5, 9, 14, 3, 22, 30]
K_TYPES = (QT.Q4_K, QT.Q5_K, QT.Q6_K)


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf Q/K permutation (llama only)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def layer_tensors(rng: np.random.Generator, arch: str, i: int, hidden: int, ffn: int) -> dict[str, np.ndarray]:
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


def write_header(w, arch: str, hidden: int = HIDDEN, ffn: int = FFN) -> None:
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


def finish(w) -> None:
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
        tensors.update(layer_tensors(rng, arch, i, hidden, ffn))
    w = gguf.GGUFWriter(str(path), arch)
    write_header(w, arch, hidden, ffn)
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
    finish(w)
    return path


def reference_model(path: Path):
    """transformers' fp32 model loaded from the same GGUF."""
    import torch
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, torch_dtype=torch.float32
    )
    return model.eval()


def reference_run(model) -> tuple[np.ndarray, list[int]]:
    import torch

    with torch.no_grad():
        logits = model(torch.tensor([PROMPT])).logits[0].numpy()
        ids = list(PROMPT)
        for _ in range(GREEDY):
            ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
    return logits, ids[len(PROMPT) :]


def ours_run(model_path: Path) -> tuple[np.ndarray, list[int]]:
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
