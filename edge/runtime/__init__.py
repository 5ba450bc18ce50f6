"""On-device runtimes: backends looked up by name, and ``open_model`` that picks one from the file's bytes.

    from edge.runtime import open_model
    with open_model(Path("face.onnx"), profile=load_profile("rpi4")) as model:
        outputs = model.run({"input": chip})

The format is read from the file's first bytes (ONNX protobuf, ORT flatbuffer "ORTM", TFLite flatbuffer
"TFL3"), never from its name. Threads come from the target profile unless given.
"""

from __future__ import annotations

import importlib
import mmap
import os
from pathlib import Path

from edge.errors import InferenceError, InputError
from edge.profiles import TargetProfile
from edge.runtime.base import (
    Backend,
    LoadOptions,
    Model,
    ModelFormat,
    Optimization,
    TensorSpec,
    check_feeds,
    first_batch,
)

__all__ = [
    "Backend",
    "LoadOptions",
    "Model",
    "ModelFormat",
    "Optimization",
    "TensorSpec",
    "available_backends",
    "check_feeds",
    "default_threads",
    "detect_format",
    "first_batch",
    "get_backend",
    "open_model",
]

#: Backend name -> "module:class". Imported on first use, so a missing runtime breaks only its backend.
_BACKENDS: dict[str, str] = {
    "onnxruntime": "edge.runtime.onnxruntime_backend:OnnxRuntimeBackend",
    "litert": "edge.runtime.litert_backend:LiteRtBackend",
}

#: Which backend runs a format when neither the caller nor the profile says.
_DEFAULT_BACKEND: dict[ModelFormat, str] = {
    ModelFormat.ONNX: "onnxruntime",
    ModelFormat.ORT: "onnxruntime",
    ModelFormat.TFLITE: "litert",
}

#: ModelProto's top-level fields: number -> protobuf wire type (0 varint, 2 length-delimited).
_ONNX_FIELDS: dict[int, int] = {1: 0, 2: 2, 3: 2, 4: 2, 5: 0, 6: 2, 7: 2, 8: 2, 14: 2, 20: 2, 25: 2, 26: 2}
_ONNX_IR_VERSION, _ONNX_GRAPH = 1, 7


def default_backend_name(fmt: ModelFormat) -> str:
    """The backend that runs ``fmt`` when neither the caller nor the profile says (e.g. ``"litert"``)."""
    return _DEFAULT_BACKEND[fmt]


def available_backends() -> list[str]:
    """Names of the registered backends, sorted."""
    return sorted(_BACKENDS)


def get_backend(name: str) -> Backend:
    """The backend registered as ``name`` (``"onnxruntime"`` or ``"litert"``).

    Raises:
        InferenceError: for an unknown name, listing the known ones.
        MissingDependencyError: only later, from ``load``, if the runtime is not installed.
    """
    target = _BACKENDS.get(name)
    if target is None:
        raise InferenceError(f"unknown backend {name!r}; expected one of {', '.join(available_backends())}")
    module, cls = target.split(":")
    return getattr(importlib.import_module(module), cls)()


def _varint(buf: mmap.mmap | bytes, pos: int) -> tuple[int, int]:
    """Decode a protobuf varint at ``pos``; return (value, next position). Raises IndexError/ValueError."""
    value = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _is_onnx_protobuf(buf: mmap.mmap | bytes) -> bool:
    """True if ``buf`` parses, to its last byte, as ModelProto top-level fields with ir_version and a graph.

    Walks only the top level (a few fields; the graph is skipped by its length), so it is cheap for
    large models.
    """
    pos, seen, size = 0, set(), len(buf)
    try:
        while pos < size:
            tag, pos = _varint(buf, pos)
            field, wire = tag >> 3, tag & 7
            # known fields must have their wire type; unknown ones (a newer ONNX) just need a valid one
            if field == 0 or _ONNX_FIELDS.get(field, wire) != wire:
                return False
            if wire == 0:
                _, pos = _varint(buf, pos)
            elif wire == 2:
                length, pos = _varint(buf, pos)
                pos += length
            elif wire in (1, 5):
                pos += 8 if wire == 1 else 4
            else:
                return False
            seen.add(field)
    except (IndexError, ValueError):
        return False
    return pos == size and {_ONNX_IR_VERSION, _ONNX_GRAPH} <= seen


def detect_format(path: Path) -> ModelFormat:
    """Tell a model's format from its bytes.

    Raises:
        InputError: if the file is missing, empty, unreadable, or neither ONNX nor TFLite/ORT, naming the
            file and showing its first bytes.
    """
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{path}: is a directory; expected an ONNX or TFLite model file")
    try:
        with path.open("rb") as fh:
            head = fh.read(8)
            if not head:
                raise InputError(f"{path}: empty file; expected an ONNX or TFLite model")
            if head[4:8] == b"TFL3":
                return ModelFormat.TFLITE
            if head[4:8] == b"ORTM":
                return ModelFormat.ORT
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                if _is_onnx_protobuf(buf):
                    return ModelFormat.ONNX
    except FileNotFoundError:
        raise InputError(f"{path}: no such model file") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read the model ({exc.strerror})") from exc
    raise InputError(
        f"{path}: not an ONNX or TFLite model (first bytes {head.hex(' ')}; expected an ONNX protobuf, "
        "or 'TFL3' at offset 4)"
    )


def default_threads() -> int:
    """How many CPUs this process may run on (the thread count when no profile or override is given)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _pick_backend(path: Path, fmt: ModelFormat, backend: str | None, profile: TargetProfile | None) -> Backend:
    if backend is None:
        preferred = profile.runtime.default.value if profile else None
        if preferred in _BACKENDS and fmt in get_backend(preferred).formats:
            return get_backend(preferred)
        return get_backend(_DEFAULT_BACKEND[fmt])
    chosen = get_backend(backend)
    if fmt not in chosen.formats:
        readable = " and ".join(sorted(f.label for f in chosen.formats))
        raise InputError(f"{path}: is in {fmt.label} format; backend {backend!r} reads only {readable}")
    return chosen


def open_model(
    path: Path,
    threads: int | None = None,
    backend: str | None = None,
    profile: TargetProfile | None = None,
    options: LoadOptions | None = None,
) -> Model:
    """Load a model with the backend its format (and the profile) calls for.

    Args:
        path: an ONNX, ORT-format or TFLite file; the format is read from its bytes.
        threads: intra-op threads; None takes ``profile.runtime.threads``, or all usable CPUs without
            a profile.
        backend: a backend name to force (it must read the format); None picks one.
        profile: the target board's profile (see ``edge.board.detect_board``), for threads and backend.
        options: onnxruntime's graph optimisation and INT8 precision, and how errors name the model
            (``edge.runtime.base.LoadOptions``); None: the defaults.

    Returns:
        The loaded model; close it, or use it as a context manager.

    Raises:
        InputError: if the file is missing or not a model, the forced backend cannot read it, or ``options``
            sets onnxruntime knobs for a LiteRT model.
        InferenceError: for an unknown backend, a bad thread count, or a runtime that fails to load it.
        MissingDependencyError: if the runtime is not installed.
    """
    path = Path(path)
    fmt = detect_format(path)
    chosen = _pick_backend(path, fmt, backend, profile)
    if threads is None:
        threads = profile.runtime.threads if profile else default_threads()
    return chosen.load(path, threads, options)
