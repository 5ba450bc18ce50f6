"""Perplexity of a decoder ONNX graph on a text, and its logits per window (what the build's gate reads,
``divergence``).

The text is cut into non-overlapping windows of ``window`` tokens; each window runs as one prefill with
an empty cache and every token after the first is scored. Perplexity is ``exp(mean negative log
likelihood)`` over all scored tokens. The shipped text is the U.S. Constitution
(``data/us_constitution.txt``, a U.S. government work: public domain).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from converters.paths import DATA_DIR
from edge.errors import InputError
from edge.progress import ProgressFn, silent, tracked
from edge.text.decoder import OnnxDecoder

#: The evaluation text kept in the repository (data/us_constitution.SOURCE.md says where it came from).
DEFAULT_TEXT = DATA_DIR / "us_constitution.txt"


@dataclass(frozen=True)
class PerplexityResult:
    perplexity: float
    tokens_scored: int
    windows: int


def text_windows(token_ids: list[int], window: int, max_tokens: int) -> list[list[int]]:
    """Non-overlapping windows of ``window`` tokens from the first ``max_tokens`` ids (last may be shorter).

    Raises:
        InputError: fewer than two tokens or a window below 2.
    """
    if window < 2:
        raise InputError(f"window = {window}; expected at least 2 tokens")
    ids = token_ids[:max_tokens]
    if len(ids) < 2:
        raise InputError(f"the evaluation text has {len(ids)} tokens; expected at least 2")
    return [ids[i : i + window] for i in range(0, len(ids), window) if len(ids[i : i + window]) >= 2]


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits.astype(np.float64) - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def onnx_window_logits(model_path: Path, threads: int = 2) -> Callable[[list[int]], np.ndarray]:
    """A function from one window of token ids to the ONNX decoder's logits at the positions that predict
    ``ids[1:]``, shape (len(ids) - 1, vocab): one prefill with an empty cache (one session for all windows)."""
    decoder = OnnxDecoder(model_path, threads)

    def run(ids: list[int]) -> np.ndarray:
        n = len(ids)
        logits, _ = decoder.forward(
            np.array([ids]), np.ones((1, n), np.int64), np.arange(n)[None], decoder.empty_cache()
        )
        return np.asarray(logits[0, :-1])

    return run


def perplexity(
    model_path: Path, windows: list[list[int]], threads: int = 2, progress: ProgressFn = silent, label: str = "windows"
) -> PerplexityResult:
    """Perplexity of the model at ``model_path`` over token windows (see :func:`text_windows`); ``progress``
    counts the windows done under ``label``."""
    window_logits = onnx_window_logits(model_path, threads)
    nll, count = 0.0, 0
    for ids in tracked(progress, windows, label):
        n = len(ids)
        logp = _log_softmax(window_logits(ids))
        nll -= float(logp[np.arange(n - 1), ids[1:]].sum())
        count += n - 1
    return PerplexityResult(math.exp(nll / count), count, len(windows))
