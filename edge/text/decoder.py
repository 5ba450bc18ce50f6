"""Run an exported decoder-with-KV-cache ONNX graph with onnxruntime (numpy in, numpy out).

The cache layout is read from the graph's own inputs (``past_key_values.{i}.key`` with shape
``[batch, kv_heads, past_seq, head_dim]``), so the runner needs no side file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edge.errors import InferenceError, InputError, require

_PAST = re.compile(r"^past_key_values\.(\d+)\.(key|value)$")


@dataclass(frozen=True)
class CacheLayout:
    """How many layers the cache has and the static part of each tensor's shape."""

    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype: np.dtype


class OnnxDecoder:
    """One onnxruntime session over a decoder graph; call :meth:`forward` once per step.

    Args:
        model_path: the ``.onnx`` file (its ``.data`` file, if any, next to it).
        threads: intra-op threads (the profile's ``runtime.threads``).

    Raises:
        InputError: the file is missing.
        InferenceError: onnxruntime cannot load it, or it is not a decoder with a KV cache.
    """

    def __init__(self, model_path: Path, threads: int = 1) -> None:
        ort = require("onnxruntime", "device", "running the language model")
        self.path = Path(model_path)
        if not self.path.is_file():
            raise InputError(f"{self.path}: missing; expected the language model's ONNX file")
        if threads < 1:
            raise InputError(f"threads = {threads}; expected at least 1")
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        try:
            self._session = ort.InferenceSession(str(self.path), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own untyped Fail/InvalidGraph errors
            raise InferenceError(f"{self.path}: onnxruntime cannot load the model ({exc})") from exc
        self.layout = self._read_layout()
        self._outputs = [o.name for o in self._session.get_outputs()]
        # graphs with fused rotary attention (onnxruntime-genai's GroupQueryAttention) take no position_ids
        self._wants_positions = any(i.name == "position_ids" for i in self._session.get_inputs())

    def _read_layout(self) -> CacheLayout:
        pasts = {}
        for node in self._session.get_inputs():
            match = _PAST.match(node.name)
            if match:
                pasts[(int(match.group(1)), match.group(2))] = node
        names = {n.name for n in self._session.get_inputs()}
        needed = {"input_ids", "attention_mask"}
        if not pasts or not needed <= names:
            raise InferenceError(
                f"{self.path}: inputs {sorted(names)[:6]}...; expected input_ids, attention_mask, "
                "(position_ids) and past_key_values.N.key/value"
            )
        layers = 1 + max(i for i, _ in pasts)
        first = pasts[(0, "key")]
        heads, head_dim = first.shape[1], first.shape[3]
        if not isinstance(heads, int) or not isinstance(head_dim, int):
            raise InferenceError(f"{self.path}: {first.name} has shape {first.shape}; expected static heads/dim")
        dtype = np.float16 if first.type == "tensor(float16)" else np.float32
        return CacheLayout(layers, heads, head_dim, np.dtype(dtype))

    def empty_cache(self, batch: int = 1) -> list[np.ndarray]:
        """A zero-length cache: ``[key_0, value_0, key_1, ...]``."""
        lay = self.layout
        shape = (batch, lay.num_kv_heads, 0, lay.head_dim)
        return [np.zeros(shape, dtype=lay.dtype) for _ in range(2 * lay.num_layers)]

    def forward(
        self,
        input_ids: np.ndarray,
        attention_mask: np.ndarray,
        position_ids: np.ndarray,
        cache: list[np.ndarray],
    ) -> tuple[np.ndarray, list[np.ndarray]]:
        """One step: logits ``[batch, seq, vocab]`` and the updated cache.

        ``position_ids`` is ignored by graphs that compute rotary positions themselves.

        Raises:
            InferenceError: onnxruntime failed to run the step.
        """
        feeds = {
            "input_ids": input_ids.astype(np.int64, copy=False),
            "attention_mask": attention_mask.astype(np.int64, copy=False),
        }
        if self._wants_positions:
            feeds["position_ids"] = position_ids.astype(np.int64, copy=False)
        for i in range(self.layout.num_layers):
            feeds[f"past_key_values.{i}.key"] = cache[2 * i]
            feeds[f"past_key_values.{i}.value"] = cache[2 * i + 1]
        try:
            outputs = self._session.run(self._outputs, feeds)
        except Exception as exc:  # onnxruntime's own error types are not importable portably
            raise InferenceError(f"{self.path}: inference failed ({exc})") from exc
        return outputs[0], outputs[1:]
