"""Export a llama-family decoder (llama, qwen2; from a local HF folder) to one ONNX graph with a KV cache.

We rebuild the decoder as a small torch module of our own instead of tracing ``transformers``: its mask
code uses ``aten::diff`` (the legacy exporter fails on it) and the dynamo export of the full HF model took
157 s. Ours has nothing but MatMul/Softmax/elementwise ops and exports with the TorchScript exporter in
seconds.

The graph (names follow the onnxruntime-genai / optimum convention)::

    inputs   input_ids        int64 [batch, seq]
             attention_mask   int64 [batch, past_seq + seq]   (1 = attend, 0 = padding)
             position_ids     int64 [batch, seq]
             past_key_values.{i}.key / .value   float32 [batch, kv_heads, past_seq, head_dim]
    outputs  logits           float32 [batch, seq, vocab]
             present.{i}.key / .value           float32 [batch, kv_heads, past_seq + seq, head_dim]

One graph serves prefill (``seq > 1``, ``past_seq = 0``) and decode (``seq = 1``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from edge.errors import ConversionError, InputError, require

OPSET = 17
INPUT_IDS = "input_ids"
#: HF ``model_type`` values our decoder reproduces (qwen2: llama with q/k/v biases).
MODEL_TYPES = ("llama", "qwen2")
ATTENTION_MASK = "attention_mask"
POSITION_IDS = "position_ids"


def past_names(layer: int) -> tuple[str, str]:
    """Input names of one layer's cache."""
    return f"past_key_values.{layer}.key", f"past_key_values.{layer}.value"


def present_names(layer: int) -> tuple[str, str]:
    """Output names of one layer's updated cache."""
    return f"present.{layer}.key", f"present.{layer}.value"


@dataclass(frozen=True)
class DecoderShape:
    """What a runtime needs to know to feed the graph (also written into generation.json)."""

    num_layers: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    context_length: int


@dataclass(frozen=True)
class ExportedModel:
    """An exported fp32 ONNX decoder."""

    path: Path
    shape: DecoderShape
    opset: int


def read_config(hf_dir: Path) -> dict:
    """``config.json`` of an HF llama or qwen2 folder.

    Raises:
        InputError: the file is missing or is not llama / qwen2 JSON.
    """
    path = Path(hf_dir) / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror}); expected an HF model folder") from exc
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not valid JSON ({exc})") from exc
    if config.get("model_type") not in MODEL_TYPES:
        raise InputError(f"{path}: model_type = {config.get('model_type')!r}; expected one of {', '.join(MODEL_TYPES)}")
    return config


def decoder_shape(config: dict) -> DecoderShape:
    """The cache layout for an HF llama config."""
    heads = config["num_attention_heads"]
    return DecoderShape(
        num_layers=config["num_hidden_layers"],
        num_kv_heads=config.get("num_key_value_heads", heads),
        head_dim=config.get("head_dim", config["hidden_size"] // heads),
        vocab_size=config["vocab_size"],
        context_length=config["max_position_embeddings"],
    )


def _build_module(config: dict):
    """Define the torch module classes lazily (torch is a host-only dependency)."""
    from converters.slm.torch_llama import LlamaDecoder

    return LlamaDecoder(config)


def load_decoder(hf_dir: Path):
    """Our torch llama decoder with the folder's ``model.safetensors`` weights (fp32, fused, eval mode).

    Raises:
        InputError: config or weights missing.
        ConversionError: the weights do not match the config.
    """
    require("torch", "convert", "exporting the language model")
    st = require("safetensors.torch", "convert", "reading model.safetensors")
    hf_dir = Path(hf_dir)
    config = read_config(hf_dir)
    weights_path = hf_dir / "model.safetensors"
    if not weights_path.is_file():
        raise InputError(f"{weights_path}: missing; expected the folder's weights")
    module = _build_module(config)
    state = st.load_file(str(weights_path))
    if config.get("tie_word_embeddings", False) and "lm_head.weight" not in state:
        state["lm_head.weight"] = state["model.embed_tokens.weight"].clone()
    missing, unexpected = module.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ConversionError(
            f"{weights_path}: weights do not fit the {config['model_type']} config (missing {sorted(missing)[:5]}, "
            f"unexpected {sorted(unexpected)[:5]})"
        )
    return module.fuse_projections().eval()


def _dummy_inputs(shape: DecoderShape, batch: int = 1, seq: int = 3, past: int = 2):
    import torch

    ids = torch.randint(0, shape.vocab_size, (batch, seq), dtype=torch.int64)
    mask = torch.ones(batch, past + seq, dtype=torch.int64)
    pos = torch.arange(past, past + seq, dtype=torch.int64).expand(batch, seq).contiguous()
    cache = [torch.zeros(batch, shape.num_kv_heads, past, shape.head_dim) for _ in range(2 * shape.num_layers)]
    return (ids, mask, pos, *cache)


def export_onnx(hf_dir: Path, out_path: Path) -> ExportedModel:
    """Export the decoder in ``hf_dir`` to ``out_path`` (fp32, one file, dynamic batch/sequence/cache).

    Args:
        hf_dir: an HF llama folder (see ``gguf_source.write_hf_folder``).
        out_path: the ``.onnx`` file to write.

    Returns:
        The exported model record.

    Raises:
        InputError: the folder is incomplete.
        ConversionError: the exporter failed.
    """
    import torch

    config = read_config(hf_dir)
    shape = decoder_shape(config)
    module = load_decoder(hf_dir)
    inputs = [INPUT_IDS, ATTENTION_MASK, POSITION_IDS]
    outputs = ["logits"]
    axes = {
        INPUT_IDS: {0: "batch", 1: "seq"},
        ATTENTION_MASK: {0: "batch", 1: "total_seq"},
        POSITION_IDS: {0: "batch", 1: "seq"},
        "logits": {0: "batch", 1: "seq"},
    }
    for layer in range(shape.num_layers):
        for name in past_names(layer):
            inputs.append(name)
            axes[name] = {0: "batch", 2: "past_seq"}
        for name in present_names(layer):
            outputs.append(name)
            axes[name] = {0: "batch", 2: "total_seq"}
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with torch.no_grad():
            torch.onnx.export(
                module,
                _dummy_inputs(shape),
                str(out_path),
                input_names=inputs,
                output_names=outputs,
                dynamic_axes=axes,
                opset_version=OPSET,
                do_constant_folding=True,
                dynamo=False,
            )
    except (RuntimeError, ValueError, TypeError) as exc:
        raise ConversionError(f"{hf_dir}: ONNX export failed ({type(exc).__name__}: {exc})") from exc
    if config.get("tie_word_embeddings", False):
        share_tied_embedding(out_path)
    return ExportedModel(out_path, shape, OPSET)


def share_tied_embedding(path: Path) -> bool:
    """Store a tied embedding once: the exporter writes the table twice (``[vocab, hidden]`` for the
    embedding Gather and, folded, ``[hidden, vocab]`` for the LM head MatMul: 113 MB each for SmolLM2).
    Rewrite the Gather to read the LM head's copy along axis 1 (+ Transpose) and drop the other.

    Returns:
        Whether the file was rewritten (False when the two tables are not transposes of each other).
    """
    onnx = require("onnx", "convert", "rewriting the ONNX graph")
    import numpy as np
    from onnx import helper, numpy_helper

    model = onnx.load(str(path))
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    gathers = [
        n for n in graph.node if n.op_type == "Gather" and n.input[0] in inits and len(inits[n.input[0]].dims) == 2
    ]
    heads = [n for n in graph.node if n.op_type == "MatMul" and n.output[0] == "logits" and n.input[1] in inits]
    if len(gathers) != 1 or len(heads) != 1:
        return False
    gather, head = gathers[0], heads[0]
    table, head_weight = inits[gather.input[0]], inits[head.input[1]]
    if tuple(table.dims) != tuple(reversed(head_weight.dims)):
        return False
    if not np.array_equal(numpy_helper.to_array(table).T, numpy_helper.to_array(head_weight)):
        return False
    columns = f"{gather.output[0]}_columns"
    index = list(graph.node).index(gather)
    graph.node.remove(gather)
    graph.node.insert(
        index, helper.make_node("Transpose", [columns], [gather.output[0]], name=f"{gather.name}_T", perm=[1, 2, 0])
    )
    graph.node.insert(
        index, helper.make_node("Gather", [head_weight.name, gather.input[1]], [columns], name=gather.name, axis=1)
    )
    graph.initializer.remove(table)
    onnx.save(model, str(path))
    return True
