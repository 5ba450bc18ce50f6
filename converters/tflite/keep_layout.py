"""ONNX -> fp32 TFLite with onnx2tf for models that are not images: every input keeps its ONNX shape and dtype.

onnx2tf reads a 3-D, 4-D or 5-D input as channels-first (NCW, NCHW, NCDHW) and makes the TFLite input
channels-last. ``-kat`` (``--keep_shape_absolutely_input_names``) keeps the named inputs exactly as the ONNX
model has them, and onnx2tf then converts the graph in that layout; we name every input there. (In onnx2tf
1.29 ``-k`` is ``--keep_ncw_or_nchw_or_ncdhw_input_names``, which keeps an NCHW *input* but transposes it
right after it for a channels-last graph, and ``-kt`` is ``--keep_nwc_or_nhwc_or_ndhwc_input_names``: neither
is what a token sequence [1, L, C] needs.) Inputs of any rank and of dtype float32, int64 or int32 (token ids)
are converted; the TFLite inputs keep the dtype (int64 ids stay int64).

Two onnx2tf 1.29.24 failures are worked around here: it turns Erf (in GELU: every BERT-style encoder) into
TensorFlow's ``erf``, a "Flex" op LiteRT's interpreter does not run, so ``-rtpo Erf`` asks for its
``replace_to_pseudo_operators`` form (an approximation by builtin ops: all-MiniLM-L6-v2's twin was then within
2.2e-7 of the fp32 ONNX); and it fails on a ReduceL2 whose axes are an input (opset 18+), which
``prep.reduce_l2_as_sum_square`` rewrites in the copy as ReduceSumSquare + Sqrt. The twin is compared with the
ONNX model on every evaluation sample, so an approximation that is not close enough fails the build.

What ``converters.tflite.convert`` handles for the image route holds here too: onnx2tf gets a copy (it
overwrites its input), the sample-data file it would download is written first (it reads it when every
input is 4-D with 3 channels last, which a kept input can be), its ``onnxsim`` is on PATH, and a failed run
raises ConversionError naming the model and quoting the end of its log. The input shapes must be fixed in the
file (``convert model``'s fp32 copy is); the converted inputs are checked to be the ONNX ones.

Outputs are matched to the ONNX outputs by name (the fp32 file keeps them, as ``onnx2tf_name`` spells them);
else by shape among the outputs not matched by name, in signature order when several have that shape; else
by the channels-last form of the ONNX shape, transposed back. The caller compares the values with the ONNX
model, which tells a wrong match.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from converters.paths import make_output_dir
from converters.tflite.convert import (
    DEFAULT_TIMEOUT_S,
    DEFAULT_VENV,
    TensorInfo,
    TfliteExport,
    TfliteVariant,
    _collect,
    _run_onnx2tf,
    _signature,
    onnx2tf_executable,
)
from converters.tflite.prep import reduce_l2_as_sum_square, write_sample_data
from edge.errors import ConversionError, InputError, ValidationError, require
from edge.progress import timed

#: ``TfliteExport.layout`` of a model converted here.
LAYOUT = "ONNX"
#: An output matched by name or shape needs no transpose; one matched channels-last carries the axes to undo it.
OutputMatch = tuple[str, tuple[int, ...] | None]


def onnx2tf_name(name: str) -> str:
    """The name onnx2tf gives an ONNX input or output: ``:`` becomes ``__``, a leading ``/`` becomes ``wa/``."""
    return re.sub("^/", "wa/", name.replace(":", "__"))


def _onnx_output_names(onnx_path: Path) -> list[str]:
    onnx = require("onnx", "convert", "Reading an ONNX model before TFLite conversion")
    try:
        graph = onnx.load(str(onnx_path), load_external_data=False).graph
    except Exception as exc:  # protobuf raises DecodeError and others: all mean "not an ONNX model"
        raise ConversionError(f"{onnx_path}: not a readable ONNX model ({type(exc).__name__}: {exc})") from exc
    return [o.name for o in graph.output]


def _text(shapes: Mapping[str, Sequence[int]]) -> str:
    return ", ".join(f"{name}={'x'.join(map(str, shape))}" for name, shape in shapes.items())


def _check_inputs_kept(got: tuple[TensorInfo, ...], inputs: Mapping[str, tuple[int, ...]], path: Path) -> None:
    have = {t.name: t.shape for t in got}
    want = {onnx2tf_name(name): tuple(shape) for name, shape in inputs.items()}
    if have != want:
        raise ConversionError(
            f"{path.name}: onnx2tf wrote inputs {_text(have)}; expected the ONNX inputs unchanged, {_text(want)}"
        )


def export_tflite_keep_layout(
    onnx_path: Path,
    out_dir: Path,
    inputs: Mapping[str, tuple[int, ...]],
    *,
    progress: Callable[[str], None] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    venv: Path = DEFAULT_VENV,
) -> TfliteExport:
    """Convert an ONNX model to an fp32 TFLite whose inputs are the ONNX model's, shape and dtype unchanged.

    The ONNX file is not modified (onnx2tf gets a copy). Writes ``<stem>_fp32.tflite`` and
    ``<stem>_fp32.onnx2tf.log`` into ``out_dir``.

    Args:
        onnx_path: the model, its input shapes fixed in the file.
        out_dir: folder for the results (created if missing).
        inputs: every graph input's name and fixed shape, as in the file.
        progress: called with one line per step.
        timeout_s: limit for the onnx2tf run.
        venv: where onnx2tf is installed.

    Returns:
        A TfliteExport (``layout`` ``"ONNX"``; ``output_names`` holds the outputs onnx2tf kept by name).

    Raises:
        InputError: missing file.
        MissingDependencyError: onnx2tf's venv is missing.
        ConversionError: onnx2tf failed or timed out (naming the model, quoting its log), LiteRT cannot load
            the result, or its inputs are not the ONNX model's.
    """
    onnx_path, out_dir = Path(onnx_path), Path(out_dir)
    say = progress or (lambda _msg: None)
    if not onnx_path.is_file():
        raise InputError(f"{onnx_path}: no such ONNX file")
    exe = onnx2tf_executable(venv)
    outputs = _onnx_output_names(onnx_path)
    stem, what = onnx_path.stem, f"{onnx_path.name} -> TFLite fp32"
    out_dir = make_output_dir(out_dir)
    log_path = out_dir / f"{stem}_fp32.onnx2tf.log"
    with tempfile.TemporaryDirectory(prefix="onnx2tf-", dir=out_dir) as tmp:
        work = Path(tmp)
        model_copy = work / onnx_path.name  # onnx2tf overwrites its input: give it a copy
        shutil.copyfile(onnx_path, model_copy)
        write_sample_data(work)  # never downloaded (see the module docstring)
        reduce_l2_as_sum_square(model_copy)
        argv = [str(exe), "-i", str(model_copy), "-o", "tf", "-kat", *(onnx2tf_name(n) for n in inputs)]
        argv += ["-rtpo", "Erf"]  # else a Flex op LiteRT does not run (see the module docstring)
        start = time.perf_counter()
        with timed(say, f"onnx2tf: {what}, inputs kept as in the ONNX model ({_text(inputs)})", f"onnx2tf {what}"):
            _run_onnx2tf(argv, work, log_path, timeout_s, what)
        seconds = time.perf_counter() - start
        files = _collect(work / "tf", stem, out_dir, (TfliteVariant.FP32,), what, log_path)
    path = files[TfliteVariant.FP32]
    _, got_inputs, got_outputs = _signature(path)
    _check_inputs_kept(got_inputs, inputs, path)
    kept = {onnx2tf_name(name): name for name in outputs}
    names = {o.name: kept[o.name] for o in got_outputs if o.name in kept}
    say(f"onnx2tf: {path.name} ({path.stat().st_size / 1e6:.1f} MB) in {seconds:.0f} s")
    return TfliteExport(
        onnx_path, TfliteVariant.FP32, path, files, got_inputs, got_outputs, names, seconds, log_path, layout=LAYOUT
    )


def _by_shape(free: list[TensorInfo], name: str, shape: tuple[int, ...], where: str) -> OutputMatch:
    same = [o.name for o in free if o.shape[1:] == shape[1:]]
    if same:
        return same[0], None  # several of that shape: signature order (the caller's comparison checks it)
    if len(shape) >= 3:
        last = (*shape[2:], shape[1])
        moved = [o.name for o in free if o.shape[1:] == last]
        if moved:
            return moved[0], (0, len(shape) - 1, *range(1, len(shape) - 1))
    have = {o.name: list(o.shape) for o in free}
    raise ValidationError(f"{where}: no output for ONNX {name!r} {list(shape)}; outputs not matched by name: {have}")


def match_outputs_keep_layout(
    outputs: Sequence[TensorInfo], wanted: Mapping[str, tuple[int, ...]], where: str
) -> dict[str, OutputMatch]:
    """Map each ONNX output to a TFLite signature output (see the module docstring for the order of rules).

    Args:
        outputs: the TFLite signature outputs.
        wanted: ONNX output name -> shape (any batch).
        where: the file, for messages.

    Returns:
        ONNX name -> (TFLite signature name, the axes that bring it back to the ONNX layout, or None).

    Raises:
        ValidationError: an ONNX output has no counterpart.
    """
    by_name = {o.name: o for o in outputs}
    mapping: dict[str, OutputMatch] = {}
    for name in wanted:
        if onnx2tf_name(name) in by_name:
            mapping[name] = (onnx2tf_name(name), None)
    for name, shape in wanted.items():
        if name not in mapping:
            taken = {key for key, _ in mapping.values()}
            mapping[name] = _by_shape([o for o in outputs if o.name not in taken], name, tuple(shape), where)
    return mapping


@dataclass(frozen=True)
class KeptRun:
    """What ``run_tflite_keep_layout`` measured.

    Attributes:
        inputs: the signature's inputs (ONNX shapes and dtypes).
        outputs: ONNX output name -> the TFLite signature output it was matched to.
        values: ONNX output name -> [N, ...] outputs, in ONNX layout.
    """

    inputs: tuple[TensorInfo, ...]
    outputs: Mapping[str, TensorInfo]
    values: Mapping[str, np.ndarray]


def _feed(x: np.ndarray, spec: TensorInfo, name: str, where: str) -> np.ndarray:
    """One sample for ``spec``: its shape, and its dtype when the values survive the cast (int64 ids to int32)."""
    if tuple(x.shape) != spec.shape:
        raise InputError(f"{where}: input {name!r} takes {list(spec.shape)}; a sample is {list(x.shape)}")
    y = x.astype(spec.dtype)
    if not np.array_equal(y, x):
        raise InputError(f"{where}: input {name!r} takes {spec.dtype}; the {x.dtype} samples do not fit in it")
    return y


def run_tflite_keep_layout(
    tflite_path: Path, feeds: Mapping[str, np.ndarray], wanted: Mapping[str, tuple[int, ...]]
) -> KeptRun:
    """Run a TFLite model made by ``export_tflite_keep_layout`` on LiteRT, one sample at a time.

    Args:
        tflite_path: the model (inputs of batch 1).
        feeds: ONNX input name -> [N, ...] samples (the same N for every input), as the ONNX model takes them.
        wanted: ONNX output name -> shape (any batch).

    Returns:
        A KeptRun.

    Raises:
        InputError: a sample that does not fit its input.
        ConversionError: LiteRT cannot load the file.
        ValidationError: an input or output has no TFLite counterpart.
    """
    runner, inputs, outputs = _signature(Path(tflite_path))
    where = str(tflite_path)
    by_name = {t.name: t for t in inputs}
    specs = {name: by_name.get(onnx2tf_name(name)) for name in feeds}
    for name, spec in specs.items():
        if spec is None:
            raise ValidationError(f"{where}: no input for ONNX {name!r}; its inputs are {sorted(by_name)}")
    mapping = match_outputs_keep_layout(outputs, wanted, where)
    parts: dict[str, list[np.ndarray]] = {name: [] for name in wanted}
    for i in range(len(next(iter(feeds.values())))):
        raw = runner(**{s.name: _feed(feeds[n][i : i + 1], s, n, where) for n, s in specs.items() if s is not None})
        for name, (key, axes) in mapping.items():
            parts[name].append(np.transpose(raw[key], axes) if axes else np.asarray(raw[key]))
    by_key = {o.name: o for o in outputs}
    return KeptRun(
        inputs,
        {name: by_key[key] for name, (key, _) in mapping.items()},
        {name: np.concatenate(p) for name, p in parts.items()},
    )
