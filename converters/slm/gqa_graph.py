"""Write a llama or qwen2 decoder straight to ONNX with onnxruntime's fused ops and a shared KV buffer.

The torch export (``export.py``) is the reference: plain ONNX ops, a cache that grows by Concat at every
step. This graph computes the same function with onnxruntime's contrib ops, the layout onnxruntime-genai's
model builder writes:

- ``GroupQueryAttention`` per layer (packed QKV in, rotary from cos/sin tables, causal softmax, the new
  keys/values written into the cache buffer at ``seqlens_k``), so rotary, Concat, the attention MatMuls,
  Softmax and mask nodes (~33 per layer) become one node;
- ``SkipSimplifiedLayerNormalization`` fusing each residual Add with the next RMSNorm;
- the tied embedding stored once: the LM head's ``[hidden, vocab]`` weight, read by the embedding as a
  ``Gather`` along axis 1 (+ Transpose), so the file carries 134.5 M parameters, not 162.8 M.

Interface (same names as the export; ``position_ids`` is not an input: positions come from the mask)::

    inputs   input_ids        int64 [batch, seq]
             attention_mask   int64 [batch, total_seq]   all ones (left padding is not supported)
             past_key_values.{i}.key / .value   float32 [batch, kv_heads, capacity, head_dim]
    outputs  logits           float32 [batch, seq, vocab]
             present.{i}.key / .value           float32 [batch, kv_heads, capacity, head_dim]

The runtime binds each ``present`` to the same buffer as its ``past`` (``edge.text.decoder``); the model's
metadata ``edge_deploy.kv_cache = shared_buffer`` says so. ``GroupQueryAttention`` reads only the first
``total_seq`` positions of the buffer, so a large buffer costs memory, not time.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from converters.slm.export import OPSET, decoder_shape, read_config
from edge.errors import ConversionError, InputError, require
from edge.text.decoder import KV_CACHE_KEY, KV_SHARED_BUFFER

_MS = "com.microsoft"
#: ONNX IR version written (what the torch exporter writes for opset 17).
IR_VERSION = 8


def rotary_tables(config: dict, positions: int) -> tuple[np.ndarray, np.ndarray]:
    """cos/sin ``[positions, head_dim / 2]`` for the default (half-split) llama rotary, in fp32 like torch."""
    heads = config["num_attention_heads"]
    dim = config.get("head_dim", config["hidden_size"] // heads)
    theta = config.get("rope_parameters", {}).get("rope_theta", config.get("rope_theta", 10000.0))
    exponent = np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / np.float32(dim)
    inv_freq = (np.float32(1.0) / np.power(np.float32(theta), exponent)).astype(np.float32)
    freqs = np.arange(positions, dtype=np.float32)[:, None] * inv_freq[None, :]
    return np.cos(freqs).astype(np.float32), np.sin(freqs).astype(np.float32)


class _Graph:
    """Collects nodes and initializers; names outputs after their node."""

    def __init__(self, onnx) -> None:
        self.onnx, self.helper = onnx, onnx.helper
        self.nodes: list = []
        self.inits: list = []

    def init(self, name: str, array: np.ndarray) -> str:
        self.inits.append(self.onnx.numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def node(self, op: str, inputs: list[str], name: str, outputs: int = 1, domain: str = "", **attrs) -> list[str]:
        outs = [f"{name}/out{i}" for i in range(outputs)]
        self.nodes.append(self.helper.make_node(op, inputs, outs, name=name, domain=domain, **attrs))
        return outs

    def skip_norm(self, x: str, residual: str, gamma: str, name: str, eps: float, keep_sum: bool = True) -> list[str]:
        """RMSNorm of ``x + residual``: (normed, the sum); the optional mean / inv-std outputs left empty."""
        normed, _, _, total = self.node(
            "SkipSimplifiedLayerNormalization", [x, residual, gamma], name, 4, _MS, epsilon=eps
        )
        self.nodes[-1].output[1:] = ["", "", total if keep_sum else ""]
        return [normed, total]


def _layer(g: _Graph, w: dict, i: int, x: str, residual: str | None, attrs: dict, eps: float) -> tuple[str, str]:
    """One decoder layer; returns (MLP output, residual) for the next layer's Skip norm."""
    p = f"model.layers.{i}."
    gamma = g.init(f"{p}input_layernorm.weight", w[f"{p}input_layernorm.weight"])
    if residual is None:
        (h,) = g.node("SimplifiedLayerNormalization", [x, gamma], f"/layers.{i}/input_norm", epsilon=eps, axis=-1)
        residual = x
    else:
        h, residual = g.skip_norm(x, residual, gamma, f"/layers.{i}/input_norm", eps)
    qkv_w = np.concatenate([w[f"{p}self_attn.{n}_proj.weight"] for n in "qkv"], axis=0).T
    (qkv,) = g.node("MatMul", [h, g.init(f"{p}self_attn.qkv_proj.weight_T", qkv_w)], f"/layers.{i}/attn/qkv_proj")
    if f"{p}self_attn.q_proj.bias" in w:  # qwen2
        qkv_b = np.concatenate([w[f"{p}self_attn.{n}_proj.bias"] for n in "qkv"])
        (qkv,) = g.node("Add", [qkv, g.init(f"{p}self_attn.qkv_proj.bias", qkv_b)], f"/layers.{i}/attn/qkv_bias")
    past_k, past_v = f"past_key_values.{i}.key", f"past_key_values.{i}.value"
    attn_in = [qkv, "", "", past_k, past_v, "seqlens_k", "total_seq_len", "cos_cache", "sin_cache"]
    (attn, _, _) = g.node("GroupQueryAttention", attn_in, f"/layers.{i}/attn/gqa", 3, _MS, **attrs)
    g.nodes[-1].output[1:] = [f"present.{i}.key", f"present.{i}.value"]
    o_w = g.init(f"{p}self_attn.o_proj.weight_T", w[f"{p}self_attn.o_proj.weight"].T)
    (o,) = g.node("MatMul", [attn, o_w], f"/layers.{i}/attn/o_proj")
    gamma2 = g.init(f"{p}post_attention_layernorm.weight", w[f"{p}post_attention_layernorm.weight"])
    h2, residual = g.skip_norm(o, residual, gamma2, f"/layers.{i}/post_norm", eps)
    gu_w = np.concatenate([w[f"{p}mlp.gate_proj.weight"], w[f"{p}mlp.up_proj.weight"]], axis=0).T
    (gu,) = g.node("MatMul", [h2, g.init(f"{p}mlp.gate_up_proj.weight_T", gu_w)], f"/layers.{i}/mlp/gate_up_proj")
    gate, up = g.node("Split", [gu, "mlp_split"], f"/layers.{i}/mlp/split", 2, axis=-1)
    (sig,) = g.node("Sigmoid", [gate], f"/layers.{i}/mlp/sigmoid")
    (silu,) = g.node("Mul", [gate, sig], f"/layers.{i}/mlp/silu")
    (act,) = g.node("Mul", [silu, up], f"/layers.{i}/mlp/act")
    down_w = g.init(f"{p}mlp.down_proj.weight_T", w[f"{p}mlp.down_proj.weight"].T)
    (down,) = g.node("MatMul", [act, down_w], f"/layers.{i}/mlp/down_proj")
    return down, residual


def _embedding(g: _Graph, w: dict, tied: bool) -> tuple[str, str]:
    """(embedded input ``[B, S, H]``, the LM head's ``[H, vocab]`` weight). A tied table is stored once,
    as the head's weight, which the embedding reads along axis 1; an untied one (e.g. a GGUF with its own
    ``output.weight``) keeps both tables."""
    table = w["model.embed_tokens.weight"]
    head = g.init("lm_head.weight_T", np.ascontiguousarray((table if tied else w["lm_head.weight"]).T))
    if not tied:
        rows = g.init("model.embed_tokens.weight", table)
        return g.node("Gather", [rows, "input_ids"], "/embed_tokens/Gather", axis=0)[0], head
    (cols,) = g.node("Gather", [head, "input_ids"], "/embed_tokens/Gather", axis=1)  # [H, B, S]
    return g.node("Transpose", [cols], "/embed_tokens/Transpose", perm=[1, 2, 0])[0], head


def build_gqa_onnx(hf_dir: Path, out_path: Path, context_length: int | None = None) -> Path:
    """Write the fused-attention fp32 decoder for the HF llama folder ``hf_dir`` to ``out_path``.

    Args:
        hf_dir: an HF llama folder (``config.json``, ``model.safetensors``).
        out_path: the ``.onnx`` file to write (one file).
        context_length: rotary table length (default: the model's ``max_position_embeddings``).

    Returns:
        ``out_path``.

    Raises:
        InputError: the folder is incomplete.
    """
    onnx = require("onnx", "convert", "writing the ONNX graph")
    st = require("safetensors.numpy", "convert", "reading model.safetensors")
    from onnx import TensorProto, helper

    hf_dir, out_path = Path(hf_dir), Path(out_path)
    config = read_config(hf_dir)
    shape = decoder_shape(config)
    weights_path = hf_dir / "model.safetensors"
    if not weights_path.is_file():
        raise InputError(f"{weights_path}: missing; expected the folder's weights")
    w = st.load_file(str(weights_path))
    g = _Graph(onnx)
    eps = float(config["rms_norm_eps"])
    heads = config["num_attention_heads"]
    cos, sin = rotary_tables(config, context_length or shape.context_length)
    g.init("cos_cache", cos)
    g.init("sin_cache", sin)
    g.init("mlp_split", np.array([config["intermediate_size"]] * 2, np.int64))
    g.init("one", np.array(1, np.int64))
    g.init("axis1", np.array([1], np.int64))
    # positions and lengths from the mask, as onnxruntime-genai's graphs do
    (mask_sum,) = g.node("ReduceSum", ["attention_mask", "axis1"], "/mask/sum", keepdims=0)
    (last,) = g.node("Sub", [mask_sum, "one"], "/mask/last")
    g.nodes.append(helper.make_node("Cast", [last], ["seqlens_k"], name="/mask/seqlens_k", to=TensorProto.INT32))
    (mask_shape,) = g.node("Shape", ["attention_mask"], "/mask/shape")
    (total,) = g.node("Gather", [mask_shape, "one"], "/mask/total", axis=0)
    g.nodes.append(helper.make_node("Cast", [total], ["total_seq_len"], name="/mask/total_i32", to=TensorProto.INT32))
    x, head = _embedding(g, w, bool(config.get("tie_word_embeddings", "lm_head.weight" not in w)))
    attrs = {
        "num_heads": heads,
        "kv_num_heads": shape.num_kv_heads,
        "do_rotary": 1,
        "rotary_interleaved": 0,
        "scale": float(shape.head_dim**-0.5),
    }
    residual = None
    for i in range(shape.num_layers):
        x, residual = _layer(g, w, i, x, residual, attrs, eps)
    if residual is None:
        raise ConversionError(f"num_hidden_layers = {shape.num_layers}; expected at least 1 decoder layer")
    gamma = g.init("model.norm.weight", w["model.norm.weight"])
    h, _ = g.skip_norm(x, residual, gamma, "/norm", eps, keep_sum=False)
    g.nodes.append(helper.make_node("MatMul", [h, head], ["logits"], name="/lm_head/MatMul"))
    model = _model(helper, TensorProto, g, shape)
    helper.set_model_props(model, {KV_CACHE_KEY: KV_SHARED_BUFFER})
    out_path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(out_path))
    return out_path


def _model(helper, tp, g: _Graph, shape):
    kv = [shape.num_kv_heads, shape.head_dim]
    inputs = [
        helper.make_tensor_value_info("input_ids", tp.INT64, ["batch", "seq"]),
        helper.make_tensor_value_info("attention_mask", tp.INT64, ["batch", "total_seq"]),
    ]
    outputs = [helper.make_tensor_value_info("logits", tp.FLOAT, ["batch", "seq", shape.vocab_size])]
    for i in range(shape.num_layers):
        for kind in ("key", "value"):
            inputs.append(
                helper.make_tensor_value_info(
                    f"past_key_values.{i}.{kind}", tp.FLOAT, ["batch", kv[0], "capacity", kv[1]]
                )
            )
            outputs.append(
                helper.make_tensor_value_info(f"present.{i}.{kind}", tp.FLOAT, ["batch", kv[0], "capacity", kv[1]])
            )
    graph = helper.make_graph(g.nodes, "llama_gqa", inputs, outputs, g.inits)
    opsets = [helper.make_opsetid("", OPSET), helper.make_opsetid(_MS, 1)]
    model = helper.make_model(graph, opset_imports=opsets, producer_name="edge-deploy")
    model.ir_version = IR_VERSION  # onnx's newest (14) is too new for onnxruntime-web 1.30 (at most 13)
    return model
