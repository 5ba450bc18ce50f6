"""Run an exported decoder-with-KV-cache ONNX graph with onnxruntime (numpy in, numpy out).

The cache layout is read from the graph's own inputs (``past_key_values.{i}.key`` with shape
``[batch, kv_heads, past_seq, head_dim]``), so the runner needs no side file. Two cache protocols, told
apart by the model's metadata (``edge_deploy.kv_cache``), never by its file name:

- growing (no metadata; the torch export): ``present = Concat(past, new)``, fed back as the next past;
- ``shared_buffer`` (fused ``GroupQueryAttention`` graphs): the past inputs are preallocated buffers of a
  fixed capacity, each ``present`` output is bound (IOBinding) to the very same memory, and the graph
  writes the new keys/values in place at the position the attention mask's length gives. Nothing is
  copied between steps; the buffers double (one copy) when a sequence outgrows them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edge.errors import InferenceError, InputError
from edge.runtime.ort_session import build_session, import_onnxruntime

_PAST = re.compile(r"^past_key_values\.(\d+)\.(key|value)$")

#: Model metadata key naming the cache protocol, and its value for a preallocated, shared buffer.
KV_CACHE_KEY = "edge_deploy.kv_cache"
KV_SHARED_BUFFER = "shared_buffer"
#: First capacity of a shared buffer (tokens); it doubles as needed.
INITIAL_CAPACITY = 256


@dataclass(frozen=True)
class CacheLayout:
    """How many layers the cache has and the static part of each tensor's shape."""

    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype: np.dtype


class SharedKvCache:
    """Preallocated key/value buffers ``[batch, kv_heads, capacity, head_dim]`` for a shared-buffer graph.

    Only the first ``length`` positions hold keys/values; the graph writes the next ones in place.
    """

    def __init__(self, ort, layout: CacheLayout, batch: int, capacity: int) -> None:
        self._ort, self.layout, self.batch = ort, layout, batch
        self.length = 0
        self.arrays: list[np.ndarray] = []
        self.values: list = []
        self.binding = None  # an IOBinding with these buffers bound (made by OnnxDecoder, reset on growth)
        self.session = None  # the session that binding belongs to
        self._allocate(capacity)

    @property
    def capacity(self) -> int:
        return self.arrays[0].shape[2]

    def _allocate(self, capacity: int) -> None:
        lay = self.layout
        shape = (self.batch, lay.num_kv_heads, capacity, lay.head_dim)
        old = self.arrays
        self.arrays = [np.zeros(shape, dtype=lay.dtype) for _ in range(2 * lay.num_layers)]
        for new, prev in zip(self.arrays, old, strict=False):
            new[:, :, : self.length] = prev[:, :, : self.length]
        # the OrtValues wrap the numpy memory: the graph writes straight into self.arrays
        self.values = [self._ort.OrtValue.ortvalue_from_numpy(a) for a in self.arrays]
        self.binding = None

    def reserve(self, total: int) -> None:
        """Make room for ``total`` positions (doubling the capacity: one copy of the filled part)."""
        if total > self.capacity:
            capacity = self.capacity
            while capacity < total:
                capacity *= 2
            self._allocate(capacity)


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
        ort = import_onnxruntime("running the language model")
        self.path = Path(model_path)
        if not self.path.is_file():
            raise InputError(f"{self.path}: missing; expected the language model's ONNX file")
        if threads < 1:
            raise InputError(f"threads = {threads}; expected at least 1")
        self._session = build_session(self.path, threads, purpose="running the language model")
        self.layout = self._read_layout()
        self._outputs = [o.name for o in self._session.get_outputs()]
        # graphs with fused rotary attention (onnxruntime-genai's GroupQueryAttention) take no position_ids
        self._wants_positions = any(i.name == "position_ids" for i in self._session.get_inputs())
        meta = self._session.get_modelmeta().custom_metadata_map
        self.shared_buffer = meta.get(KV_CACHE_KEY) == KV_SHARED_BUFFER
        self._ort = ort

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

    def empty_cache(self, batch: int = 1, capacity: int = INITIAL_CAPACITY) -> list[np.ndarray] | SharedKvCache:
        """A zero-length cache: ``[key_0, value_0, key_1, ...]``, or empty shared buffers of ``capacity``
        positions for a shared-buffer graph (they grow as needed)."""
        lay = self.layout
        if self.shared_buffer:
            return SharedKvCache(self._ort, lay, batch, capacity)
        shape = (batch, lay.num_kv_heads, 0, lay.head_dim)
        return [np.zeros(shape, dtype=lay.dtype) for _ in range(2 * lay.num_layers)]

    def forward(
        self,
        input_ids: np.ndarray,
        attention_mask: np.ndarray,
        position_ids: np.ndarray,
        cache: list[np.ndarray] | SharedKvCache,
    ) -> tuple[np.ndarray, list[np.ndarray] | SharedKvCache]:
        """One step: logits ``[batch, seq, vocab]`` and the updated cache.

        ``position_ids`` is ignored by graphs that compute rotary positions themselves.

        Raises:
            InferenceError: onnxruntime failed to run the step.
        """
        if isinstance(cache, SharedKvCache):
            return self._forward_shared(input_ids, attention_mask, cache)
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

    def _forward_shared(
        self, input_ids: np.ndarray, attention_mask: np.ndarray, cache: SharedKvCache
    ) -> tuple[np.ndarray, SharedKvCache]:
        total = attention_mask.shape[1]
        if total != cache.length + input_ids.shape[1]:
            raise InferenceError(
                f"{self.path}: attention mask covers {total} positions, the cache holds {cache.length} and "
                f"{input_ids.shape[1]} come in; expected their sum (left padding is not supported)"
            )
        cache.reserve(total)
        binding = cache.binding
        if binding is None or cache.session is not self._session:
            binding = self._session.io_binding()
            binding.bind_output("logits")  # the first bound output: get_outputs()[0]; rebound every step
            for i, value in enumerate(cache.values):
                past, present = _cache_names(i)
                binding.bind_ortvalue_input(past, value)
                binding.bind_ortvalue_output(present, value)
            cache.binding, cache.session = binding, self._session
        # locals keep the arrays alive until the run: the binding points at their memory
        ids = np.ascontiguousarray(input_ids, dtype=np.int64)
        mask = np.ascontiguousarray(attention_mask, dtype=np.int64)
        binding.bind_cpu_input("input_ids", ids)
        binding.bind_cpu_input("attention_mask", mask)
        binding.bind_output("logits")  # unallocated: onnxruntime sizes it for this step's sequence
        try:
            self._session.run_with_iobinding(binding)
        except Exception as exc:  # onnxruntime's own error types are not importable portably
            raise InferenceError(f"{self.path}: inference failed ({exc})") from exc
        cache.length = total
        return binding.get_outputs()[0].numpy(), cache


def _cache_names(index: int) -> tuple[str, str]:
    """Input and output names of flat cache entry ``index`` (key_0, value_0, key_1, ...)."""
    layer, kind = divmod(index, 2)
    kind_name = "value" if kind else "key"
    return f"past_key_values.{layer}.{kind_name}", f"present.{layer}.{kind_name}"
