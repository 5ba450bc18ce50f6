"""``convert model --format tflite|both``: the TFLite twin of a user's model, by onnx2tf.

Two routes through onnx2tf (in ``.venv-onnx2tf``):

* an **image** model (``is_image``: one float32 4-D input of batch 1, read as NCHW) takes the face build's
  route (``converters.tflite.convert``): the twin is NHWC in, 4-D outputs NHWC (transposed back to compare);
* **any other** model (inputs of batch 1, any rank, float32 / int64 / int32: a transformer's token ids and
  attention mask, a [1, L, C] sequence, several inputs) keeps every input as the ONNX model has it
  (``converters.tflite.keep_layout``, onnx2tf ``-kat``), outputs matched to the ONNX ones by name, else shape.

The twin runs on LiteRT one sample at a time (``run_tflite`` / ``run_tflite_keep_layout``).

* fp32 (``<stem>.fp32.tflite``, either route): compared with the fp32 ONNX copy it was made from; it must be
  within the gate's ``fp32_max_abs`` of it, as the fp32 copy must be of the source.
* INT8 (``<stem>.int8.tflite``, ``--precision int8``, image route only: onnx2tf calibrates 3-channel images):
  full integer (int8 input, outputs and kernels), calibrated on the ``--calib`` samples, and put behind the task
  gate against the *source* on every evaluation sample, with the thresholds of the ONNX INT8 (``gate.measure``
  / ``gate.failures``); a quantized input is quantized with its scale and zero point, quantized outputs are
  dequantized with ``scale * (q - zero_point)``.

Either is listed in report.json's files and figures and shipped by ``build --model``.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from converters.byom.feeds import Samples
from converters.byom.gate import GateThresholds, Task, failures, measure
from converters.byom.source import TensorSpec
from edge.cosine import row_cosines
from edge.errors import InputError, ValidationError
from edge.profiles import Precision
from edge.progress import ProgressFn

TWIN_KEY = "tflite"
#: How the INT8 twin's gate figures were measured (its record's ``evaluated_as``).
EVALUATED_AS = (
    "the full-integer .tflite on LiteRT, one sample at a time: the input quantized with its scale and zero point, "
    "the outputs dequantized (scale * (q - zero_point)); LiteRT's INT8 kernels are integer arithmetic"
)


#: Input dtypes the fp32 twin takes (onnx2tf keeps them in the TFLite inputs).
TWIN_DTYPES = (np.dtype(np.float32), np.dtype(np.int64), np.dtype(np.int32))


def is_image(inputs: Sequence[TensorSpec]) -> bool:
    """One float32 4-D input of batch 1: onnx2tf's image route (NCHW read, the twin NHWC in)."""
    return len(inputs) == 1 and inputs[0].dtype == np.float32 and len(inputs[0].shape) == 4 and inputs[0].shape[0] == 1


def check_twin_inputs(model: Path, inputs: Sequence[TensorSpec], precision: Precision) -> None:
    """Refuse, before any work, a model onnx2tf is not given here.

    Raises:
        InputError: an input not of batch 1 or not float32, int64 or int32; at int8, not one float32 input of
            shape 1 x 3 x H x W. The message names the file, the inputs and what is expected.
    """
    shapes = ", ".join(f"{s.name}={s.shape_text()} {s.dtype}" for s in inputs)
    if not all(s.shape and s.shape[0] == 1 and s.dtype in TWIN_DTYPES for s in inputs):
        raise InputError(
            f"--format tflite: {model} has inputs {shapes}; the TFLite twin (onnx2tf) takes inputs of batch 1 and "
            "dtype float32, int64 or int32 (give --input NAME=1x... for a dynamic batch)"
        )
    if precision is Precision.INT8 and not (is_image(inputs) and inputs[0].shape[1] == 3):
        raise InputError(
            f"--format tflite --precision int8: {model} has inputs {shapes}; the INT8 TFLite twin (onnx2tf, full "
            "integer) takes one float32 NCHW image input of batch 1 with 3 channels (onnx2tf calibrates 3-channel "
            "images only); use --precision fp32 for this model's TFLite twin"
        )


def write_twin(
    fp32: Path, inputs: Sequence[TensorSpec], work: Path, progress: ProgressFn, calibration: Samples | None = None
) -> Path:
    """Convert ``fp32`` with onnx2tf into ``work``: fp32, or full-integer INT8 calibrated on ``calibration``.

    Args:
        fp32: the fp32 ONNX copy (input shapes fixed).
        inputs: its inputs (checked by ``check_twin_inputs``): an image model's one input takes the image
            route (NHWC twin), any other model's inputs are kept as they are (``is_image``).
        work: the build folder; the twin and ``onnx2tf.log`` are written there.
        progress: called with a line per step.
        calibration: the ``--calib`` samples for an INT8 twin (an image model's: NCHW, the model's raw input
            values); None for fp32.

    Returns:
        The twin: ``<stem>.fp32.tflite`` or ``<stem>.int8.tflite`` (int8 in and out).

    Raises:
        MissingDependencyError: no onnx2tf venv; ConversionError: onnx2tf failed (naming the model, quoting its
            log), or wrote inputs other than the model's.
    """
    from converters.tflite.convert import TfliteVariant, export_tflite
    from converters.tflite.keep_layout import export_tflite_keep_layout

    spec = inputs[0]
    variant = TfliteVariant.FP32 if calibration is None else TfliteVariant.INT8
    calib = None if calibration is None else np.ascontiguousarray(calibration.arrays[spec.name].transpose(0, 2, 3, 1))
    with tempfile.TemporaryDirectory(prefix="tflite-", dir=work) as tmp:
        if calib is None and not is_image(inputs):
            shapes = {s.name: tuple(int(d) for d in s.shape) for s in inputs}
            export = export_tflite_keep_layout(fp32, Path(tmp), shapes, progress=progress)
        else:
            export = export_tflite(
                fp32, Path(tmp), int8=calib is not None, calibration=calib, input_name=spec.name, progress=progress
            )
        twin = work / f"{fp32.name.removesuffix('.fp32.onnx')}.{variant.value}.tflite"
        shutil.move(export.files[variant], twin)
        shutil.move(export.log_path, work / "onnx2tf.log")
    return twin


def _run_twin(
    twin: Path, inputs: Sequence[TensorSpec], arrays: Mapping[str, np.ndarray], wanted: Mapping[str, tuple[int, ...]]
) -> tuple[str, list[dict], dict[str, str], dict[str, np.ndarray]]:
    """(the twin's input layout, its inputs, ONNX output -> twin output name, the twin's outputs in ONNX layout)."""
    from converters.tflite.convert import run_tflite
    from converters.tflite.keep_layout import LAYOUT, run_tflite_keep_layout

    if is_image(inputs):
        image = run_tflite(twin, arrays[inputs[0].name], wanted)
        names = {name: spec.name for name, spec in image.outputs.items()}
        return "NHWC", [image.input.to_dict()], names, dict(image.values)
    kept = run_tflite_keep_layout(twin, {s.name: arrays[s.name] for s in inputs}, wanted)
    names = {name: spec.name for name, spec in kept.outputs.items()}
    return LAYOUT, [t.to_dict() for t in kept.inputs], names, dict(kept.values)


def compare_twin(twin: Path, fp32: Path, inputs: Sequence[TensorSpec], arrays: Mapping[str, np.ndarray]) -> dict:
    """The fp32 twin on LiteRT against the fp32 copy on onnxruntime, one sample at a time.

    Args:
        twin: the fp32 ``.tflite``; fp32: the fp32 ONNX copy it was made from.
        inputs: the model's inputs (``is_image`` tells the twin's route).
        arrays: input name -> the evaluation samples [N, ...], as the ONNX model takes them.

    Returns:
        ``{"file", "variant", "against", "samples", "layout" ("NHWC": an image twin; "ONNX": inputs as the
        ONNX model's), "inputs": the twin's, "outputs": {name: {"twin_output", "max_abs_diff", "min_cosine"}},
        "max_abs_diff", "min_cosine"}``.

    Raises:
        ValidationError: an output of the fp32 copy has no twin output.
    """
    from converters.byom.execute import run_model
    from edge.runtime.ort_session import Optimization

    count = len(arrays[inputs[0].name])
    batches = [{s.name: arrays[s.name][i : i + 1] for s in inputs} for i in range(count)]
    names, ref = run_model(fp32, batches, 1, Optimization.ALL)
    wanted = {name: want.shape for name, want in zip(names, ref, strict=True)}
    layout, twin_inputs, twin_names, values = _run_twin(twin, inputs, arrays, wanted)
    outputs: dict[str, dict[str, Any]] = {}
    for name, want in zip(names, ref, strict=True):
        a, b = values[name].astype(np.float64), want.astype(np.float64)
        if a.shape != b.shape:
            raise ValidationError(f"{twin.name}: output {name!r} is {list(a.shape)}, the fp32 copy's {list(b.shape)}")
        outputs[name] = {"twin_output": twin_names[name], "max_abs_diff": float(np.abs(a - b).max()),
                         "min_cosine": float(row_cosines(a, b).min())}  # fmt: skip
    return {
        "file": twin.name,
        "variant": "fp32",
        "against": fp32.name,
        "samples": count,
        "layout": layout,
        "inputs": twin_inputs,
        "outputs": outputs,
        "max_abs_diff": max(o["max_abs_diff"] for o in outputs.values()),
        "min_cosine": min(o["min_cosine"] for o in outputs.values()),
    }


def gate_twin(
    twin: Path,
    samples_nchw: np.ndarray,
    source: tuple[Sequence[str], Sequence[np.ndarray]],
    task: Task,
    thresholds: GateThresholds,
) -> tuple[dict, list[str]]:
    """The INT8 twin on LiteRT (input quantized, outputs dequantized) through the task gate against the source.

    Args:
        twin: the full-integer ``.tflite``.
        samples_nchw: the evaluation samples, [N, C, H, W] float32.
        source: the source model's output names and outputs on those samples (what the ONNX INT8 is gated
            against).
        task: the gate's task; thresholds: the ONNX INT8's.

    Returns:
        (figures: ``{"file", "variant", "against", "samples", "evaluated_as", "passed", "input", "quantized_outputs",
        "graph", "outputs", "embedding" | "classification"}``, every missed threshold prefixed with the twin).

    Raises:
        ConversionError: LiteRT cannot load the twin; ValidationError: an output has no twin output.
    """
    from converters.tflite.convert import graph_summary, run_tflite

    names, ref = source
    run = run_tflite(twin, samples_nchw, {name: want.shape for name, want in zip(names, ref, strict=True)})
    figures = measure(task, names, ref, [run.values[name] for name in names])
    missed = [f"TFLite twin {twin.name}: {line}" for line in failures(task, figures, thresholds)]
    head = {"file": twin.name, "variant": "int8", "against": "source", "samples": len(samples_nchw),
            "evaluated_as": EVALUATED_AS}  # fmt: skip
    return {
        **head,
        "passed": not missed,
        "input": run.input.to_dict(),
        "quantized_outputs": {name: spec.to_dict() for name, spec in run.outputs.items()},
        "graph": graph_summary(twin),
        **figures,
    }, missed
