"""The ONNX Runtime backend (CPU execution provider): ``.onnx`` protobuf and ``.ort`` flatbuffer models."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from edge.errors import InferenceError
from edge.runtime.base import Dim, LoadOptions, ModelFormat, TensorSpec, check_feeds
from edge.runtime.ort_session import build_session

NAME = "onnxruntime"

#: ONNX Runtime's type strings -> numpy dtypes (the tensor types a CPU session can take or give).
_ORT_TYPES: dict[str, np.dtype] = {
    "tensor(float)": np.dtype(np.float32),
    "tensor(float16)": np.dtype(np.float16),
    "tensor(double)": np.dtype(np.float64),
    "tensor(int8)": np.dtype(np.int8),
    "tensor(uint8)": np.dtype(np.uint8),
    "tensor(int16)": np.dtype(np.int16),
    "tensor(uint16)": np.dtype(np.uint16),
    "tensor(int32)": np.dtype(np.int32),
    "tensor(uint32)": np.dtype(np.uint32),
    "tensor(int64)": np.dtype(np.int64),
    "tensor(uint64)": np.dtype(np.uint64),
    "tensor(bool)": np.dtype(np.bool_),
    "tensor(string)": np.dtype(np.object_),
}


def _dtype(where: str, node: Any) -> np.dtype:
    try:
        return _ORT_TYPES[node.type]
    except KeyError:
        raise InferenceError(
            f"{where}: {node.name!r} has type {node.type}; this backend handles only {', '.join(_ORT_TYPES)}"
        ) from None


def _spec(where: str, node: Any) -> TensorSpec:
    shape: tuple[Dim, ...] = tuple(d if isinstance(d, int) or d is None else str(d) for d in node.shape)
    return TensorSpec(name=node.name, shape=shape, dtype=_dtype(where, node))


class OnnxRuntimeModel:
    """A model loaded in an ``onnxruntime.InferenceSession``; see ``edge.runtime.base.Model``."""

    backend = NAME

    def __init__(self, path: Path, threads: int, session: Any) -> None:
        self.path = path
        self.threads = threads
        self._session = session
        self.inputs = tuple(_spec(path.name, n) for n in session.get_inputs())
        self.outputs = tuple(_spec(path.name, n) for n in session.get_outputs())
        self._output_names = [s.name for s in self.outputs]

    @property
    def session(self) -> Any:
        """The underlying ``onnxruntime.InferenceSession`` (for comparisons with a bare loop)."""
        return self._live()

    def _live(self) -> Any:
        if self._session is None:
            raise InferenceError(f"{self.path.name}: the model is closed")
        return self._session

    def _call(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            values = self._live().run(self._output_names, feeds)
        except InferenceError:
            raise
        except Exception as exc:  # onnxruntime's errors (Fail, InvalidArgument, ...) share no narrower base
            raise InferenceError(f"{self.path.name}: onnxruntime failed to run the model ({exc})") from exc
        return dict(zip(self._output_names, values, strict=True))

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Check ``feeds``, run once, return every output by name.

        Raises:
            InputError: for a missing/unknown input or a wrong dtype/shape.
            InferenceError: if onnxruntime fails or the model is closed.
        """
        check_feeds(self.path.name, self.inputs, feeds)
        return self._call(feeds)

    def prepare(self, feeds: Mapping[str, np.ndarray]) -> Callable[[], dict[str, np.ndarray]]:
        """Check ``feeds`` once; return a call that runs them (the timing loop's body)."""
        check_feeds(self.path.name, self.inputs, feeds)
        fixed = dict(feeds)
        run = self._live().run
        names = self._output_names

        def call() -> dict[str, np.ndarray]:
            # ORT returns one value per name; zip's strict= keyword alone costs ~150 ns in this hot loop
            return dict(zip(names, run(names, fixed)))  # noqa: B905

        return call

    def close(self) -> None:
        """Drop the session (idempotent)."""
        self._session = None

    def __enter__(self) -> OnnxRuntimeModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class OnnxRuntimeBackend:
    """Loads ONNX / ORT-format models on the CPU execution provider."""

    name = NAME
    formats = frozenset({ModelFormat.ONNX, ModelFormat.ORT})

    def load(self, path: Path, threads: int, options: LoadOptions | None = None) -> OnnxRuntimeModel:
        """Load ``path`` with ``threads`` intra-op threads (``edge.runtime.ort_session.build_session``).

        Args:
            path: an ONNX or ORT-format model.
            threads: intra-op threads.
            options: graph optimisation, x86 INT8 precision and how errors name the model; None: defaults.

        Raises:
            MissingDependencyError: if onnxruntime is not installed.
            InferenceError: if the session cannot be created.
        """
        opts = options or LoadOptions()
        session = build_session(
            path,
            threads,
            what=opts.what,
            purpose=opts.purpose or "The ONNX Runtime backend",
            optimization=opts.optimization,
            precise_int8=opts.precise_int8,
            memory_arena=not opts.varying_shapes,
        )
        return OnnxRuntimeModel(path, threads, session)
