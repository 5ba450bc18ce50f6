"""Build a ``tokenizers`` byte-level BPE tokenizer from a GGUF's vocabulary, merges and special tokens.

llama.cpp names the pre-tokenizer in ``tokenizer.ggml.pre``. For ``smollm`` it splits every digit on its
own, then applies the GPT-2 split regex: exactly SmolLM2's original ``tokenizer.json`` (a ``Digits`` split
with ``individual_digits`` followed by ``ByteLevel``). For ``qwen2`` it is Qwen2's own split regex (one
digit per piece, letters with an optional leading non-letter) followed by ``ByteLevel`` without its regex,
as Qwen2's ``tokenizer.json`` has it. The vocabulary in the file is already spelled in the GPT-2 byte
alphabet (``Ġ`` for a space), so tokens go in unchanged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from edge.errors import ConversionError, require

if TYPE_CHECKING:
    from converters.slm.gguf_source import TokenizerSpec

TOKEN_TYPE_CONTROL = 3
TOKEN_TYPE_USER_DEFINED = 4
#: ``tokenizer.ggml.pre`` values we know how to rebuild, and how they split before the byte-level BPE.
_PRE_TOKENIZERS = {"smollm": "digits", "gpt2": "gpt2", "default": "gpt2", "qwen2": "qwen2"}
#: Qwen2's pre-tokenizer split (its tokenizer.json, ``Split`` with behaviour ``isolated``).
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def build_tokenizer(spec: TokenizerSpec):
    """A ``tokenizers.Tokenizer`` equivalent to the GGUF's tokenizer.

    Args:
        spec: the GGUF's tokenizer record.

    Returns:
        The tokenizer (save it with ``.save(path)``).

    Raises:
        ConversionError: a tokenizer model or pre-tokenizer we cannot rebuild.
    """
    tk = require("tokenizers", "convert", "building tokenizer.json")
    if spec.model != "gpt2":
        raise ConversionError(f"tokenizer.ggml.model = {spec.model!r}; expected 'gpt2' (byte-level BPE)")
    if spec.pre not in _PRE_TOKENIZERS:
        raise ConversionError(
            f"tokenizer.ggml.pre = {spec.pre!r}; expected one of {', '.join(sorted(_PRE_TOKENIZERS))}"
        )
    vocab = {token: index for index, token in enumerate(spec.tokens)}
    merges = []
    for merge in spec.merges:
        left, sep, right = merge.partition(" ")
        if not sep:
            raise ConversionError(f"tokenizer.ggml.merges has {merge!r}; expected two tokens split by a space")
        merges.append((left, right))
    try:
        bpe = tk.models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False)
    except Exception as exc:  # tokenizers raises a bare Exception for merges outside the vocabulary
        raise ConversionError(f"tokenizer.ggml.merges do not fit tokenizer.ggml.tokens ({exc})") from exc
    tokenizer = tk.Tokenizer(bpe)
    tokenizer.pre_tokenizer = _pre_tokenizer(tk, _PRE_TOKENIZERS[spec.pre])
    tokenizer.decoder = tk.decoders.ByteLevel()
    tokenizer.post_processor = tk.processors.ByteLevel(trim_offsets=False)
    tokenizer.add_special_tokens(
        [
            tk.AddedToken(token, special=True, normalized=False)
            for token, kind in zip(spec.tokens, spec.token_types, strict=True)
            if kind == TOKEN_TYPE_CONTROL
        ]
    )
    user = [
        tk.AddedToken(token, special=False, normalized=False)
        for token, kind in zip(spec.tokens, spec.token_types, strict=True)
        if kind == TOKEN_TYPE_USER_DEFINED
    ]
    if user:
        tokenizer.add_tokens(user)
    return tokenizer


def _pre_tokenizer(tk, kind: str):
    if kind == "qwen2":
        split = tk.pre_tokenizers.Split(tk.Regex(QWEN2_SPLIT), behavior="isolated", invert=False)
        byte_level = tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
        return tk.pre_tokenizers.Sequence([split, byte_level])
    byte_level = tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if kind == "digits":
        return tk.pre_tokenizers.Sequence([tk.pre_tokenizers.Digits(individual_digits=True), byte_level])
    return byte_level


def tokenizer_config(spec: TokenizerSpec, context_length: int) -> dict:
    """``tokenizer_config.json`` for transformers (special tokens and the chat template)."""

    def name(token_id: int | None) -> str | None:
        return None if token_id is None else spec.tokens[token_id]

    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": name(spec.bos_id),
        "eos_token": name(spec.eos_id),
        "unk_token": name(spec.unk_id),
        "pad_token": name(spec.pad_id),
        "add_bos_token": spec.add_bos,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": context_length,
        "chat_template": spec.chat_template,
    }
