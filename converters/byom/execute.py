"""Run a model file over batches of feeds (the source, the fp32 copy, the candidate): an ONNX on onnxruntime,
a ``.tflite`` on LiteRT, through ``edge.runtime`` (the format is read from the file's bytes)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from edge.errors import InferenceError
from edge.progress import ProgressFn, silent, tracked
from edge.runtime import open_model
from edge.runtime.base import LoadOptions
from edge.runtime.ort_session import Optimization


def join_batches(parts: Sequence[Sequence[np.ndarray]]) -> list[np.ndarray]:
    """Each output's batches concatenated on axis 0 (stacked when the output is a scalar)."""
    return [np.concatenate(p, axis=0) if p[0].ndim else np.stack(p) for p in parts]


def run_model(
    path: Path,
    batches: Sequence[Mapping[str, np.ndarray]],
    threads: int,
    optimization: Optimization = Optimization.ALL,
    progress: ProgressFn = silent,
    label: str = "batches",
) -> tuple[list[str], list[np.ndarray]]:
    """Run ``path`` on every batch; (output names, each output's batches concatenated on axis 0).

    Args:
        path: an ONNX (onnxruntime) or a ``.tflite`` (LiteRT) file.
        batches: the feeds, one dict of inputs per batch.
        threads: intra-op threads.
        optimization: onnxruntime's graph optimisation (the gate runs its candidate unfused); a ``.tflite``
            takes only the default.
        progress: counts the batches done under ``label`` (a bar on a terminal).

    Raises:
        InferenceError: the runtime cannot load or run the model (naming the file and the batch).
    """
    path = Path(path)
    with open_model(path, threads=threads, options=LoadOptions(optimization, what=f"the model {path.name}")) as model:
        names = [o.name for o in model.outputs]
        parts: list[list[np.ndarray]] = [[] for _ in names]
        for i, feed in enumerate(tracked(progress, batches, label)):
            try:
                outs = model.run(dict(feed))
            except InferenceError as exc:
                raise InferenceError(f"{path}: batch {i}: {exc}") from exc
            for part, name in zip(parts, names, strict=True):
                part.append(np.asarray(outs[name]))
    return names, join_batches(parts)
