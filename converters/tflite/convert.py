"""ONNX -> TFLite (fp32 and full-integer INT8) with onnx2tf, run from its own venv in a subprocess.

onnx2tf pins tensorflow 2.19, onnx 1.19, onnxruntime 1.23 and numpy 1.26, so it lives in ``.venv-onnx2tf``
(``scripts/setup_onnx2tf.sh``) and is driven through its CLI. What we handle for it:

* It **overwrites its input .onnx** with a simplified copy: it only ever sees a copy in a scratch folder.
* For a fixed-shape 4-D, 3-channel input it loads ``calibration_image_sample_data_20x128x128x3_float32.npy``
  from its working directory and **downloads it from GitHub when missing** (with or without ``-oiqt``: it
  runs a check inference of the ONNX model on its first sample). We always write that file first.
* Its ``-cind`` calibration path is broken for batches: it transposes the NHWC file to NCHW for its ONNX
  check inference only when the file's batch equals the model's (1), so with N > 1 samples onnxruntime
  rejects the input and onnx2tf goes on without the check data it uses for its shape estimation and
  layout choices (a warning in the log). So we do not use ``-cind``: the INT8 calibration samples go into
  the sample-data file, which onnx2tf both calibrates on (auto-calibration, resized to the input size: an
  identity, as we store them at that size) and checks with; ``-qnm``/``-qns`` set mean 0 and std 1. For
  fp32 the file holds 20 real photo crops from scikit-image.
* Given ``-oiqt`` it pads MaxPool inputs with 0.0 instead of -inf (its workaround for its issue 444), in
  the float graph too: after PReLU that is wrong (ONet fp32 off by 1.4e-2). ``explicit_maxpool_padding``
  turns padding and ceil-mode overhang into an edge-mode Pad before onnx2tf sees the model: exact for max.
* It runs the ``onnxsim`` executable found on ``PATH``: without the venv's ``bin`` on ``PATH`` it silently
  skips simplification and ``-ois`` along with it, and then fails on a broadcast Sub. We prepend it.
* A failed INT8 step is only a warning (exit code 0, file missing): we check that every file we need exists.
* Its quantized files name their outputs ``output_0``, ``output_1``, ... in TensorFlow's order; only the
  fp32 file keeps the ONNX names. ``match_outputs`` maps them back by shape.

Layout of the result: onnx2tf turns NCHW into NHWC. Inputs are [1, H, W, C] (the batch is fixed to 1);
2-D outputs ([1, 128] descriptors, ONet's [1, k]) keep their layout, 4-D outputs (PNet's maps) come out
NHWC and are transposed back here before comparing. Names are those of the ``serving_default`` signature.

INT8 (``-oiqt -qt per-channel``): onnx2tf feeds ``(sample - mean) / std`` to the float graph; our graphs
hold their own input normalisation (dlib's mean and 1/256 are inside the embedder), so the calibration
samples are the model's raw input values and mean 0, std 1. Two files come out of one run, both kept:

* ``*_int8.tflite`` (onnx2tf ``full_integer_quant``): int8 input and int8 outputs, each with a (scale,
  zero point); the caller quantizes the input and dequantizes the outputs (``quantize``/``dequantize``).
  For the embedder, calibrated on 0..255 pixels, the input is scale 1.0, zero point -128: exact.
* ``*_int8_float_io.tflite`` (``integer_quant``): the same int8 kernels with float32 input/output; the
  interpreter quantizes and dequantizes at the edges.
"""

from __future__ import annotations

import enum
import os
import re
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from converters.paths import REPO_ROOT, make_output_dir
from converters.tflite.prep import explicit_maxpool_padding, fixed_input_shape, write_sample_data
from converters.tools import log_tail, run_tool, side_venv_program
from edge.cosine import row_cosines
from edge.errors import ConversionError, InputError, ValidationError, require
from edge.progress import timed

#: The venv ``scripts/setup_onnx2tf.sh`` creates.
DEFAULT_VENV = REPO_ROOT / ".venv-onnx2tf"
SETUP_SCRIPT = "scripts/setup_onnx2tf.sh"
ONNX2TF_VERSION = "1.29.24"
DEFAULT_TIMEOUT_S = 1800.0
SIGNATURE_KEY = "serving_default"


class TfliteVariant(enum.Enum):
    """The TFLite files we keep; the value is our file-name suffix."""

    FP32 = "fp32"
    INT8 = "int8"
    INT8_FLOAT_IO = "int8_float_io"


#: onnx2tf's file-name suffix for each variant.
_ONNX2TF_SUFFIX = {
    TfliteVariant.FP32: "_float32",
    TfliteVariant.INT8: "_full_integer_quant",
    TfliteVariant.INT8_FLOAT_IO: "_integer_quant",
}


@dataclass(frozen=True)
class TensorInfo:
    """One input or output of a TFLite signature.

    Attributes:
        name: the signature name: the ONNX name in fp32 files, ``output_<i>`` for outputs of onnx2tf's
            quantized files (see ``TfliteExport.output_names``).
        shape: the allocated shape.
        dtype: numpy dtype name, e.g. ``"int8"``.
        scale, zero_point: the quantization parameters, or None for a float tensor.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    scale: float | None = None
    zero_point: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "scale": self.scale,
            "zero_point": self.zero_point,
        }


@dataclass(frozen=True)
class TfliteExport:
    """What ``export_tflite`` produced.

    Attributes:
        source: the ONNX model converted (left untouched).
        variant: the model asked for: FP32, or INT8 (full integer, int8 in/out).
        path: that model's file.
        files: every kept file by variant (an INT8 run also keeps FP32 and INT8_FLOAT_IO).
        inputs, outputs: the signature of ``path``; inputs are NHWC, 4-D outputs NHWC.
        output_names: TFLite signature output name -> ONNX output name (onnx2tf renames the outputs of
            its quantized files ``output_0``, ...; the fp32 file keeps the ONNX names).
        seconds: wall time of the onnx2tf run.
        log_path: onnx2tf's full log.
        tool: converter name and version.
        layout: ``"NHWC"`` (an image model: its one input transposed, 4-D outputs NHWC) or ``"ONNX"`` (every
            input and output in the ONNX model's shape: ``converters.tflite.keep_layout``).
    """

    source: Path
    variant: TfliteVariant
    path: Path
    files: Mapping[TfliteVariant, Path]
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    output_names: Mapping[str, str]
    seconds: float
    log_path: Path
    tool: str = f"onnx2tf {ONNX2TF_VERSION}"
    layout: str = "NHWC"

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": str(self.source),
            "variant": self.variant.value,
            "path": str(self.path),
            "files": {v.value: str(p) for v, p in self.files.items()},
            "inputs": [t.to_dict() for t in self.inputs],
            "outputs": [t.to_dict() for t in self.outputs],
            "output_names": dict(self.output_names),
            "layout": self.layout,
            "seconds": round(self.seconds, 1),
            "log": str(self.log_path),
            "tool": self.tool,
        }


# --- quantization at the model's edges (numpy only: safe to copy to the device side) ---------------------


def quantize(x: np.ndarray, scale: float, zero_point: int, dtype: np.dtype | type) -> np.ndarray:
    """Float values to a quantized tensor: ``clip(round(x / scale) + zero_point)`` in ``dtype``'s range."""
    info = np.iinfo(dtype)
    q = np.round(np.asarray(x, dtype=np.float64) / scale) + zero_point
    return np.clip(q, info.min, info.max).astype(dtype)


def dequantize(q: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    """A quantized tensor to float32: ``scale * (q - zero_point)``, computed without integer overflow."""
    return (scale * (q.astype(np.int64) - zero_point)).astype(np.float32)


# --- the onnx2tf run ---------------------------------------------------------------------------------------


def onnx2tf_executable(venv: Path = DEFAULT_VENV) -> Path:
    """The ``onnx2tf`` CLI of ``venv``.

    Raises:
        MissingDependencyError: when the venv is not ready, naming the set-up script.
    """
    return side_venv_program(venv, "onnx2tf", "onnx2tf", SETUP_SCRIPT)


def _check_calibration(calibration: np.ndarray | None, nchw: tuple[int, ...]) -> np.ndarray:
    want = (nchw[2], nchw[3], nchw[1])
    if calibration is None:
        raise InputError("int8=True needs calibration: real samples, float32 [N, H, W, C] (NHWC)")
    if nchw[1] != 3:
        # onnx2tf auto-calibrates 3-channel images only (and mangles 4-channel data by appending a channel)
        raise InputError(f"int8 TFLite export takes 3-channel image inputs; this model's input is {list(nchw)}")
    arr = np.asarray(calibration)
    if arr.ndim != 4 or tuple(arr.shape[1:]) != want or arr.shape[0] < 1:
        raise InputError(f"calibration has shape {list(arr.shape)}; expected NHWC [N, {want[0]}, {want[1]}, {want[2]}]")
    if not np.issubdtype(arr.dtype, np.number) or not np.all(np.isfinite(arr)):
        raise InputError(f"calibration (dtype {arr.dtype}) must hold finite numbers")
    return arr.astype(np.float32)


def failed_op(log_path: Path) -> str | None:
    """The ONNX op onnx2tf failed on, ``"ReduceL2 'node_linalg_vector_norm'"``, from its log; None if it names none.

    onnx2tf logs ``ERROR: onnx_op_name: NAME`` when converting an op raised, and the op's type on the
    ``onnx_op_type: TYPE onnx_op_name: NAME`` line it printed before converting it.
    """
    try:
        text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", log_path.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return None
    failed = re.findall(r"^ERROR: onnx_op_name: (\S+)", text, flags=re.M)
    if not failed:
        return None
    types = re.findall(rf"onnx_op_type: (\S+) +onnx_op_name: {re.escape(failed[-1])}\s*$", text, flags=re.M)
    return f"{types[-1]} {failed[-1]!r}" if types else repr(failed[-1])


def _run_onnx2tf(argv: list[str], work_dir: Path, log_path: Path, timeout_s: float, what: str) -> None:
    """Run onnx2tf (the tool kills its whole group on timeout: onnx2tf spawns onnxsim); a failure names the
    ONNX op it failed on when the log says."""
    # onnx2tf runs in work_dir: the tool and its input go by absolute paths, or a relative output folder's
    # paths would be looked for under work_dir again
    argv = list(argv)
    model = argv.index("-i") + 1
    argv[0], argv[model] = str(Path(argv[0]).absolute()), str(Path(argv[model]).absolute())
    env = dict(os.environ)
    env["PATH"] = f"{Path(argv[0]).parent}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    env["CUDA_VISIBLE_DEVICES"] = ""
    try:
        run_tool(argv, timeout_s, f"onnx2tf ({what})", ConversionError, cwd=work_dir, env=env, log=log_path)
    except ConversionError as exc:
        op = failed_op(log_path)
        if op is None:
            raise
        raise ConversionError(f"{exc}\n  onnx2tf failed on the ONNX op {op}") from exc


def _argv(exe: Path, model: Path, nchw: tuple[int, ...], input_name: str, int8: bool) -> list[str]:
    argv = [str(exe), "-i", str(model), "-o", "tf", "-ois", f"{input_name}:{','.join(map(str, nchw))}"]
    if int8:
        # Calibration comes from the sample-data file (see the module docstring), normalised by mean 0, std 1.
        zeros, ones = "[[[[" + ",".join(["0.0"] * nchw[1]) + "]]]]", "[[[[" + ",".join(["1.0"] * nchw[1]) + "]]]]"
        argv += ["-oiqt", "-qt", "per-channel", "-qnm", zeros, "-qns", ones]
    return argv


def _signature(path: Path) -> tuple[Any, tuple[TensorInfo, ...], tuple[TensorInfo, ...]]:
    """Load ``path`` in LiteRT (proving the device runtime can run it) and read its serving signature."""
    from edge.runtime.litert_backend import import_interpreter

    try:
        interp = import_interpreter()(model_path=str(path), num_threads=1)
        interp.allocate_tensors()  # where LiteRT refuses ops it lacks, e.g. TensorFlow's (Flex) ones
        runner = interp.get_signature_runner(SIGNATURE_KEY)
    except (RuntimeError, ValueError) as exc:
        raise ConversionError(f"{path}: LiteRT cannot load the converted model ({exc})") from exc

    def info(details: Mapping[str, Mapping[str, Any]]) -> tuple[TensorInfo, ...]:
        out = []
        for name, d in details.items():
            scale, zero_point = d.get("quantization", (0.0, 0))
            quantized = bool(scale) and np.issubdtype(np.dtype(d["dtype"]), np.integer)
            out.append(
                TensorInfo(
                    name=name,
                    shape=tuple(int(x) for x in d["shape"]),
                    dtype=np.dtype(d["dtype"]).name,
                    scale=float(scale) if quantized else None,
                    zero_point=int(zero_point) if quantized else None,
                )
            )
        return tuple(out)

    return runner, info(runner.get_input_details()), info(runner.get_output_details())


def graph_summary(path: Path) -> dict[str, dict[str, int]]:
    """Op counts of a TFLite file and the dtypes of its conv / dense weights, for reports and tests.

    Returns:
        ``{"ops": {op name: count}, "weights": {dtype name: count}}``.

    Raises:
        ConversionError: LiteRT cannot load the file.
    """
    from edge.runtime.litert_backend import import_interpreter

    try:
        interp = import_interpreter()(model_path=str(path), num_threads=1)
        ops = interp._get_ops_details()  # the only op listing the Python interpreter offers
        tensors = {t["index"]: t for t in interp.get_tensor_details()}
    except (RuntimeError, ValueError) as exc:
        raise ConversionError(f"{path}: LiteRT cannot load the model ({exc})") from exc
    weighted = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED")
    weights = [np.dtype(tensors[op["inputs"][1]]["dtype"]).name for op in ops if op["op_name"] in weighted]
    return {"ops": dict(Counter(op["op_name"] for op in ops)), "weights": dict(Counter(weights))}


def _collect(tf_dir: Path, stem: str, out_dir: Path, variants: tuple[TfliteVariant, ...], what: str, log: Path):
    files = {}
    for variant in variants:
        made = tf_dir / f"{stem}{_ONNX2TF_SUFFIX[variant]}.tflite"
        if not made.is_file():
            raise ConversionError(
                f"{what}: onnx2tf finished but wrote no {made.name} ({variant.value}); last lines of {log}:\n"
                + log_tail(log)
            )
        files[variant] = out_dir / f"{stem}_{variant.value}.tflite"
        shutil.move(made, files[variant])
    return files


def export_tflite(
    onnx_path: Path,
    out_dir: Path,
    *,
    int8: bool,
    calibration: np.ndarray | None,
    input_name: str,
    input_shape: tuple[int, ...] | None = None,
    progress: Callable[[str], None] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    venv: Path = DEFAULT_VENV,
) -> TfliteExport:
    """Convert an ONNX model to TFLite with onnx2tf: fp32, or full-integer INT8 calibrated on real samples.

    The ONNX file is not modified (onnx2tf gets a copy). Writes ``<stem>_fp32.tflite`` and, for INT8, also
    ``<stem>_int8.tflite`` (int8 in/out) and ``<stem>_int8_float_io.tflite`` into ``out_dir``, plus
    ``<stem>_<variant>.onnx2tf.log``.

    Args:
        onnx_path: the model; one 4-D NCHW float input named ``input_name``.
        out_dir: folder for the results (created if missing).
        int8: False for fp32; True for full-integer INT8 (per-channel weights, int8 activations).
        calibration: for INT8, float32 [N, H, W, C] (NHWC) real samples holding the model's raw input values
            (what the ONNX model is fed, transposed); ignored for fp32.
        input_name: the ONNX input's name.
        input_shape: NCHW shape to convert at, batch 1; default the model's with a dynamic batch set to 1
            (needed when H or W are dynamic, as in MTCNN's PNet).
        progress: called with one line per step.
        timeout_s: limit for the onnx2tf run.
        venv: where onnx2tf is installed.

    Returns:
        A TfliteExport for the requested variant.

    Raises:
        InputError: missing file, unknown input, bad shape or calibration.
        MissingDependencyError: onnx2tf's venv is missing.
        ConversionError: onnx2tf failed or timed out (quoting its log), or LiteRT cannot load the result.
    """
    onnx_path, out_dir = Path(onnx_path), Path(out_dir)
    say = progress or (lambda _msg: None)
    if not onnx_path.is_file():
        raise InputError(f"{onnx_path}: no such ONNX file")
    exe = onnx2tf_executable(venv)
    nchw = fixed_input_shape(onnx_path, input_name, input_shape)
    calib = _check_calibration(calibration, nchw) if int8 else None
    variant = TfliteVariant.INT8 if int8 else TfliteVariant.FP32
    variants = tuple(TfliteVariant) if int8 else (TfliteVariant.FP32,)
    stem, what = onnx_path.stem, f"{onnx_path.name} -> TFLite {variant.value}"
    out_dir = make_output_dir(out_dir)
    log_path = out_dir / f"{stem}_{variant.value}.onnx2tf.log"
    with tempfile.TemporaryDirectory(prefix="onnx2tf-", dir=out_dir) as tmp:
        work = Path(tmp)
        model_copy = work / onnx_path.name  # onnx2tf overwrites its input: give it a copy
        shutil.copyfile(onnx_path, model_copy)
        explicit_maxpool_padding(model_copy, input_name, nchw)
        write_sample_data(work, calib)
        calibrating = f", calibrating on {len(calib)} samples" if calib is not None else ""
        start = time.perf_counter()
        with timed(say, f"onnx2tf: {what} at {list(nchw)}{calibrating}", f"onnx2tf {what} {list(nchw)}"):
            _run_onnx2tf(_argv(exe, model_copy, nchw, input_name, int8), work, log_path, timeout_s, what)
        seconds = time.perf_counter() - start
        files = _collect(work / "tf", stem, out_dir, variants, what, log_path)
    signatures = {v: _signature(path)[1:] for v, path in files.items()}  # every kept file must load
    inputs, outputs = signatures[variant]
    fp32_outputs = signatures[TfliteVariant.FP32][1]
    names = match_outputs(outputs, {o.name: _onnx_layout(o.shape) for o in fp32_outputs}, str(files[variant]))
    say(f"onnx2tf: {files[variant].name} ({files[variant].stat().st_size / 1e6:.1f} MB) in {seconds:.0f} s")
    return TfliteExport(
        onnx_path, variant, files[variant], files, inputs, outputs, {v: k for k, v in names.items()}, seconds, log_path
    )


def _onnx_layout(shape: tuple[int, ...]) -> tuple[int, ...]:
    """A TFLite output shape in ONNX layout: onnx2tf's 4-D NHWC back to NCHW."""
    return (shape[0], shape[3], shape[1], shape[2]) if len(shape) == 4 else tuple(shape)


def match_outputs(outputs: tuple[TensorInfo, ...], wanted: Mapping[str, tuple[int, ...]], where: str) -> dict[str, str]:
    """Map each wanted ONNX output name to a TFLite signature output name.

    onnx2tf keeps the ONNX names in the fp32 signature but its quantized files name them ``output_0``,
    ``output_1``, ... in an order of TensorFlow's choosing. A name that is present is used as is; otherwise
    the output is matched by its shape (batch excluded, ONNX layout), which must be unique.

    Args:
        outputs: the TFLite signature outputs.
        wanted: ONNX output name -> shape (any batch).
        where: the file, for messages.

    Returns:
        ONNX name -> TFLite signature name.

    Raises:
        ValidationError: when an output has no counterpart or its shape matches several.
    """
    by_name = {o.name: o for o in outputs}
    mapping: dict[str, str] = {}
    for name, shape in wanted.items():
        if name in by_name:
            mapping[name] = name
            continue
        same = [o.name for o in outputs if _onnx_layout(o.shape)[1:] == tuple(shape)[1:] and o.name not in wanted]
        if len(same) != 1:
            have = {o.name: list(_onnx_layout(o.shape)) for o in outputs}
            raise ValidationError(
                f"{where}: cannot tell which output is ONNX {name!r} {list(shape)}: {len(same)} candidates among {have}"
            )
        mapping[name] = same[0]
    if len(set(mapping.values())) != len(mapping):
        raise ValidationError(f"{where}: two ONNX outputs map to one TFLite output: {mapping}")
    return mapping


# --- comparison with the ONNX twin --------------------------------------------------------------------------


def _run_tflite(runner: Any, inputs: tuple[TensorInfo, ...], outputs: tuple[TensorInfo, ...], chip: np.ndarray):
    """One NCHW sample through a signature runner; returns float32 outputs in ONNX layout (NCHW for 4-D)."""
    spec = inputs[0]
    x = np.transpose(chip[None].astype(np.float32), (0, 2, 3, 1))
    if tuple(x.shape) != spec.shape:
        raise InputError(
            f"sample shape {list(chip.shape)} (NHWC {list(x.shape)}) does not fit the input {list(spec.shape)}"
        )
    if spec.scale is not None:
        x = quantize(x, spec.scale, spec.zero_point or 0, np.dtype(spec.dtype))
    raw = runner(**{spec.name: x})
    result = {}
    for out in outputs:
        y = raw[out.name]
        y = dequantize(y, out.scale, out.zero_point or 0) if out.scale is not None else y.astype(np.float32)
        result[out.name] = np.transpose(y, (0, 3, 1, 2)) if y.ndim == 4 else y
    return result


@dataclass(frozen=True)
class TfliteRun:
    """What ``run_tflite`` measured: float32 outputs of a TFLite model over samples, keyed by ONNX name.

    Attributes:
        input: the signature's input (its scale and zero point when it is quantized).
        outputs: ONNX output name -> the TFLite signature output it was matched to.
        values: ONNX output name -> [N, ...] float32 (dequantized if quantized), in ONNX layout.
    """

    input: TensorInfo
    outputs: Mapping[str, TensorInfo]
    values: Mapping[str, np.ndarray]


def _check_chips(chips_nchw: np.ndarray) -> np.ndarray:
    chips = np.asarray(chips_nchw, dtype=np.float32)
    if chips.ndim != 4 or len(chips) == 0:
        raise InputError(f"chips_nchw has shape {list(chips.shape)}; expected [N, C, H, W] with N >= 1")
    return chips


def run_tflite(tflite_path: Path, chips_nchw: np.ndarray, wanted: Mapping[str, tuple[int, ...]]) -> TfliteRun:
    """Run a TFLite model on LiteRT over NCHW samples, one at a time, as the device would.

    A quantized input is fed ``quantize(x, scale, zero_point)``; quantized outputs are dequantized with
    ``scale * (q - zero_point)``. Outputs are matched to ``wanted`` with ``match_outputs``.

    Args:
        tflite_path: the converted model (one NHWC input of batch 1, as onnx2tf writes it).
        chips_nchw: float32 [N, C, H, W] samples, as the ONNX model takes them.
        wanted: ONNX output name -> shape (any batch, ONNX layout).

    Returns:
        A TfliteRun.

    Raises:
        InputError: samples not 4-D or not fitting the model.
        ConversionError: LiteRT cannot load the file.
        ValidationError: a wanted output has no TFLite counterpart.
    """
    chips = _check_chips(chips_nchw)
    runner, inputs, outputs = _signature(Path(tflite_path))
    mapping = match_outputs(outputs, wanted, str(tflite_path))
    per_sample = [_run_tflite(runner, inputs, outputs, chip) for chip in chips]
    specs = {o.name: o for o in outputs}
    return TfliteRun(
        inputs[0],
        {name: specs[key] for name, key in mapping.items()},
        {name: np.concatenate([s[key] for s in per_sample]) for name, key in mapping.items()},
    )


def compare_tflite_with_onnx(tflite_path: Path, onnx_path: Path, chips_nchw: np.ndarray) -> dict[str, Any]:
    """Run a TFLite model and its ONNX twin on the same samples and measure how far apart their outputs are.

    The TFLite model runs in ai-edge-litert one sample at a time (``run_tflite``: NHWC, batch 1, quantized
    input and dequantized outputs). ONNX runs in onnxruntime on the whole batch.

    Args:
        tflite_path: the converted model.
        onnx_path: its source, one input.
        chips_nchw: float32 [N, C, H, W] samples, as the ONNX model takes them.

    Returns:
        ``{"samples", "input": {...}, "outputs": {name: {"shape", "dtype", "quantized", "max_abs_diff",
        "mean_cosine", "min_cosine"}}, "max_abs_diff", "mean_cosine", "min_cosine"}``; the last three
        aggregate all outputs (max, mean of means, min); cosines are per sample over the flattened output.

    Raises:
        InputError: samples not 4-D or not fitting the model.
        ConversionError: LiteRT cannot load the TFLite file.
        InferenceError: onnxruntime cannot run the ONNX file.
        ValidationError: an ONNX output has no TFLite counterpart of the same shape.
    """
    from converters.validate import run_onnx

    chips = _check_chips(chips_nchw)
    ort = require("onnxruntime", "device", "Comparing a TFLite model with ONNX")
    try:
        onnx_inputs = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"]).get_inputs()
    except Exception as exc:  # onnxruntime raises its own untyped exceptions
        raise InputError(f"{onnx_path}: onnxruntime cannot load it ({exc})") from exc
    reference = run_onnx(Path(onnx_path), {onnx_inputs[0].name: chips})
    run = run_tflite(Path(tflite_path), chips, {k: v.shape for k, v in reference.items()})
    report: dict[str, Any] = {
        "tflite": str(tflite_path),
        "onnx": str(onnx_path),
        "samples": int(len(chips)),
        "input": run.input.to_dict(),
        "outputs": {},
    }
    for name, ref in reference.items():
        got, spec = run.values[name], run.outputs[name]
        if got.shape != ref.shape:
            raise ValidationError(f"{tflite_path}: output {name!r} has shape {list(got.shape)}, ONNX {list(ref.shape)}")
        cos = row_cosines(got, ref)
        report["outputs"][name] = {
            "tflite_name": spec.name,
            "shape": list(ref.shape),
            "dtype": spec.dtype,
            "quantized": spec.scale is not None,
            "max_abs_diff": float(np.max(np.abs(got.astype(np.float64) - ref))),
            "mean_cosine": float(np.mean(cos)),
            "min_cosine": float(np.min(cos)),
        }
    outs = report["outputs"].values()
    report["max_abs_diff"] = max(o["max_abs_diff"] for o in outs)
    report["mean_cosine"] = float(np.mean([o["mean_cosine"] for o in outs]))
    report["min_cosine"] = min(o["min_cosine"] for o in outs)
    return report
