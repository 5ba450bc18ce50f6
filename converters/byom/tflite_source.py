"""A ``.tflite`` model as the source of ``convert model``: float CNNs within the project's TFLite -> ONNX
translator (``converters.tflite.frontend``: the ops MediaPipe's BlazeFace uses).

The fp32 ONNX model is the translator's output (same input and output names and shapes; NHWC in, as the
TFLite model takes it); the source's outputs on the user's data come from the ``.tflite`` itself on LiteRT
(``edge.runtime``), so the fp32 check compares the translation with the original. A TFLite model has fixed
shapes: ``--input`` may only repeat them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from converters.byom.execute import run_model
from converters.byom.source import SourceModel, TensorSpec
from edge.digest import file_sha256
from edge.errors import InferenceError, InputError

#: The TFLite flatbuffer's file identifier, at bytes 4..8.
TFLITE_MAGIC = b"TFL3"


@dataclass(frozen=True)
class TfliteFrontend:
    """A ``.tflite`` source, translated to ONNX and run on LiteRT."""

    path: Path

    def write_fp32(self, inputs: Sequence[TensorSpec], out: Path) -> Path:
        """Translate the model to ONNX at ``out`` (its shapes are the model's: ``--input`` was checked
        against them).

        Raises:
            ConversionError: an op the translator does not handle (all named, with the supported ones).
        """
        from converters.tflite.frontend import tflite_to_onnx

        return tflite_to_onnx(self.path, out)

    def run(self, batches: Sequence[Mapping[str, np.ndarray]], threads: int) -> tuple[list[str], list[np.ndarray]]:
        """The ``.tflite`` model's outputs on LiteRT on every batch."""
        return run_model(self.path, batches, threads)


def _shape(dims: tuple) -> tuple[int | str, ...]:
    """A LiteRT input's shape as the other sources give it: an int per fixed dimension, a name per dynamic one."""
    return tuple("N" if d is None else d for d in dims)


def is_tflite(head: bytes) -> bool:
    """True for the first 8 bytes of a TFLite flatbuffer."""
    return len(head) >= 8 and head[4:8] == TFLITE_MAGIC


def read_tflite(path: Path) -> tuple[SourceModel, TfliteFrontend]:
    """Load a ``.tflite`` model on LiteRT and describe its inputs and outputs.

    Raises:
        InputError: LiteRT cannot load it (a damaged file; naming it), or it has an input that is not float32.
        MissingDependencyError: ai-edge-litert is not installed.
    """
    from edge.runtime import open_model

    path = Path(path)
    try:
        model = open_model(path, threads=1, backend="litert")
    except InferenceError as exc:  # a damaged file is bad input, as a corrupt .onnx is
        raise InputError(str(exc)) from exc
    with model:
        specs = tuple(TensorSpec(s.name, np.dtype(s.dtype), _shape(s.shape)) for s in model.inputs)
        outputs = tuple(o.name for o in model.outputs)
    bad = [s for s in specs if s.dtype != np.float32]
    if bad:
        raise InputError(
            f"{path}: input {bad[0].name!r} is {bad[0].dtype}; a .tflite source must be a float32 model (a quantized "
            ".tflite is already converted: convert its float original)"
        )
    return SourceModel(path, file_sha256(path), specs, outputs, "tflite"), TfliteFrontend(path)
