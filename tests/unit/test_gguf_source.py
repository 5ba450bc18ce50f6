"""GGUF reading: header checks, corrupt/truncated files, tensor naming, Q/K un-permutation, tokenizer.

Every file here is a tiny llama GGUF written with gguf-py's own writer (no model weights needed).
"""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import numpy as np
import pytest

from converters.slm.chat_template import derive_chat_format
from converters.slm.gguf_file import check_header
from converters.slm.gguf_source import (
    dequantized_tensors,
    hf_name,
    read_gguf,
    unpermute_rows,
    write_hf_folder,
)
from converters.slm.tokenizer import build_tokenizer
from edge.errors import ConversionError, InputError

TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are tiny.<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
HIDDEN, HEADS, KV_HEADS, FFN = 8, 2, 1, 16
TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "a", "b", "Ġ", "1", "2", "ab", "Ġa", "Ġab"]


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf permutation (the inverse of what we undo)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_tiny_gguf(path: Path, seed: int = 0) -> dict[str, np.ndarray]:
    """A 1-layer llama GGUF with F32 tensors; returns the HF-layout weights it encodes."""
    rng = np.random.default_rng(seed)
    head_dim = HIDDEN // HEADS
    hf = {
        "model.embed_tokens.weight": rng.normal(size=(len(TOKENS), HIDDEN)),
        "model.norm.weight": rng.normal(size=HIDDEN),
        "model.layers.0.input_layernorm.weight": rng.normal(size=HIDDEN),
        "model.layers.0.post_attention_layernorm.weight": rng.normal(size=HIDDEN),
        "model.layers.0.self_attn.q_proj.weight": rng.normal(size=(HIDDEN, HIDDEN)),
        "model.layers.0.self_attn.k_proj.weight": rng.normal(size=(KV_HEADS * head_dim, HIDDEN)),
        "model.layers.0.self_attn.v_proj.weight": rng.normal(size=(KV_HEADS * head_dim, HIDDEN)),
        "model.layers.0.self_attn.o_proj.weight": rng.normal(size=(HIDDEN, HIDDEN)),
        "model.layers.0.mlp.gate_proj.weight": rng.normal(size=(FFN, HIDDEN)),
        "model.layers.0.mlp.up_proj.weight": rng.normal(size=(FFN, HIDDEN)),
        "model.layers.0.mlp.down_proj.weight": rng.normal(size=(HIDDEN, FFN)),
    }
    hf = {k: v.astype(np.float32) for k, v in hf.items()}
    names = {
        "token_embd.weight": "model.embed_tokens.weight",
        "output_norm.weight": "model.norm.weight",
        "blk.0.attn_norm.weight": "model.layers.0.input_layernorm.weight",
        "blk.0.ffn_norm.weight": "model.layers.0.post_attention_layernorm.weight",
        "blk.0.attn_q.weight": "model.layers.0.self_attn.q_proj.weight",
        "blk.0.attn_k.weight": "model.layers.0.self_attn.k_proj.weight",
        "blk.0.attn_v.weight": "model.layers.0.self_attn.v_proj.weight",
        "blk.0.attn_output.weight": "model.layers.0.self_attn.o_proj.weight",
        "blk.0.ffn_gate.weight": "model.layers.0.mlp.gate_proj.weight",
        "blk.0.ffn_up.weight": "model.layers.0.mlp.up_proj.weight",
        "blk.0.ffn_down.weight": "model.layers.0.mlp.down_proj.weight",
    }
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(1)
    w.add_context_length(64)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(len(TOKENS))
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(TOKENS)
    w.add_token_types([3, 3, 3] + [1] * (len(TOKENS) - 3))
    w.add_token_merges(["Ġ a", "a b", "Ġa b"])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_chat_template(TEMPLATE)
    for gguf_name, hf_key in names.items():
        weight = hf[hf_key]
        if gguf_name == "blk.0.attn_q.weight":
            weight = _permute(weight, HEADS)
        elif gguf_name == "blk.0.attn_k.weight":
            weight = _permute(weight, KV_HEADS)
        w.add_tensor(gguf_name, weight)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return hf


@pytest.fixture
def tiny(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    path = tmp_path / "tiny.gguf"
    return path, write_tiny_gguf(path)


def test_missing_file_is_an_input_error(tmp_path: Path) -> None:
    path = tmp_path / "nope.gguf"
    with pytest.raises(InputError) as err:
        read_gguf(path)
    assert str(err.value) == f"{path}: no such file; expected a GGUF model"


def test_short_file_is_named_truncated(tmp_path: Path) -> None:
    path = tmp_path / "short.gguf"
    path.write_bytes(b"GGU")
    with pytest.raises(ConversionError) as err:
        check_header(path)
    assert str(err.value) == f"{path}: truncated GGUF (3 bytes); expected at least an 8-byte header"


def test_wrong_magic(tmp_path: Path) -> None:
    path = tmp_path / "model.gguf"
    path.write_bytes(b"PK\x03\x04" + b"\x00" * 60)
    with pytest.raises(ConversionError) as err:
        read_gguf(path)
    assert str(err.value) == f"{path}: not a GGUF file (magic b'PK\\x03\\x04'); expected b'GGUF'"


def test_unsupported_version(tmp_path: Path) -> None:
    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGUF" + (7).to_bytes(4, "little") + b"\x00" * 40)
    with pytest.raises(ConversionError) as err:
        read_gguf(path)
    assert str(err.value) == f"{path}: GGUF version 7; expected one of 2, 3"


def test_truncated_metadata(tiny, tmp_path: Path) -> None:
    path, _ = tiny
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(path.read_bytes()[:200])
    with pytest.raises(ConversionError) as err:
        read_gguf(cut)
    assert str(err.value) == (
        f"{cut}: a header of 11 tensors and 18 metadata keys needs 498 bytes at byte 24; expected at most 176, "
        "the rest of the file (truncated GGUF?)"
    )


def test_truncated_tensor_data(tiny, tmp_path: Path) -> None:
    path, _ = tiny
    data = path.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[:-100])
    with pytest.raises(ConversionError) as err:
        read_gguf(cut)
    assert str(err.value) == (
        f"{cut}: tensor 'blk.0.ffn_down.weight': data of 512 bytes at offset 2240 ends at byte 4704; expected at "
        "most the file's 4604 bytes (truncated GGUF?)"
    )


def test_reads_spec_and_unpermutes_q_and_k(tiny) -> None:
    path, hf = tiny
    model = read_gguf(path)
    assert model.version == 3
    assert (model.llama.num_heads, model.llama.num_kv_heads, model.llama.head_dim) == (HEADS, KV_HEADS, 4)
    assert model.llama.tie_embeddings is True
    assert model.tokenizer.pre == "smollm" and model.tokenizer.eos_id == 2
    tensors = dict(dequantized_tensors(model))
    assert sorted(tensors) == sorted(hf)
    for name, weight in hf.items():
        np.testing.assert_array_equal(tensors[name], weight, err_msg=name)


def test_unpermute_inverts_llama_cpp_permutation() -> None:
    w = np.arange(12 * 3, dtype=np.float32).reshape(12, 3)
    np.testing.assert_array_equal(unpermute_rows(_permute(w, 3), 3), w)
    assert not np.array_equal(_permute(w, 3), w)


def test_unknown_tensor_name() -> None:
    with pytest.raises(ConversionError) as err:
        hf_name("blk.0.attn_gate.weight")
    assert str(err.value) == (
        "unknown GGUF tensor 'blk.0.attn_gate.weight'; expected one of token_embd.weight, output_norm.weight, "
        "output.weight or blk.N.{attn_k.bias,attn_k.weight,attn_norm.weight,attn_output.weight,attn_q.bias,"
        "attn_q.weight,attn_qkv.weight,attn_v.bias,attn_v.weight,ffn_down.weight,ffn_gate.weight,ffn_norm.weight,"
        "ffn_up.weight}"
    )


def test_hf_folder_and_tokenizer(tiny, tmp_path: Path) -> None:
    path, _ = tiny
    folder = write_hf_folder(read_gguf(path), tmp_path / "hf")
    config = json.loads((folder.path / "config.json").read_text())
    assert config["num_key_value_heads"] == KV_HEADS and config["tie_word_embeddings"] is True
    assert json.loads((folder.path / "tokenizer_config.json").read_text())["eos_token"] == "<|im_end|>"
    tok = build_tokenizer(folder.tokenizer)
    # merges apply, digits split one by one, control tokens stay whole
    assert tok.encode("ab ab 12").ids == [8, 10, 5, 6, 7]
    assert tok.encode("<|im_start|>a<|im_end|>").ids == [1, 3, 2]
    assert tok.decode([10, 5, 6]) == " ab 1"


def test_unsupported_pre_tokenizer(tiny) -> None:
    path, _ = tiny
    spec = read_gguf(path).tokenizer
    from dataclasses import replace

    with pytest.raises(ConversionError) as err:
        build_tokenizer(replace(spec, pre="llama-bpe"))
    assert str(err.value) == "tokenizer.ggml.pre = 'llama-bpe'; expected one of default, gpt2, qwen2, smollm"


def test_chat_template_becomes_plain_pieces() -> None:
    fmt = derive_chat_format(TEMPLATE)
    assert fmt.default_system == "You are tiny."
    assert fmt.render([{"role": "user", "content": "hi"}]) == (
        "<|im_start|>system\nYou are tiny.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )


def test_chat_template_reading_the_first_message_unconditionally() -> None:
    """Qwen2.5-style: ``messages[0]`` read with no guard, the default system message in an else branch."""
    template = (
        "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\n' + messages[0]['content'] + "
        "'<|im_end|>\n' }}{%- else %}{{- '<|im_start|>system\nYou are tiny.<|im_end|>\n' }}{%- endif %}"
        "{%- for message in messages %}{%- if not (loop.first and message.role == 'system') %}"
        "{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}{%- endif %}{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}"
    )
    fmt = derive_chat_format(template)
    assert fmt.default_system == "You are tiny."
    assert fmt.generation_prompt == "<|im_start|>assistant\n"


def test_chat_template_outside_the_pattern_is_refused() -> None:
    template = "{% for m in messages %}[{{ m['role'] | upper }}] {{ m['content'] }}\n{% endfor %}"
    with pytest.raises(ConversionError) as err:
        derive_chat_format(template)
    assert str(err.value) == (
        "tokenizer.chat_template: a system message does not render as prefix + role + content + suffix"
    )


def test_chat_template_naming_eos_token() -> None:
    """TinyLlama-Chat (Zephyr's shape) ends each message with ``eos_token``: the converter passes the GGUF's
    special tokens, as transformers' apply_chat_template does; without them the template cannot render."""
    template = (
        "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + message['content'] + "
        "eos_token }}\n{% elif message['role'] == 'system' %}\n{{ '<|system|>\n' + message['content'] + eos_token }}\n"
        "{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\n'  + message['content'] + eos_token }}\n"
        "{% endif %}\n{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}"
    )
    with pytest.raises(ConversionError) as err:
        derive_chat_format(template)
    assert str(err.value) == "tokenizer.chat_template: rendering failed ('eos_token' is undefined)"
    fmt = derive_chat_format(template, {"bos_token": "<s>", "eos_token": "</s>"})
    assert (fmt.message_prefix, fmt.role_suffix, fmt.message_suffix) == ("<|", "|>\n", "</s>\n")
    assert fmt.render([{"role": "user", "content": "hi"}]) == "<|user|>\nhi</s>\n<|assistant|>\n"
