"""``convert model --format tflite|both``: the TFLite twin of a user's model, by onnx2tf.

onnx2tf (``converters.tflite.convert``, in ``.venv-onnx2tf``) takes image CNNs: one 4-D float32 NCHW input of
batch 1 (3 channels for INT8: onnx2tf calibrates 3-channel images only). The twin is NHWC in and runs on
LiteRT one sample at a time (``run_tflite``: a quantized input is quantized with its scale and zero point,
quantized outputs are dequantized with ``scale * (q - zero_point)``).

* fp32 (``<stem>.fp32.tflite``): compared with the fp32 ONNX copy it was made from; it must be within the
  gate's ``fp32_max_abs`` of it, as the fp32 copy must be of the source.
* INT8 (``<stem>.int8.tflite``, ``--precision int8``): full integer (int8 input, outputs and kernels),
  calibrated on the ``--calib`` samples, and put behind the task gate against the *source* on every
  evaluation sample, with the thresholds of the ONNX INT8 (``gate.measure`` / ``gate.failures``).

Either is listed in report.json's files and figures and shipped by ``build --model``.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from converters.byom.feeds import Samples
from converters.byom.gate import GateThresholds, Task, failures, measure
from converters.byom.source import TensorSpec
from edge.cosine import row_cosines
from edge.errors import InputError
from edge.profiles import Precision
from edge.progress import ProgressFn

TWIN_KEY = "tflite"
#: How the INT8 twin's gate figures were measured (its record's ``evaluated_as``).
EVALUATED_AS = (
    "the full-integer .tflite on LiteRT, one sample at a time: the input quantized with its scale and zero point, "
    "the outputs dequantized (scale * (q - zero_point)); LiteRT's INT8 kernels are integer arithmetic"
)


def check_twin_inputs(model: Path, inputs: Sequence[TensorSpec], precision: Precision) -> None:
    """Refuse, before any work, a model onnx2tf is not given here.

    Raises:
        InputError: not one float32 input of shape 1 x C x H x W (1 x 3 x H x W for int8), naming the file,
            the inputs and what is expected.
    """
    shapes = ", ".join(f"{s.name}={s.shape_text()} {s.dtype}" for s in inputs)
    ok = len(inputs) == 1 and inputs[0].dtype == np.float32 and len(inputs[0].shape) == 4 and inputs[0].shape[0] == 1
    if not ok:
        raise InputError(
            f"--format tflite: {model} has inputs {shapes}; the TFLite twin (onnx2tf) takes one float32 NCHW image "
            "input of batch 1 (give --input NAME=1xCxHxW for a dynamic batch)"
        )
    if precision is Precision.INT8 and inputs[0].shape[1] != 3:
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
        inputs: its one input (checked by ``check_twin_inputs``).
        work: the build folder; the twin and ``onnx2tf.log`` are written there.
        progress: called with a line per step.
        calibration: the ``--calib`` samples for an INT8 twin (NCHW, the model's raw input values); None
            for fp32.

    Returns:
        The twin: ``<stem>.fp32.tflite`` or ``<stem>.int8.tflite`` (int8 in and out).

    Raises:
        MissingDependencyError: no onnx2tf venv; ConversionError: onnx2tf failed (quoting its log).
    """
    from converters.tflite.convert import TfliteVariant, export_tflite

    spec = inputs[0]
    variant = TfliteVariant.FP32 if calibration is None else TfliteVariant.INT8
    calib = None if calibration is None else np.ascontiguousarray(calibration.arrays[spec.name].transpose(0, 2, 3, 1))
    with tempfile.TemporaryDirectory(prefix="tflite-", dir=work) as tmp:
        export = export_tflite(
            fp32, Path(tmp), int8=calib is not None, calibration=calib, input_name=spec.name, progress=progress
        )
        twin = work / f"{fp32.name.removesuffix('.fp32.onnx')}.{variant.value}.tflite"
        shutil.move(export.files[variant], twin)
        shutil.move(export.log_path, work / "onnx2tf.log")
    return twin


def compare_twin(twin: Path, fp32: Path, input_name: str, samples_nchw: np.ndarray) -> dict:
    """The fp32 twin on LiteRT against the fp32 copy on onnxruntime, one sample at a time.

    Returns:
        ``{"file", "variant", "against", "samples", "outputs": {name: {"twin_output", "max_abs_diff",
        "min_cosine"}}, "max_abs_diff", "min_cosine"}``.

    Raises:
        ValidationError: an output of the fp32 copy has no twin output of its shape.
    """
    from converters.byom.execute import run_model
    from converters.tflite.convert import run_tflite
    from edge.runtime.ort_session import Optimization

    batches = [{input_name: samples_nchw[i : i + 1]} for i in range(len(samples_nchw))]
    names, ref = run_model(fp32, batches, 1, Optimization.ALL)
    run = run_tflite(twin, samples_nchw, {name: want.shape for name, want in zip(names, ref, strict=True)})
    outputs = {}
    for name, want in zip(names, ref, strict=True):
        a, b = run.values[name].astype(np.float64), want.astype(np.float64)
        outputs[name] = {"twin_output": run.outputs[name].name, "max_abs_diff": float(np.abs(a - b).max()),
                         "min_cosine": float(row_cosines(a, b).min())}  # fmt: skip
    return {
        "file": twin.name,
        "variant": "fp32",
        "against": fp32.name,
        "samples": len(samples_nchw),
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
