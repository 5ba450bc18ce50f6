"""Build a ``tokenizers`` tokenizer from a GGUF's vocabulary: byte-level BPE or SentencePiece.

**Byte-level BPE** (``tokenizer.ggml.model = "gpt2"``): vocabulary, merges and special tokens as the file
lists them. llama.cpp names the pre-tokenizer in ``tokenizer.ggml.pre``. For ``smollm`` it splits every digit
on its own, then applies the GPT-2 split regex: exactly SmolLM2's original ``tokenizer.json`` (a ``Digits``
split with ``individual_digits`` followed by ``ByteLevel``). For ``qwen2`` it is Qwen2's own split regex (one
digit per piece, letters with an optional leading non-letter) followed by ``ByteLevel`` without its regex,
as Qwen2's ``tokenizer.json`` has it. The vocabulary in the file is already spelled in the GPT-2 byte
alphabet (``Ġ`` for a space), so tokens go in unchanged.

**SentencePiece** (``"llama"``: TinyLlama, Phi-3): a BPE over pieces spelled with ``▁`` for a space, with
``<0xNN>`` byte tokens for characters outside the vocabulary. The file has no merges, only a score per
token; the merges are derived from the scores exactly as transformers' GGUF loader does
(``transformers.tokenization_utils_base.generate_merges``: every split of a token into two known tokens,
ranked by the token's score), and the rest is transformers' rebuild too: ``Metaspace`` (``▁`` prepended to
the first piece, no split) for llama, a ``Prepend("▁")`` + ``Replace(" ", "▁")`` normalizer for phi3, and a
decoder that maps ``▁`` back to a space, joins byte tokens into UTF-8 and strips the one leading space.
BOS is not in the tokenizer: ``generation.json``'s ``add_bos`` tells the device to add it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from edge.errors import ConversionError, require

if TYPE_CHECKING:
    from converters.slm.gguf_source import TokenizerSpec

TOKEN_TYPE_CONTROL = 3
TOKEN_TYPE_USER_DEFINED = 4
#: ``tokenizer.ggml.model`` values we rebuild, and what they are.
TOKENIZER_MODELS = {"gpt2": "byte-level BPE", "llama": "SentencePiece"}
#: ``tokenizer.ggml.pre`` values we know how to rebuild, and how they split before the byte-level BPE.
_PRE_TOKENIZERS = {"smollm": "digits", "gpt2": "gpt2", "default": "gpt2", "qwen2": "qwen2"}
#: Qwen2's pre-tokenizer split (its tokenizer.json, ``Split`` with behaviour ``isolated``).
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
#: SentencePiece's space.
SPIECE_SPACE = "\u2581"
#: Architectures whose SentencePiece prefix space comes from a normalizer rather than ``Metaspace`` (as in
#: Phi-3's own tokenizer.json; transformers' GGUF loader picks this by architecture too).
_PREPEND_NORMALIZER = ("phi3",)


def build_tokenizer(spec: TokenizerSpec, architecture: str = "llama"):
    """A ``tokenizers.Tokenizer`` equivalent to the GGUF's tokenizer.

    Args:
        spec: the GGUF's tokenizer record.
        architecture: the GGUF's ``general.architecture`` (a SentencePiece phi3 prepends its space apart).

    Returns:
        The tokenizer (save it with ``.save(path)``).

    Raises:
        ConversionError: a tokenizer model or pre-tokenizer we cannot rebuild, or merges or scores that do
            not fit the vocabulary.
    """
    tk = require("tokenizers", "convert", "building tokenizer.json")
    if spec.model == "gpt2":
        tokenizer = _byte_level(tk, spec)
    elif spec.model == "llama":
        tokenizer = _sentencepiece(tk, spec, architecture)
    else:
        expected = " or ".join(f"{name!r} ({kind})" for name, kind in TOKENIZER_MODELS.items())
        raise ConversionError(f"tokenizer.ggml.model = {spec.model!r}; expected {expected}")
    _add_tokens(tk, tokenizer, spec)
    return tokenizer


def _parsed_merges(spec: TokenizerSpec) -> list[tuple[str, str]]:
    merges = []
    for merge in spec.merges:
        left, sep, right = merge.partition(" ")
        if not sep:
            raise ConversionError(f"tokenizer.ggml.merges has {merge!r}; expected two tokens split by a space")
        merges.append((left, right))
    return merges


def _bpe(tk, vocab: dict[str, int], merges: list[tuple[str, str]], spm: bool):
    try:
        return tk.models.BPE(vocab=vocab, merges=merges, fuse_unk=spm, byte_fallback=spm)
    except Exception as exc:  # tokenizers raises a bare Exception for merges outside the vocabulary
        raise ConversionError(f"tokenizer.ggml.merges do not fit tokenizer.ggml.tokens ({exc})") from exc


def _byte_level(tk, spec: TokenizerSpec):
    if spec.pre not in _PRE_TOKENIZERS:
        raise ConversionError(
            f"tokenizer.ggml.pre = {spec.pre!r}; expected one of {', '.join(sorted(_PRE_TOKENIZERS))}"
        )
    vocab = {token: index for index, token in enumerate(spec.tokens)}
    tokenizer = tk.Tokenizer(_bpe(tk, vocab, _parsed_merges(spec), spm=False))
    tokenizer.pre_tokenizer = _pre_tokenizer(tk, _PRE_TOKENIZERS[spec.pre])
    tokenizer.decoder = tk.decoders.ByteLevel()
    tokenizer.post_processor = tk.processors.ByteLevel(trim_offsets=False)
    return tokenizer


def _sentencepiece(tk, spec: TokenizerSpec, architecture: str):
    """SentencePiece as transformers' GGUF loader rebuilds it (``LlamaTokenizer``'s pipeline; phi3's normalizer)."""
    if not spec.merges and len(spec.scores) != len(spec.tokens):
        raise ConversionError(
            f"tokenizer.ggml.scores has {len(spec.scores)} values for {len(spec.tokens)} tokens; expected one "
            "score per token (a SentencePiece vocabulary without merges is ranked by its scores)"
        )
    vocab = {token: index for index, token in enumerate(spec.tokens)}
    merges = _parsed_merges(spec) if spec.merges else merges_from_scores(spec.tokens, spec.scores)
    tokenizer = tk.Tokenizer(_bpe(tk, vocab, merges, spm=True))
    if architecture in _PREPEND_NORMALIZER:
        tokenizer.normalizer = tk.normalizers.Sequence(
            [tk.normalizers.Prepend(SPIECE_SPACE), tk.normalizers.Replace(" ", SPIECE_SPACE)]
        )
    else:
        tokenizer.pre_tokenizer = tk.pre_tokenizers.Metaspace(
            replacement=SPIECE_SPACE, prepend_scheme="first", split=False
        )
    tokenizer.decoder = tk.decoders.Sequence(
        [
            tk.decoders.Replace(SPIECE_SPACE, " "),
            tk.decoders.ByteFallback(),
            tk.decoders.Fuse(),
            tk.decoders.Strip(" ", 1, 0),
        ]
    )
    return tokenizer


def merges_from_scores(tokens: tuple[str, ...], scores: tuple[float, ...]) -> list[tuple[str, str]]:
    """The BPE merges a SentencePiece vocabulary implies, best first (transformers' ``generate_merges``).

    Every split of a token into two tokens of the vocabulary is a merge ranked by the whole token's score
    (higher first), ties broken by the longer left then right part; a token's own splits are in the order of
    their parts' ids, and Python's stable sort keeps that order among equal keys.

    Args:
        tokens: the vocabulary, in id order.
        scores: one score per token.

    Returns:
        ``(left, right)`` pairs.
    """
    vocab = {token: index for index, token in enumerate(tokens)}
    ranked = []
    for token, score in dict(zip(tokens, scores, strict=True)).items():
        splits = [(token[:k], token[k:]) for k in range(1, len(token))]
        local = [(left, right, score) for left, right in splits if left in vocab and right in vocab]
        ranked.extend(sorted(local, key=lambda m: (vocab[m[0]], vocab[m[1]])))
    ranked.sort(key=lambda m: (m[2], len(m[0]), len(m[1])), reverse=True)
    return [(left, right) for left, right, _ in ranked]


def _add_tokens(tk, tokenizer, spec: TokenizerSpec) -> None:
    """Control tokens (and, for SentencePiece, BOS/EOS/UNK/PAD, which transformers makes special) stay whole
    and special; user-defined tokens stay whole but are text."""
    kinds = zip(spec.tokens, spec.token_types, strict=True)
    special = {token for token, kind in kinds if kind == TOKEN_TYPE_CONTROL}
    if spec.model == "llama":
        ids = (spec.bos_id, spec.eos_id, spec.unk_id, spec.pad_id)
        special |= {spec.tokens[i] for i in ids if i is not None and 0 <= i < len(spec.tokens)}
    ordered = [token for token in dict.fromkeys(spec.tokens) if token in special]
    tokenizer.add_special_tokens([tk.AddedToken(token, special=True, normalized=False) for token in ordered])
    user = [
        tk.AddedToken(token, special=False, normalized=False)
        for token, kind in zip(spec.tokens, spec.token_types, strict=True)
        if kind == TOKEN_TYPE_USER_DEFINED
    ]
    if user:
        tokenizer.add_tokens(user)


def _pre_tokenizer(tk, kind: str):
    if kind == "qwen2":
        split = tk.pre_tokenizers.Split(tk.Regex(QWEN2_SPLIT), behavior="isolated", invert=False)
        byte_level = tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
        return tk.pre_tokenizers.Sequence([split, byte_level])
    byte_level = tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if kind == "digits":
        return tk.pre_tokenizers.Sequence([tk.pre_tokenizers.Digits(individual_digits=True), byte_level])
    return byte_level


def special_token_names(spec: TokenizerSpec) -> dict[str, str]:
    """``bos_token``, ``eos_token``, ``unk_token``, ``pad_token``: the spellings a chat template may name."""
    ids = {"bos_token": spec.bos_id, "eos_token": spec.eos_id, "unk_token": spec.unk_id, "pad_token": spec.pad_id}
    return {name: spec.tokens[i] for name, i in ids.items() if i is not None and 0 <= i < len(spec.tokens)}


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
