"""The LiteRT backend (``ai_edge_litert``; ``tflite_runtime`` as a fallback) for ``.tflite`` models.

The interpreter applies the XNNPACK delegate on CPU by default. Inputs whose signature has dynamic
dimensions (-1) are resized on the fly when a feed's shape differs from the allocated one.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from edge.errors import InferenceError, InputError, MissingDependencyError
from edge.runtime.base import Dim, LoadOptions, ModelFormat, TensorSpec, check_feeds, check_threads

NAME = "litert"

#: Where to find a TFLite interpreter, best first. tflite-runtime is dead (numpy < 2) but still on old Pis.
INTERPRETER_MODULES = ("ai_edge_litert.interpreter", "tflite_runtime.interpreter")


def import_interpreter() -> Any:
    """The ``Interpreter`` class of the first importable module in INTERPRETER_MODULES.

    Raises:
        MissingDependencyError: if none imports, naming each module's failure and the pip extra.
    """
    failures = []
    for module in INTERPRETER_MODULES:
        try:
            return importlib.import_module(module).Interpreter
        except ImportError as exc:
            failures.append(f"{module}: {exc}")
    raise MissingDependencyError(
        "The LiteRT backend needs ai-edge-litert (or tflite-runtime) but neither imports ("
        + "; ".join(failures)
        + "); install it with: pip install 'edge-deploy[device]'"
    )


def _spec(detail: dict[str, Any]) -> TensorSpec:
    signature = detail.get("shape_signature")
    if signature is None or len(signature) == 0:
        signature = detail["shape"]
    shape: tuple[Dim, ...] = tuple(None if int(d) < 0 else int(d) for d in signature)
    scale, zero_point = detail.get("quantization", (0.0, 0))
    quant = (float(scale), int(zero_point)) if scale else None
    return TensorSpec(name=detail["name"], shape=shape, dtype=np.dtype(detail["dtype"]), quantization=quant)


class LiteRtModel:
    """A model loaded in a LiteRT ``Interpreter``; see ``edge.runtime.base.Model``."""

    backend = NAME

    def __init__(self, path: Path, threads: int, interpreter: Any) -> None:
        self.path = path
        self.threads = threads
        self._interp = interpreter
        in_details = interpreter.get_input_details()
        out_details = interpreter.get_output_details()
        self.inputs = tuple(_spec(d) for d in in_details)
        self.outputs = tuple(_spec(d) for d in out_details)
        self._in_index = {d["name"]: int(d["index"]) for d in in_details}
        self._out = [(d["name"], int(d["index"])) for d in out_details]
        self._allocated = {d["name"]: tuple(int(x) for x in d["shape"]) for d in in_details}

    def _live(self) -> Any:
        if self._interp is None:
            raise InferenceError(f"{self.path.name}: the model is closed")
        return self._interp

    def _resize(self, feeds: Mapping[str, np.ndarray]) -> None:
        """Resize dynamic inputs to the feeds' shapes (check_feeds has already matched fixed dims)."""
        interp = self._live()
        changed = False
        for name, value in feeds.items():
            if value.shape != self._allocated[name]:
                interp.resize_tensor_input(self._in_index[name], list(value.shape), strict=True)
                self._allocated[name] = tuple(value.shape)
                changed = True
        if changed:
            try:
                interp.allocate_tensors()
            except (RuntimeError, ValueError) as exc:
                raise InferenceError(f"{self.path.name}: LiteRT could not resize the inputs ({exc})") from exc

    def _invoke(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        interp = self._live()
        try:
            for name, value in feeds.items():
                interp.set_tensor(self._in_index[name], value)
            interp.invoke()
            return {name: interp.get_tensor(index) for name, index in self._out}
        except (RuntimeError, ValueError) as exc:
            raise InferenceError(f"{self.path.name}: LiteRT failed to run the model ({exc})") from exc

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Check ``feeds``, run once, return every output (copied) by name.

        Raises:
            InputError: for a missing/unknown input or a wrong dtype/shape.
            InferenceError: if the interpreter fails or the model is closed.
        """
        check_feeds(self.path.name, self.inputs, feeds)
        self._resize(feeds)
        return self._invoke(feeds)

    def prepare(self, feeds: Mapping[str, np.ndarray]) -> Callable[[], dict[str, np.ndarray]]:
        """Check and size ``feeds`` once; return a call that runs them (the timing loop's body)."""
        check_feeds(self.path.name, self.inputs, feeds)
        self._resize(feeds)
        fixed = dict(feeds)
        return lambda: self._invoke(fixed)

    def close(self) -> None:
        """Drop the interpreter (idempotent)."""
        self._interp = None

    def __enter__(self) -> LiteRtModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LiteRtBackend:
    """Loads TFLite flatbuffers into a LiteRT interpreter."""

    name = NAME
    formats = frozenset({ModelFormat.TFLITE})

    def load(self, path: Path, threads: int, options: LoadOptions | None = None) -> LiteRtModel:
        """Load ``path`` with ``threads`` interpreter threads and allocate its tensors.

        Args:
            path: a TFLite flatbuffer.
            threads: interpreter threads.
            options: only ``what`` (how errors name the model) applies; onnxruntime's knobs must keep their
                defaults.

        Raises:
            InputError: if ``options`` asks for an onnxruntime graph optimisation level or INT8 setting.
            MissingDependencyError: if neither ai-edge-litert nor tflite-runtime is installed.
            InferenceError: if the interpreter cannot load the file.
        """
        opts = options or LoadOptions()
        if (opts.optimization, opts.precise_int8) != (LoadOptions.optimization, LoadOptions.precise_int8):
            raise InputError(
                f"{path}: optimization = {opts.optimization.name}, precise_int8 = {opts.precise_int8} are "
                "onnxruntime settings; LiteRT runs a TFLite model as it is (use the .onnx for the unfused gate)"
            )
        threads = check_threads(threads)
        interpreter_cls = import_interpreter()
        try:
            interp = interpreter_cls(model_path=str(path), num_threads=threads)
            interp.allocate_tensors()
        except (RuntimeError, ValueError) as exc:
            raise InferenceError(f"{path}: LiteRT could not load {opts.what} ({exc})") from exc
        return LiteRtModel(path, threads, interp)
