"""``convert model --format tflite|both``: the fp32 TFLite twin of a user's model, by onnx2tf.

onnx2tf (``converters.tflite.convert``, in ``.venv-onnx2tf``) takes image CNNs: one 4-D float32 NCHW input of
batch 1. The twin (``<stem>.fp32.tflite``, NHWC in) is run on LiteRT on the evaluation samples and compared
with the fp32 ONNX copy it was made from; it must be within the gate's ``fp32_max_abs`` of it, as the fp32
copy must be of the source. It is listed in report.json's files and shipped by ``build --model``.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from converters.byom.feeds import Samples
from converters.byom.source import TensorSpec
from edge.cosine import row_cosines
from edge.errors import InputError
from edge.progress import ProgressFn

TWIN_KEY = "tflite"


def check_twin_inputs(model: Path, inputs: Sequence[TensorSpec]) -> None:
    """Refuse, before any work, a model onnx2tf is not given here.

    Raises:
        InputError: not one float32 input of shape 1 x C x H x W.
    """
    shapes = ", ".join(f"{s.name}={s.shape_text()} {s.dtype}" for s in inputs)
    ok = len(inputs) == 1 and inputs[0].dtype == np.float32 and len(inputs[0].shape) == 4 and inputs[0].shape[0] == 1
    if not ok:
        raise InputError(
            f"--format tflite: {model} has inputs {shapes}; the TFLite twin (onnx2tf) takes one float32 NCHW image "
            "input of batch 1 (give --input NAME=1xCxHxW for a dynamic batch)"
        )


def write_twin(fp32: Path, inputs: Sequence[TensorSpec], evaluation: Samples, work: Path, progress: ProgressFn):
    """Convert ``fp32`` with onnx2tf into ``work`` and compare it with ``fp32`` on every evaluation sample.

    Returns:
        (the ``.tflite`` path, ``{"samples", "outputs": {name: {"max_abs_diff", "min_cosine"}}, "max_abs_diff",
        "min_cosine"}``).

    Raises:
        MissingDependencyError: no onnx2tf venv; ConversionError: onnx2tf failed (quoting its log).
        ValidationError: an output of the fp32 copy has no twin output of its shape.
    """
    from converters.tflite.convert import export_tflite

    spec = inputs[0]
    with tempfile.TemporaryDirectory(prefix="tflite-", dir=work) as tmp:
        export = export_tflite(fp32, Path(tmp), int8=False, calibration=None, input_name=spec.name, progress=progress)
        twin = work / fp32.with_suffix(".tflite").name
        shutil.move(export.files[export.variant], twin)
        shutil.move(export.log_path, work / "onnx2tf.log")
    progress(f"comparing {twin.name} (LiteRT) with {fp32.name} on {evaluation.count} samples")
    return twin, compare_twin(twin, fp32, spec.name, evaluation.arrays[spec.name])


def compare_twin(twin: Path, fp32: Path, input_name: str, samples_nchw: np.ndarray) -> dict:
    """Both models one sample at a time (the twin NHWC on LiteRT, the copy NCHW on onnxruntime); each ONNX
    output against the twin's of the same name, else of the same shape (a 4-D one transposed from NHWC)."""
    from converters.byom.execute import run_model
    from edge.errors import ValidationError
    from edge.runtime import open_model
    from edge.runtime.ort_session import Optimization

    batches = [{input_name: samples_nchw[i : i + 1]} for i in range(len(samples_nchw))]
    names, ref = run_model(fp32, batches, 1, Optimization.ALL)
    with open_model(twin, threads=1, backend="litert") as model:
        runs = [model.run({model.inputs[0].name: np.ascontiguousarray(b[input_name].transpose(0, 2, 3, 1))})
                for b in batches]  # fmt: skip
    got = {k: np.concatenate([r[k] for r in runs]) for k in runs[0]}
    got = {k: v.transpose(0, 3, 1, 2) if v.ndim == 4 else v for k, v in got.items()}
    outputs = {}
    for name, want in zip(names, ref, strict=True):
        key = name if name in got and got[name].shape == want.shape else next(
            (k for k, v in got.items() if v.shape == want.shape), None)  # fmt: skip
        if key is None:
            raise ValidationError(f"{twin}: no output of shape {list(want.shape)} for {fp32.name}'s {name!r}")
        a, b = got.pop(key).astype(np.float64), want.astype(np.float64)
        outputs[name] = {"twin_output": key, "max_abs_diff": float(np.abs(a - b).max()),
                         "min_cosine": float(row_cosines(a, b).min())}  # fmt: skip
    return {
        "samples": len(samples_nchw),
        "outputs": outputs,
        "max_abs_diff": max(o["max_abs_diff"] for o in outputs.values()),
        "min_cosine": min(o["min_cosine"] for o in outputs.values()),
    }
