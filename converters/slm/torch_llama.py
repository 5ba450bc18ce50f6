"""A minimal llama decoder in torch, written to export cleanly to ONNX with an explicit KV cache.

Numerically it follows ``transformers``' ``LlamaForCausalLM`` (fp32 RMSNorm, default rotary embedding
with the half-split layout, grouped-query attention, SiLU-gated MLP) and ``Qwen2ForCausalLM`` (the same
with q/k/v biases); parameter names match HF's so ``model.safetensors`` loads as is.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.eps))


def rotate_half_matrix(head_dim: int) -> torch.Tensor:
    """``R`` with ``x @ R == cat(-x[half:], x[:half])``: one MatMul instead of Slice/Neg/Concat (exact)."""
    half = head_dim // 2
    rot = torch.zeros(head_dim, head_dim)
    idx = torch.arange(half)
    rot[idx + half, idx] = -1.0
    rot[idx, idx + half] = 1.0
    return rot


class Attention(nn.Module):
    """Grouped-query attention laid out for a small graph: fused QKV, one rotary pass over the query and
    key heads together, and the query heads of each key/value head batched as ``[B, KV, group, S, D]``
    against an unsqueezed ``[B, KV, 1, T, D]`` cache, so K/V are never repeated."""

    def __init__(self, hidden: int, heads: int, kv_heads: int, head_dim: int, bias: bool = False) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.q_proj = nn.Linear(hidden, heads * head_dim, bias=bias)
        self.k_proj = nn.Linear(hidden, kv_heads * head_dim, bias=bias)
        self.v_proj = nn.Linear(hidden, kv_heads * head_dim, bias=bias)
        self.o_proj = nn.Linear(heads * head_dim, hidden, bias=False)

    def fuse(self) -> None:
        """One QKV projection instead of three (same numbers; fewer, larger MatMuls in the graph)."""
        parts = (self.q_proj, self.k_proj, self.v_proj)
        weight = torch.cat([p.weight for p in parts], dim=0)
        bias = parts[0].bias is not None
        self.qkv_proj = nn.Linear(weight.shape[1], weight.shape[0], bias=bias)
        self.qkv_proj.weight = nn.Parameter(weight.detach().clone())
        if bias:
            self.qkv_proj.bias = nn.Parameter(torch.cat([p.bias for p in parts]).detach().clone())
        del self.q_proj, self.k_proj, self.v_proj

    def forward(self, x, shape, rope, mask, past_k, past_v):
        batch, seq = shape
        cos, sin, rot = rope  # cos/sin [B, S, 1, D]
        heads, kv, dim = self.heads, self.kv_heads, self.head_dim
        qkv = self.qkv_proj(x).view(batch, seq, heads + 2 * kv, dim)
        qk, v = qkv[:, :, : heads + kv], qkv[:, :, heads + kv :]
        qk = qk * cos + torch.matmul(qk, rot) * sin
        q, k = qk[:, :, :heads], qk[:, :, heads:]
        k = torch.cat([past_k, k.transpose(1, 2)], dim=2)  # [B, KV, T, D]
        v = torch.cat([past_v, v.transpose(1, 2)], dim=2)
        q = q.view(batch, seq, kv, heads // kv, dim).permute(0, 2, 3, 1, 4)  # [B, KV, G, S, D]
        scores = torch.matmul(q, k[:, :, None].transpose(3, 4)) * (dim**-0.5)  # [B, KV, G, S, T]
        scores = torch.where(mask, scores, torch.finfo(scores.dtype).min)
        out = torch.matmul(F.softmax(scores, dim=-1), v[:, :, None])  # [B, KV, G, S, D]
        out = out.permute(0, 3, 1, 2, 4).reshape(batch, seq, heads * dim)
        return self.o_proj(out), k, v


class Mlp(nn.Module):
    def __init__(self, hidden: int, inner: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inner, bias=False)
        self.up_proj = nn.Linear(hidden, inner, bias=False)
        self.down_proj = nn.Linear(inner, hidden, bias=False)

    def fuse(self) -> None:
        """One gate+up projection instead of two."""
        weight = torch.cat([self.gate_proj.weight, self.up_proj.weight], dim=0)
        self.gate_up_proj = nn.Linear(weight.shape[1], weight.shape[0], bias=False)
        self.gate_up_proj.weight = nn.Parameter(weight.detach().clone())
        del self.gate_proj, self.up_proj

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class Block(nn.Module):
    def __init__(self, config: dict, head_dim: int) -> None:
        super().__init__()
        hidden, eps = config["hidden_size"], config["rms_norm_eps"]
        heads = config["num_attention_heads"]
        self.input_layernorm = RMSNorm(hidden, eps)
        bias = bool(config.get("attention_bias", False)) or config.get("model_type") == "qwen2"
        self.self_attn = Attention(hidden, heads, config.get("num_key_value_heads", heads), head_dim, bias)
        self.post_attention_layernorm = RMSNorm(hidden, eps)
        self.mlp = Mlp(hidden, config["intermediate_size"])

    def forward(self, x, shape, rope, mask, past_k, past_v):
        attn, k, v = self.self_attn(self.input_layernorm(x), shape, rope, mask, past_k, past_v)
        x = x + attn
        return x + self.mlp(self.post_attention_layernorm(x)), k, v


class _Body(nn.Module):
    def __init__(self, config: dict, head_dim: int) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config["vocab_size"], config["hidden_size"])
        self.layers = nn.ModuleList(Block(config, head_dim) for _ in range(config["num_hidden_layers"]))
        self.norm = RMSNorm(config["hidden_size"], config["rms_norm_eps"])


class LlamaDecoder(nn.Module):
    inv_freq: torch.Tensor  # a buffer: typed here, as register_buffer leaves it untyped

    """``forward(input_ids, attention_mask, position_ids, *past) -> (logits, *present)``.

    ``past`` is ``key_0, value_0, key_1, value_1, ...``, each ``[batch, kv_heads, past_seq, head_dim]``.
    Load the HF weights, then call :meth:`fuse_projections` before running.
    """

    def __init__(self, config: dict) -> None:
        super().__init__()
        heads = config["num_attention_heads"]
        self.head_dim = config.get("head_dim", config["hidden_size"] // heads)
        theta = config.get("rope_parameters", {}).get("rope_theta", config.get("rope_theta", 10000.0))
        inv_freq = 1.0 / (theta ** (torch.arange(0, self.head_dim, 2, dtype=torch.int64).float() / self.head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.register_buffer("rot", rotate_half_matrix(self.head_dim), persistent=False)
        self.model = _Body(config, self.head_dim)
        self.lm_head = nn.Linear(config["hidden_size"], config["vocab_size"], bias=False)

    def fuse_projections(self) -> LlamaDecoder:
        """Fuse Q/K/V and gate/up into single projections for export (call after loading weights)."""
        layer: Any
        for layer in self.model.layers:
            layer.self_attn.fuse()
            layer.mlp.fuse()
        return self

    def forward(self, input_ids, attention_mask, position_ids, *past):
        batch, seq = input_ids.shape[0], input_ids.shape[1]
        total = attention_mask.shape[1]
        freqs = position_ids[:, :, None].float() * self.inv_freq[None, None, :]
        emb = torch.cat((freqs, freqs), dim=-1)[:, :, None]  # [batch, seq, 1, head_dim]
        rope = (emb.cos(), emb.sin(), self.rot)
        q_pos = torch.arange(seq, dtype=torch.int64) + (total - seq)
        k_pos = torch.arange(total, dtype=torch.int64)
        causal = k_pos[None, :] <= q_pos[:, None]
        mask = causal[None, None, None] & (attention_mask[:, None, None, None, :] > 0)  # [B, 1, 1, S, T]
        x = self.model.embed_tokens(input_ids)
        present = []
        for i, layer in enumerate(self.model.layers):
            x, k, v = layer(x, (batch, seq), rope, mask, past[2 * i], past[2 * i + 1])
            present += [k, v]
        logits = self.lm_head(self.model.norm(x))
        return (logits, *present)
