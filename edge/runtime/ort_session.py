"""The one place on the device that imports onnxruntime and builds an ``InferenceSession``.

Used by the ONNX Runtime backend (``open_model``, so ``bench`` and the daemon), the face pipeline's MTCNN
detector and embedder, and the language model's decoder. Every session gets the same options: ``threads``
intra-op threads, one inter-op thread, sequential execution, the CPU execution provider, and full graph
optimisation unless the caller asks for less, and on x86 without VNNI ``session.x64quantprecision=1`` (INT8
kernels that do not saturate there; a VNNI CPU keeps onnxruntime's faster defaults: ``edge.cpu``). A file
onnxruntime refuses is an ``InferenceError`` naming it.

That option acts through a graph transformer (s8 weights made u8), and an ORT-format file was optimised when it
was saved, so no transformer runs on it: on a CPU that needs the option, a ``.ort`` file loads from the
``.onnx`` it was made from when that lies beside it (as in every face folder and bundle of ours). Measured on
an AVX2-only AMD EPYC by ``tests/integration/test_build.py::test_int8_bundle_runs_the_face_pipeline_close_to_fp32``
(the rpi4 INT8 pipeline's descriptor of skimage's astronaut against fp32's): cosine 0.98850 from the ``.ort``,
below the profile's 0.995; from its ``.onnx`` with the option, 0.99950 (the same check by hand). Without the
``.onnx`` the ``.ort`` loads as it is (its INT8 kernels may saturate on such a CPU).

onnxruntime (1.32) otherwise records telemetry about the device (a device id, CPU, OS, executable path) in
``~/.cache/Microsoft/DeveloperTools/.onnxruntime/`` as soon as its native library loads. A device toolkit must
not do that: :func:`import_onnxruntime` sets ``ORT_DISABLE_TELEMETRY=1`` before the first import (the native
library reads it when it loads; nothing else stops the event written at import: calling
``onnxruntime.disable_telemetry_events()`` after the import, alone, still left the event and the device id on
disk in our test) and then calls ``disable_telemetry_events()`` once too, onnxruntime's documented switch,
for any event after the import in a process where something imported onnxruntime before us.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from edge.cpu import int8_session_config
from edge.errors import InferenceError, require
from edge.runtime.base import Optimization, check_threads

__all__ = ["Optimization", "build_session", "import_onnxruntime"]

#: Read by onnxruntime's native library when it loads: "1" keeps it from writing telemetry events to disk.
TELEMETRY_ENV = "ORT_DISABLE_TELEMETRY"

_state: dict[str, Any] = {}


def import_onnxruntime(purpose: str = "Running ONNX models") -> Any:
    """onnxruntime, imported with its telemetry off (see the module docstring).

    Args:
        purpose: what needs it, for the message when it is missing.

    Returns:
        The ``onnxruntime`` module.

    Raises:
        MissingDependencyError: if onnxruntime is not installed, naming ``purpose`` and the pip extra.
    """
    ort = _state.get("module")
    if ort is None:
        os.environ[TELEMETRY_ENV] = "1"  # too late if onnxruntime was imported already; the call below is not
        ort = require("onnxruntime", "device", purpose)
        ort.disable_telemetry_events()
        _state["module"] = ort
    return ort


def build_session(
    path: Path,
    threads: int,
    *,
    what: str = "the model",
    purpose: str = "Running ONNX models",
    optimization: Optimization = Optimization.ALL,
    precise_int8: bool = True,
    memory_arena: bool = True,
) -> Any:
    """An ``onnxruntime.InferenceSession`` over ``path`` on the CPU execution provider.

    Args:
        path: an ONNX or ORT-format model (an ONNX file's external ``.data`` next to it).
        threads: intra-op threads (>= 1); one inter-op thread, sequential execution.
        what: how the load error names the model, e.g. ``"the MTCNN model"``.
        purpose: what needs onnxruntime, for the message when it is missing.
        optimization: the graph optimisation level.
        precise_int8: add this CPU's ``edge.cpu.int8_session_config`` (False only to measure the saturating
            x86 kernels it avoids).
        memory_arena: onnxruntime's CPU memory arena and memory patterns; False for inputs whose shape
            changes from call to call (``LoadOptions.varying_shapes``), where they keep memory per shape.

    Returns:
        The session.

    Raises:
        InferenceError: for a bad thread count, or when onnxruntime cannot load the file (naming it, with
            onnxruntime's own words after ours).
        MissingDependencyError: if onnxruntime is not installed.
    """
    threads = check_threads(threads)
    ort = import_onnxruntime(purpose)
    config = int8_session_config() if precise_int8 else ()
    path = _onnx_for_config(Path(path)) if config else path
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, optimization.value)
    options.enable_cpu_mem_arena = memory_arena
    options.enable_mem_pattern = memory_arena
    for key, value in config:  # x86: no u8s8 saturation (edge.cpu)
        options.add_session_config_entry(key, value)
    try:
        return ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime's load errors (Fail, InvalidGraph, ...) share no narrower base
        raise InferenceError(f"{path}: onnxruntime cannot load {what} ({exc})") from exc


def _onnx_for_config(path: Path) -> Path:
    """The ``.onnx`` beside an ORT-format ``path`` when there is one (see the module docstring), else ``path``."""
    if path.suffix != ".ort":
        return path
    source = path.with_suffix(".onnx")
    return source if source.is_file() else path
