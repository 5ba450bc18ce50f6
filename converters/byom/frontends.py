"""Source formats of ``convert model``: each gives a ``Frontend`` that writes the fp32 ONNX model with fixed
input shapes and runs the source on the user's data.

``read_model`` tells the format by the file's first bytes, never its name: a zip archive is a
``torch.export`` program (``converters.byom.pt2``), a TFLite flatbuffer (``TFL3`` at byte 4) a ``.tflite``
model (``converters.byom.tflite_source``), anything else is read as ONNX (``converters.byom.source``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from converters.byom.source import SourceModel, TensorSpec, read_source, write_fixed_copy
from edge.errors import InputError


class Frontend(Protocol):
    """What the build needs from a source format."""

    def write_fp32(self, inputs: Sequence[TensorSpec], out: Path) -> Path:
        """Write the fp32 ONNX model with the inputs' shapes fixed to ``inputs``; return ``out``."""
        ...

    def run(self, batches: Sequence[Mapping[str, np.ndarray]], threads: int) -> tuple[list[str], list[np.ndarray]]:
        """The source's outputs on every batch: (output names, each output's batches joined on axis 0)."""
        ...


@dataclass(frozen=True)
class OnnxFrontend:
    """An ONNX source: the fp32 model is a copy with fixed shapes; the source runs on onnxruntime."""

    path: Path
    proto: Any

    def write_fp32(self, inputs: Sequence[TensorSpec], out: Path) -> Path:
        return write_fixed_copy(self.proto, inputs, out)

    def run(self, batches: Sequence[Mapping[str, np.ndarray]], threads: int) -> tuple[list[str], list[np.ndarray]]:
        from converters.byom.execute import run_model
        from edge.runtime.ort_session import Optimization

        return run_model(self.path, batches, threads, Optimization.ALL)


#: The first bytes of a zip archive: how torch.export.save writes a .pt2 (ONNX is a protobuf, never this).
ZIP_MAGIC = b"PK\x03\x04"


def read_model(path: Path) -> tuple[SourceModel, Frontend]:
    """Read and check the user's model: an ONNX file, a ``torch.export`` program or a ``.tflite`` (told apart
    by content).

    Raises:
        InputError: missing file, unreadable or corrupt model, no tensor inputs.
        MissingDependencyError: a ``.pt2`` without torch installed.
    """
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: the model file does not exist")
    if path.is_dir():
        raise InputError(f"{path}: is a folder; expected a model file (ONNX, a torch.export .pt2 or a float .tflite)")
    try:
        with path.open("rb") as fh:
            head = fh.read(8)
    except OSError as exc:
        raise InputError(f"{path}: cannot read the model file ({exc.strerror or exc})") from None
    if head[:4] == ZIP_MAGIC:
        from converters.byom.pt2 import read_pt2

        return read_pt2(path)
    from converters.byom.tflite_source import is_tflite, read_tflite

    if is_tflite(head):
        return read_tflite(path)
    source, proto = read_source(path)
    return source, OnnxFrontend(path, proto)
