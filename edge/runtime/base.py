"""What every runtime backend offers: tensor specs, a loaded Model, and the Backend that loads it.

A backend is one file in ``edge/runtime/`` (``onnxruntime_backend.py``, ``litert_backend.py``), looked up
by name in ``edge.runtime``. Models are context managers with an explicit ``close()``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from edge.errors import InferenceError, InputError

#: One dimension of a tensor: a size, a symbolic name (``"batch"``) or None for unknown.
Dim = int | str | None


class ModelFormat(enum.Enum):
    """The file formats we can run, told apart by their bytes (never by the file name)."""

    ONNX = "onnx"
    ORT = "ort"  # ONNX Runtime's own flatbuffer format (identifier "ORTM")
    TFLITE = "tflite"  # LiteRT / TensorFlow Lite flatbuffer (identifier "TFL3")

    @property
    def label(self) -> str:
        """How users name the format: ONNX, ORT, TFLite."""
        return {"onnx": "ONNX", "ort": "ORT", "tflite": "TFLite"}[self.value]


class Optimization(enum.Enum):
    """onnxruntime's graph optimisation level (``GraphOptimizationLevel``): ALL is onnxruntime's default."""

    BASIC = "ORT_ENABLE_BASIC"
    EXTENDED = "ORT_ENABLE_EXTENDED"
    ALL = "ORT_ENABLE_ALL"
    #: No fusion: a QDQ model runs as DequantizeLinear -> float op -> QuantizeLinear, which is what exact
    #: integer arithmetic gives up to float rounding, whatever integer kernels the host has (the accuracy
    #: gates use it; docs/quantization.md).
    NONE = "ORT_DISABLE_ALL"


@dataclass(frozen=True)
class LoadOptions:
    """How a backend loads a model, beyond its threads.

    ``optimization`` and ``precise_int8`` are onnxruntime's (``edge.runtime.ort_session.build_session``);
    LiteRT has no such knobs and refuses anything but the defaults rather than ignore them. ``what`` names
    the model in load errors (``"{path}: onnxruntime cannot load {what} (...)"``), ``purpose`` says what
    needs the runtime when it is missing (None: the backend's own wording).
    """

    optimization: Optimization = Optimization.ALL
    precise_int8: bool = True
    what: str = "the model"
    purpose: str | None = None
    #: The inputs change shape from call to call (MTCNN's image pyramid, a batch of however many faces):
    #: onnxruntime then runs without its memory arena and memory patterns, which otherwise keep a block
    #: for every shape seen (benchmarks/face_speed.py's peak-RSS rows, 12 photos, before and after: fp32
    #: pipeline 436.8 -> 271.7 MiB, INT8 372.6 -> 242.4 MiB). LiteRT's tensors have fixed shapes; it ignores this.
    varying_shapes: bool = False


@dataclass(frozen=True)
class TensorSpec:
    """Name, shape and element type of one model input or output.

    ``shape`` holds an int for every fixed dimension and a name or None for a dynamic one.
    ``quantization`` is ``(scale, zero_point)`` for a per-tensor quantized LiteRT tensor, else None:
    ``real = scale * (q.astype(np.int64) - zero_point)``.
    """

    name: str
    shape: tuple[Dim, ...]
    dtype: np.dtype
    quantization: tuple[float, int] | None = None

    @property
    def is_static(self) -> bool:
        """True when every dimension has a fixed size."""
        return all(isinstance(d, int) for d in self.shape)

    def shape_text(self) -> str:
        """The shape as users read it: ``(1, 3, 150, 150)``, dynamic dims by name or ``?``."""
        parts = [str(d) if isinstance(d, int) else (d or "?") for d in self.shape]
        return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"

    def describe(self) -> str:
        """``float32 (1, 3, 150, 150)``."""
        return f"{self.dtype.name} {self.shape_text()}"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        return {
            "name": self.name,
            "shape": list(self.shape),
            "dtype": self.dtype.name,
            "quantization": list(self.quantization) if self.quantization else None,
        }


@runtime_checkable
class Model(Protocol):
    """A loaded model, ready to run. Close it (or use ``with``) to free the runtime's memory."""

    backend: str
    path: Path
    threads: int
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Check ``feeds`` against ``inputs``, run once, return every output by name."""
        ...

    def prepare(self, feeds: Mapping[str, np.ndarray]) -> Callable[[], dict[str, np.ndarray]]:
        """Check ``feeds`` once and return a zero-argument call that runs them (for timing loops)."""
        ...

    def close(self) -> None:
        """Release the runtime session. Running a closed model raises InferenceError."""
        ...

    def __enter__(self) -> Model: ...

    def __exit__(self, *exc: object) -> None: ...


@runtime_checkable
class Backend(Protocol):
    """Loads model files of the formats it lists into Models."""

    name: str
    formats: frozenset[ModelFormat]

    def load(self, path: Path, threads: int, options: LoadOptions | None = None) -> Model:
        """Load ``path`` with ``threads`` intra-op threads (and ``options``; None: the defaults).

        Raises:
            InferenceError: if the runtime cannot load the file.
        """
        ...


def check_threads(threads: object) -> int:
    """Return ``threads`` if it is a whole number >= 1.

    Raises:
        InferenceError: otherwise, naming the value.
    """
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise InferenceError(f"threads = {threads!r}; expected a whole number >= 1")
    return threads


def _shape_fits(shape: tuple[int, ...], spec: TensorSpec) -> bool:
    if len(shape) != len(spec.shape):
        return False
    return all(not isinstance(want, int) or want == got for want, got in zip(spec.shape, shape, strict=True))


def first_batch(where: str, specs: tuple[TensorSpec, ...], arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Feeds from arrays of many samples by input name (e.g. an evaluation ``.npz``): each input's first rows,
    as many as its fixed batch (1 when the batch is dynamic), in its dtype.

    Raises:
        InputError: ``arrays`` lacks an input (naming ``where`` and the input).
    """
    feeds = {}
    for spec in specs:
        if spec.name not in arrays:
            raise InputError(f"{where}: no array {spec.name!r}; expected one per model input")
        batch = spec.shape[0] if spec.shape and isinstance(spec.shape[0], int) else 1
        feeds[spec.name] = np.ascontiguousarray(arrays[spec.name][:batch]).astype(spec.dtype, copy=False)
    return feeds


def check_feeds(where: str, specs: tuple[TensorSpec, ...], feeds: Mapping[str, np.ndarray]) -> None:
    """Check that ``feeds`` has every input of ``specs`` with a fitting dtype and shape.

    Args:
        where: the model's file name, for messages.
        specs: the model's inputs.
        feeds: input name -> array.

    Raises:
        InputError: naming the input and what was expected, for an unknown or missing input, a value that
            is not a numpy array, or a wrong dtype or shape.
    """
    if not isinstance(feeds, Mapping):
        raise InputError(f"{where}: inputs must be a mapping of input name -> numpy array, not {type(feeds).__name__}")
    names = [s.name for s in specs]
    for key in feeds:
        if key not in names:
            raise InputError(f"{where}: unknown input {key!r}; the model's inputs are {', '.join(names)}")
    for spec in specs:
        value = feeds.get(spec.name)
        if value is None:
            raise InputError(f"{where}: missing input {spec.name!r}; expected {spec.describe()}")
        if not isinstance(value, np.ndarray):
            raise InputError(
                f"{where}: input {spec.name!r} is a {type(value).__name__}; expected a numpy array {spec.describe()}"
            )
        if value.dtype != spec.dtype:
            raise InputError(f"{where}: input {spec.name!r} has dtype {value.dtype.name}; expected {spec.describe()}")
        if not _shape_fits(value.shape, spec):
            raise InputError(f"{where}: input {spec.name!r} has shape {tuple(value.shape)}; expected {spec.describe()}")
