"""Run a model file with onnxruntime over batches of feeds (the source, the fp32 copy, the candidate)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from edge.errors import InferenceError
from edge.runtime.ort_session import Optimization, build_session


def join_batches(parts: Sequence[Sequence[np.ndarray]]) -> list[np.ndarray]:
    """Each output's batches concatenated on axis 0 (stacked when the output is a scalar)."""
    return [np.concatenate(p, axis=0) if p[0].ndim else np.stack(p) for p in parts]


def run_model(
    path: Path, batches: Sequence[Mapping[str, np.ndarray]], threads: int, optimization: Optimization
) -> tuple[list[str], list[np.ndarray]]:
    """Run ``path`` on every batch; (output names, each output's batches concatenated on axis 0).

    Raises:
        InferenceError: onnxruntime cannot load or run the model (naming the file).
    """
    session = build_session(path, threads, what=f"the model {path.name}", optimization=optimization)
    names = [o.name for o in session.get_outputs()]
    parts: list[list[np.ndarray]] = [[] for _ in names]
    for i, feed in enumerate(batches):
        try:
            outs = session.run(None, dict(feed))
        except Exception as exc:  # onnxruntime's run errors share no narrower base
            raise InferenceError(f"{path}: onnxruntime failed on batch {i} ({exc})") from exc
        for part, out in zip(parts, outs, strict=True):
            part.append(np.asarray(out))
    return names, join_batches(parts)
