"""Run a litert-torch decoder (``prefill_N`` + ``decode`` signatures, external KV cache) with LiteRT.

The ``.tflite`` file comes from ``converters/slm/tflite.py``. Its signatures (names from litert-torch's
generative converter)::

    prefill_N  tokens int32 [1, N], input_pos int32 [N], kv_cache_k_i / kv_cache_v_i  -> logits, kv_cache_*
    decode     tokens int32 [1, 1], input_pos int32 [1], kv_cache_k_i / kv_cache_v_i  -> logits, kv_cache_*

The cache is a fixed buffer of ``kv_cache_max_len`` positions per layer (``[1, T, kv_heads, head_dim]``):
the model writes the new keys/values at ``input_pos`` and masks every later position itself, so the
caller never grows it. :class:`LiteRtDecoder` has the same ``empty_cache`` / ``forward`` interface as
:class:`edge.text.decoder.OnnxDecoder` and can stand in for it inside ``TextGenerator`` (positions must
stay below :attr:`LiteRtDecoder.context_length`: pass it as ``max_context``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edge.errors import InferenceError, InputError
from edge.runtime.litert_backend import import_interpreter

DECODE = "decode"
_PREFILL = re.compile(r"^prefill_(\d+)$")
_CACHE = re.compile(r"^kv_cache_([kv])_(\d+)$")
TOKENS = "tokens"
INPUT_POS = "input_pos"
LOGITS = "logits"


@dataclass(frozen=True)
class LiteRtCacheLayout:
    """The fixed KV buffer of a litert-torch decoder.

    Attributes:
        num_layers: decoder layers (one key and one value buffer each).
        shape: the shape of one buffer, ``(1, max_len, kv_heads, head_dim)``.
        dtype: its element type.
    """

    num_layers: int
    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def max_len(self) -> int:
        """Positions the buffer holds (the model's context)."""
        return self.shape[1]


def cache_names(layers: int) -> list[str]:
    """Signature names of the cache, in the ``[key_0, value_0, key_1, ...]`` order of the cache list."""
    return [f"kv_cache_{kind}_{i}" for i in range(layers) for kind in ("k", "v")]


class LiteRtDecoder:
    """A LiteRT interpreter over a litert-torch decoder; call :meth:`forward` once per step.

    Args:
        model_path: the ``.tflite`` file.
        threads: interpreter threads (the profile's ``runtime.threads``).

    Raises:
        InputError: the file is missing, or ``threads`` is below 1.
        InferenceError: LiteRT cannot load it, or it lacks the prefill/decode signatures or KV cache.
        MissingDependencyError: ai-edge-litert is not installed.
    """

    def __init__(self, model_path: Path, threads: int = 1) -> None:
        self.path = Path(model_path)
        if not self.path.is_file():
            raise InputError(f"{self.path}: missing; expected the language model's .tflite file")
        if threads < 1:
            raise InputError(f"threads = {threads}; expected at least 1")
        interpreter_cls = import_interpreter()
        try:
            self._interp = interpreter_cls(model_path=str(self.path), num_threads=threads)
            signatures = self._interp.get_signature_list()
        except (ValueError, RuntimeError) as exc:
            raise InferenceError(f"{self.path}: LiteRT cannot load the model ({exc})") from exc
        prefill = {int(m.group(1)): name for name in signatures if (m := _PREFILL.match(name))}
        if DECODE not in signatures or not prefill:
            raise InferenceError(
                f"{self.path}: signatures {sorted(signatures)}; expected 'decode' and at least one 'prefill_N'"
            )
        self._decode = self._interp.get_signature_runner(DECODE)
        self._prefill = {n: self._interp.get_signature_runner(name) for n, name in sorted(prefill.items())}
        self.prefill_lengths = tuple(sorted(prefill))
        self.layout = self._read_layout(signatures[DECODE]["inputs"])
        self._names = cache_names(self.layout.num_layers)

    @property
    def context_length(self) -> int:
        """Positions the KV buffer holds: prompt plus generated tokens must stay below it."""
        return self.layout.max_len

    def _read_layout(self, inputs: list[str]) -> LiteRtCacheLayout:
        layers = {int(m.group(2)) for name in inputs if (m := _CACHE.match(name))}
        needed = {TOKENS, INPUT_POS}
        if not layers or not needed <= set(inputs) or layers != set(range(len(layers))):
            raise InferenceError(
                f"{self.path}: decode inputs {sorted(inputs)[:6]}...; expected tokens, input_pos and "
                "kv_cache_k_N / kv_cache_v_N for N = 0, 1, ..."
            )
        detail = self._decode.get_input_details()["kv_cache_k_0"]
        shape = tuple(int(d) for d in detail["shape"])
        if len(shape) != 4 or shape[0] != 1:
            raise InferenceError(f"{self.path}: kv_cache_k_0 has shape {shape}; expected [1, T, kv_heads, head_dim]")
        return LiteRtCacheLayout(len(layers), shape, np.dtype(detail["dtype"]))

    def close(self) -> None:
        """Release the interpreter."""
        self._interp = None
        self._decode = None
        self._prefill = {}

    def empty_cache(self, batch: int = 1) -> list[np.ndarray]:
        """A zeroed KV buffer: ``[key_0, value_0, key_1, ...]``.

        Raises:
            InputError: ``batch`` is not 1 (the converted signatures take one sequence).
        """
        if batch != 1:
            raise InputError(f"batch = {batch}; expected 1 (the TFLite decoder takes one sequence)")
        lay = self.layout
        return [np.zeros(lay.shape, dtype=lay.dtype) for _ in range(2 * lay.num_layers)]

    def forward(
        self,
        input_ids: np.ndarray,
        attention_mask: np.ndarray,
        position_ids: np.ndarray,
        cache: list[np.ndarray],
    ) -> tuple[np.ndarray, list[np.ndarray]]:
        """Feed ``input_ids`` at ``position_ids``; logits ``[1, 1, vocab]`` of the **last** token and the cache.

        A prompt runs through the largest prefill signature in chunks (the last chunk zero-padded: the
        padding's keys land in positions that later steps overwrite before anything attends to them);
        a chunk that would run past the buffer goes token by token through ``decode``.

        Raises:
            InputError: batch is not 1, positions are not consecutive, the mask has padding, or a position
                is outside the KV buffer.
            InferenceError: the interpreter is closed or LiteRT failed.
        """
        ids, pos = self._check(input_ids, attention_mask, position_ids, cache)
        logits, state = self._run(ids, pos, dict(zip(self._names, cache, strict=True)), keep_all=False)
        return logits, [state[name] for name in self._names]

    def sequence_logits(self, token_ids: list[int]) -> np.ndarray:
        """Logits ``[seq, vocab]`` at every position of ``token_ids`` run from an empty cache (for perplexity).

        Raises:
            InputError: empty, or longer than the KV buffer.
            InferenceError: the interpreter is closed or LiteRT failed.
        """
        n = len(token_ids)
        if n < 1:
            raise InputError("token_ids is empty; expected at least one token")
        feeds = (np.array([token_ids]), np.ones((1, n), np.int64), np.arange(n)[None], self.empty_cache())
        ids, pos = self._check(*feeds)
        logits, _ = self._run(ids, pos, dict(zip(self._names, feeds[3], strict=True)), keep_all=True)
        return logits[0]

    def _run(self, ids: np.ndarray, pos: np.ndarray, state: dict[str, np.ndarray], keep_all: bool):
        chunk = self.prefill_lengths[-1]
        pieces = []
        start = 0
        while start < len(ids):
            n = min(chunk, len(ids) - start)
            if n > 1 and pos[start] + chunk <= self.context_length:
                logits, state = self._step(self._prefill[chunk], ids[start : start + n], pos[start], chunk, state)
                pieces.append(logits[:, :n] if keep_all else logits[:, n - 1 : n])
                start += n
            else:
                logits, state = self._step(self._decode, ids[start : start + 1], pos[start], 1, state)
                pieces.append(logits)
                start += 1
        return (np.concatenate(pieces, axis=1) if keep_all else pieces[-1]), state

    def _check(self, input_ids, attention_mask, position_ids, cache) -> tuple[np.ndarray, np.ndarray]:
        if self._interp is None:
            raise InferenceError(f"{self.path}: the decoder is closed")
        if input_ids.ndim != 2 or input_ids.shape[0] != 1 or input_ids.shape[1] < 1:
            raise InputError(f"input_ids has shape {input_ids.shape}; expected [1, seq] with seq >= 1")
        if not np.all(attention_mask == 1):
            raise InputError("attention_mask has padding; expected all ones (one unpadded sequence)")
        if len(cache) != 2 * self.layout.num_layers:
            raise InputError(f"cache has {len(cache)} tensors; expected {2 * self.layout.num_layers}")
        ids = input_ids[0].astype(np.int32)
        pos = np.asarray(position_ids).reshape(-1).astype(np.int32)
        if pos.shape != ids.shape or np.any(np.diff(pos) != 1):
            raise InputError(f"position_ids {pos.tolist()[:8]}...; expected {len(ids)} consecutive positions")
        if pos[0] < 0 or pos[-1] >= self.context_length:
            raise InputError(
                f"positions {int(pos[0])}..{int(pos[-1])}; expected below the KV cache length "
                f"{self.context_length} of {self.path.name} (prompt plus new tokens too long)"
            )
        return ids, pos

    def _step(self, runner, ids: np.ndarray, first: int, length: int, state: dict[str, np.ndarray]):
        tokens = np.zeros((1, length), np.int32)
        tokens[0, : len(ids)] = ids
        feeds = {TOKENS: tokens, INPUT_POS: np.arange(first, first + length, dtype=np.int32), **state}
        try:
            out = runner(**feeds)
        except (ValueError, RuntimeError) as exc:
            raise InferenceError(f"{self.path}: inference failed ({exc})") from exc
        return out[LOGITS], {name: out[name] for name in self._names}
