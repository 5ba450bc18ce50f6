"""SentencePiece GGUFs (``tokenizer.ggml.model = "llama"``, as TinyLlama and Phi-3 carry): our tokenizer.json
against transformers' GGUF loader, and a whole ``convert slm --gguf`` of one.

The vocabulary is built here the way llama.cpp writes a SentencePiece one: ``<unk>`` (UNKNOWN), ``<s>`` and
``</s>`` (CONTROL), all 256 ``<0xNN>`` byte tokens (BYTE), then pieces spelled with ``▁`` for a space, with
descending scores (the file has no merges: the merge order comes from the scores). phi3 adds
``<|endoftext|>`` (CONTROL) and ``<|user|>``, ``<|assistant|>``, ``<|end|>`` (USER_DEFINED), as Phi-3's file
has them. transformers (``AutoTokenizer.from_pretrained(dir, gguf_file=...)``) is the reference: it adds BOS
itself, our tokenizer.json leaves that to generation.json's ``add_bos``.
"""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import numpy as np
import pytest
import transformers

from converters.slm.gguf_source import read_gguf
from converters.slm.tokenizer import build_tokenizer
from edge.errors import ConversionError, InputError
from edge.text import SamplingConfig, TextGenerator
from edge_deploy.cli import main
from testsupport.gguf_models import FFN, HEADS, HIDDEN, KV_HEADS, LAYERS
from testsupport.gguf_models import finish as _finish
from testsupport.gguf_models import layer_tensors as _layer_tensors

#: pieces ranked best first (score 0, -1, ...); "<s", "s>" make the vocabulary imply merges that spell "<s>"
PIECES = [
    "▁▁", "▁t", "er", "in", "▁a", "he", "on", "▁th", "es", "▁▁▁▁", "at", "▁the", "▁w", "or", "▁s", "en", "▁▁▁",
    "▁1", "12", "▁hello", "ll", "▁he", "▁hell", "lo", "llo", "ell", "▁wor", "ld", "▁world", "\n\n", "▁<", "s>",
    "<s", "▁é", "|>", "<|", "▁(", "):",
]  # fmt: skip
CHARS = "▁etaoinshrdlucmfwypvbgkqjxzETAOINSHRDLUCMFWYPVBGKQJXZ0123456789.,!?'\"-:;()<>/|\n"
PHI3_ADDED = (("<|endoftext|>", 3), ("<|user|>", 4), ("<|assistant|>", 4), ("<|end|>", 4))
#: TinyLlama-1.1B-Chat-v1.0's published template (Zephyr's shape): each message ends with ``eos_token``
TEMPLATE = (
    "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + message['content'] + "
    "eos_token }}\n{% elif message['role'] == 'system' %}\n{{ '<|system|>\n' + message['content'] + eos_token }}\n"
    "{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\n'  + message['content'] + eos_token }}\n"
    "{% endif %}\n{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}"
)
HOSTILE = [
    "hello world",
    " hello  world ",
    "   leading spaces",
    "trailing spaces   ",
    "    ",
    " ",
    "",
    "\n",
    "\n\nthe\nend\n\n",
    "tab\tand\r\nreturn",
    "12 123 1234 2025",
    "ü 日本語 naïve é",
    "emoji 🙂👍🏽 and ZWJ 👩‍👩‍👧",
    "<s>inside</s> and <unk> and <s and s>",
    "<|user|>\nhi<|end|>\n<|assistant|>\n<|endoftext|>",
    "\u2581 already a metaspace \u2581\u2581",
    "(a): b",
    "\ufffd replacement char",
]


def spm_vocab(arch: str) -> tuple[list[str], list[int], list[float]]:
    """Tokens, token types and scores of a small llama.cpp-style SentencePiece vocabulary."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3] + [6] * 256
    scores = [0.0] * len(tokens)
    for i, piece in enumerate(PIECES):
        tokens.append(piece), types.append(1), scores.append(-float(i))
    for i, char in enumerate(CHARS):
        if char not in tokens:
            tokens.append(char), types.append(1), scores.append(-1000.0 - i)
    if arch == "phi3":
        for token, kind in PHI3_ADDED:
            tokens.append(token), types.append(kind), scores.append(0.0)
    return tokens, types, scores


def write_spm_gguf(path: Path, arch: str, seed: int = 0) -> Path:
    """A tiny F32 ``arch`` GGUF (llama or phi3) with a SentencePiece vocabulary and no add_bos key."""
    tokens, types, scores = spm_vocab(arch)
    rng = np.random.default_rng(seed)
    tensors = {
        "token_embd.weight": rng.normal(0, 1.0, (len(tokens), HIDDEN)),
        "output_norm.weight": rng.uniform(0.5, 1.5, HIDDEN),
    }
    for i in range(LAYERS):
        tensors.update(_layer_tensors(rng, arch, i, HIDDEN, FFN))
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(LAYERS)
    w.add_context_length(1024)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_vocab_size(len(tokens))
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_scores(scores)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_pad_token_id(0 if arch == "llama" else 2)  # Phi3Config's default pad (32000) is outside this vocabulary
    w.add_chat_template(TEMPLATE)
    for name, value in tensors.items():
        w.add_tensor(name, value.astype(np.float32))
    _finish(w)
    return path


@pytest.fixture(scope="module", params=["llama", "phi3"])
def spm(request, tmp_path_factory):
    """(arch, GGUF path, our tokenizer, transformers' tokenizer)."""
    path = write_spm_gguf(
        tmp_path_factory.mktemp(f"spm-{request.param}") / f"tiny-{request.param}-spm.gguf", request.param
    )
    model = read_gguf(path)
    ours = build_tokenizer(model.tokenizer, model.llama.architecture)
    reference = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    return request.param, path, ours, reference


def test_spm_spec_adds_bos_and_reads_scores(spm) -> None:
    arch, path, _, _ = spm
    spec = read_gguf(path).tokenizer
    tokens, _, scores = spm_vocab(arch)
    assert spec.model == "llama" and spec.merges == () and spec.scores == tuple(scores)
    assert spec.add_bos is True  # no tokenizer.ggml.add_bos_token: llama.cpp and transformers add BOS


def test_tokenizer_json_equals_transformers_but_the_post_processor(spm) -> None:
    """Vocabulary, merges, normalizer, pre-tokenizer, decoder and added tokens field for field; transformers'
    post-processor adds BOS, ours leaves that to generation.json's ``add_bos``."""
    _, _, ours, reference = spm
    mine, theirs = json.loads(ours.to_str()), json.loads(reference.backend_tokenizer.to_str())
    assert mine.pop("post_processor") is None and theirs.pop("post_processor")["type"] == "TemplateProcessing"
    assert mine == theirs


def test_ids_equal_transformers_on_hostile_text(spm) -> None:
    _, _, ours, reference = spm
    for text in HOSTILE:
        assert [1, *ours.encode(text).ids] == reference.encode(text), text


def test_unknown_characters_fall_back_to_byte_tokens(spm) -> None:
    _, _, ours, _ = spm
    enc = ours.encode("日🙂")
    assert enc.tokens == ["▁", "<0xE6>", "<0x97>", "<0xA5>", "<0xF0>", "<0x9F>", "<0x99>", "<0x82>"]
    assert ours.decode(enc.ids) == "日🙂"


def test_decode_equals_transformers(spm) -> None:
    _, _, ours, reference = spm
    for text in HOSTILE:
        ids = reference.encode(text)
        for skip in (True, False):
            assert ours.decode(ids, skip_special_tokens=skip) == reference.decode(ids, skip_special_tokens=skip), text


def test_round_trip_of_plain_text(spm) -> None:
    """Text without special tokens comes back whole; llama's ``Metaspace`` prepends no ``▁`` to text that starts
    with a space, so there one leading space is lost, in transformers too (phi3's normalizer always prepends).
    A literal ``▁`` comes back as a space in both, so it is left out here."""
    arch, _, ours, reference = spm
    for text in HOSTILE:
        if "<" in text or "\u2581" in text:
            continue
        ids = ours.encode(text).ids
        expected = text if arch == "phi3" else text.removeprefix(" ")
        assert ours.decode(ids) == reference.decode([1, *ids], skip_special_tokens=True) == expected, text


def test_the_saved_tokenizer_json_is_plain_tokenizers(spm, tmp_path: Path) -> None:
    """What the device loads: tokenizer.json through ``tokenizers`` alone gives the same ids and text."""
    from tokenizers import Tokenizer

    _, _, ours, reference = spm
    ours.save(str(tmp_path / "tokenizer.json"))
    device = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    for text in HOSTILE:
        ids = device.encode(text).ids
        assert [1, *ids] == reference.encode(text)
        assert device.decode(ids, skip_special_tokens=True) == reference.decode([1, *ids], skip_special_tokens=True)


def test_scores_not_one_per_token_are_refused(spm) -> None:
    from dataclasses import replace

    _, path, _, _ = spm
    spec = read_gguf(path).tokenizer
    with pytest.raises(ConversionError) as err:
        build_tokenizer(replace(spec, scores=spec.scores[:-1]))
    n = len(spec.tokens)
    assert str(err.value) == (
        f"tokenizer.ggml.scores has {n - 1} values for {n} tokens; expected one score per token (a SentencePiece "
        "vocabulary without merges is ranked by its scores)"
    )


def test_another_tokenizer_model_is_refused(spm) -> None:
    from dataclasses import replace

    _, path, _, _ = spm
    with pytest.raises(ConversionError) as err:
        build_tokenizer(replace(read_gguf(path).tokenizer, model="t5"))
    assert str(err.value) == (
        "tokenizer.ggml.model = 't5'; expected 'gpt2' (byte-level BPE) or 'llama' (SentencePiece)"
    )


@pytest.mark.parametrize("arch", ["llama", "phi3"])
def test_convert_slm_of_a_sentencepiece_gguf_matches_transformers(arch: str, tmp_path: Path, capsys) -> None:
    """``convert slm --gguf tiny-llama-spm.gguf`` (fp32, rpi4): the perplexity gate passes (an fp32 build is
    its own reference, so convert runs no greedy gate), and the folder's generator (tokenizer.json +
    generation.json + ONNX) prompts, generates greedily and decodes as transformers does. With seed 3 the
    llama model's greedy reply starts ``<0x4E>`` ("N") ``<0xD6>``: a byte run that turns invalid, which the
    streamer must not have emitted as "N"."""
    import torch

    path = write_spm_gguf(tmp_path / f"tiny-{arch}-spm.gguf", arch, seed=3)
    out = tmp_path / "out"
    argv = ["convert", "slm", "--target", "rpi4", "--precision", "fp32", "--gguf", str(path), "-o", str(out)]
    assert main([*argv, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["gate"]["passed"] and report["gate"]["perplexity_ratio"] == 1.0 and report["gate"]["mean_kld"] == 0
    assert report["greedy_agreement"] is None
    generation = json.loads((out / "generation.json").read_text())
    assert generation["tokenizer_model"] == "llama" and generation["add_bos"] is True
    tok = transformers.AutoTokenizer.from_pretrained(str(tmp_path), gguf_file=path.name)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(tmp_path), gguf_file=path.name, torch_dtype=torch.float32
    ).eval()
    messages = [{"role": "user", "content": "hello  wörld 🙂 12"}]
    with TextGenerator(out) as gen:
        text = gen.prompt_text(messages)
        assert text == tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        ids = gen.encode(text)
        assert ids == tok.encode(text)
        stream = gen.stream(messages, SamplingConfig(max_new_tokens=12))
        pieces = list(stream)
        with pytest.raises(InputError) as err:  # BOS is not ChatML-shaped, but the tokenizer reads it as BOS
            gen.prompt_text("a<s>b")
    assert str(err.value) == (
        "messages[0].content holds the control token '<s>' at character 1; expected plain text (a message may not "
        "open or close a turn)"
    )
    with torch.no_grad():
        ref = model.generate(torch.tensor([ids]), max_new_tokens=12, do_sample=False, eos_token_id=2, pad_token_id=2)
    new = [int(t) for t in ref[0, len(ids) :] if int(t) != 2]
    assert list(stream.result.token_ids) == new
    assert "".join(pieces) == stream.result.text == tok.decode(new, skip_special_tokens=True)
    if arch == "llama":
        assert new[:3] == [0x4E + 3, 0xD6 + 3, tok.convert_tokens_to_ids("F")] and pieces[0] == "\ufffd\ufffdF"
