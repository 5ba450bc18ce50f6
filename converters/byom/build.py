"""``edge-deploy convert model``: a user's ONNX model for a target, checked against itself on the user's data.

Stages: read and check the model and the data (``source``, ``feeds``) -> the fp32 copy with fixed input
shapes -> (int8) static QDQ calibrated on ``--calib`` with the profile's settings, and an ORT-format copy for
the target's CPU -> run the source and the candidate on ``--eval`` (a QDQ candidate unfused, like the face
gate: ``Optimization.NONE``) -> the gate by task (``gate``) -> ``models.json`` (passed builds only),
``report.json`` and ``report.md``.

Everything is written to a temporary folder beside the output folder and moved into place at the end: an
error leaves nothing in the output folder; a failed gate leaves the report and the candidate files (no
models.json) and then raises ValidationError listing every missed threshold.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from converters.byom.execute import run_model
from converters.byom.feeds import Samples, check_disjoint
from converters.byom.frontends import Frontend, read_model
from converters.byom.gate import GateThresholds, Task, failures, fp32_failures, measure, measure_raw
from converters.byom.images import ImageOptions, read_data
from converters.byom.report import write_models_json, write_reports
from converters.byom.source import SourceModel, TensorSpec, resolve_inputs
from converters.compile import to_ort_format
from converters.quantize import QuantMode, QuantSettings, op_counts, quantize_model, settings_for, weight_matmuls
from converters.timing import Laps
from edge.digest import file_sha256
from edge.errors import ConversionError, InputError, ValidationError
from edge.profiles import Arch, Precision, TargetProfile
from edge.progress import ProgressFn, silent, timed
from edge.runtime import default_threads
from edge.runtime.ort_session import Optimization

#: The precisions ``convert model`` builds.
PRECISIONS = (Precision.FP32, Precision.INT8)


@dataclass(frozen=True)
class ModelJob:
    """What to convert, for which target, and how to judge it (the CLI's flags, as types)."""

    model: Path
    out_dir: Path
    profile: TargetProfile
    precision: Precision
    task: Task
    evaluation: Path
    calibration: Path | None = None
    input_shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    thresholds: GateThresholds = field(default_factory=GateThresholds)
    #: int8 only: dynamic INT8 (weights quantized ahead, activations at run time; no calibration) instead of
    #: static QDQ. Transformers need it: all-MiniLM-L6-v2 kept cosine 0.993 dynamic, 0.33 static (docs/byom.md).
    dynamic: bool = False
    #: int8 only: weight-only INT8 (every weight MatMul as an 8-bit blockwise MatMulNBits at accuracy level 0:
    #: fp32 activations and arithmetic, so no calibration, and the same figures on every host and target).
    weight_only: bool = False
    #: How image folders given as --calib / --eval become tensors (mean, std, layout).
    images: ImageOptions = field(default_factory=ImageOptions)
    #: The model's licence, recorded in models.json and carried into a bundle (None: ``UNKNOWN_LICENCE``).
    licence: str | None = None
    #: Also the TFLite twin (onnx2tf; ``converters.byom.tflite_twin``): fp32, compared with the fp32 copy; or,
    #: at static int8, full-integer INT8 calibrated on ``calibration`` and gated against the source.
    tflite: bool = False


@dataclass
class ModelBuild:
    """What ``convert_model`` produced; ``to_dict`` is report.json and the CLI's ``--json``."""

    job: ModelJob
    source: SourceModel
    inputs: tuple[TensorSpec, ...]
    files: dict[str, dict] = field(default_factory=dict)
    shipped: str = ""
    settings: QuantSettings | None = None
    quant_ops: dict[str, int] = field(default_factory=dict)
    calibration: dict = field(default_factory=dict)
    evaluation: dict = field(default_factory=dict)
    figures: dict = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    #: Which runtime (and release) of the target loaded which files (``converters.byom.target_ops``).
    target_runtime: dict = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return not self.failures

    def raise_if_failed(self) -> None:
        """Raise ValidationError listing every missed threshold (the report is already on disk)."""
        if self.failures:
            raise ValidationError(
                f"{self.job.model}: {self.job.precision.value} model for {self.job.profile.name} failed the "
                f"{self.job.task.value} gate (see {self.job.out_dir / 'report.md'}; no models.json written):\n  "
                + "\n  ".join(self.failures)
            )


def _check_job(job: ModelJob) -> None:
    if job.precision not in PRECISIONS:
        allowed = ", ".join(p.value for p in PRECISIONS)
        raise InputError(f"--precision {job.precision.value}: convert model builds {allowed}")
    for name, given in (("dynamic", job.dynamic), ("weight-only", job.weight_only)):
        if given and job.precision is not Precision.INT8:
            raise InputError(f"--{name} is a kind of int8; got --precision {job.precision.value}")
        if given and job.calibration is not None:
            raise InputError(f"--calib {job.calibration}: {name} INT8 is not calibrated; drop --calib or --{name}")
    for name, given in (("dynamic", job.dynamic), ("weight-only", job.weight_only)):
        if given and job.tflite:
            raise InputError(
                f"--format tflite with --{name}: the INT8 TFLite twin is full integer, calibrated on --calib (static "
                f"INT8); drop --{name} and give --calib, or drop --format tflite"
            )
    if job.dynamic and job.weight_only:
        raise InputError("--dynamic and --weight-only are two kinds of int8; choose one")
    if job.precision is Precision.INT8 and job.calibration is None and not (job.dynamic or job.weight_only):
        raise InputError(
            f"{job.model}: int8 needs --calib FILE.npz or DIR (representative inputs: one array per model input, "
            "or a folder of images) to set the activation ranges (or --dynamic: activations quantized at run "
            "time; or --weight-only: 8-bit weights, float activations); nothing else is used in its place"
        )
    job.thresholds.check()
    job.images.check()
    if job.licence is not None and not job.licence.strip():
        raise InputError("--licence '': expected the model's licence, e.g. Apache-2.0")
    folders = [p for p in (job.evaluation, job.calibration) if p is not None and Path(p).is_dir()]
    if job.images.given and not folders:
        raise InputError(
            "--mean/--std/--layout: apply to image folders, and neither --calib nor --eval is one (a .npz is "
            "taken as it is: normalise its tensors yourself)"
        )
    out = Path(job.out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise InputError(f"-o {out}: exists and is not an empty folder; choose a new output folder")


def _read_data(job: ModelJob, inputs: Sequence[TensorSpec]) -> tuple[Samples, Samples | None, int]:
    batches = {int(s.shape[0]) if s.shape else 1 for s in inputs}
    if len(batches) > 1 or any(not s.shape for s in inputs):
        shapes = ", ".join(f"{s.name}={s.shape_text()}" for s in inputs)
        raise InputError(f"{job.model}: inputs {shapes}; expected every input to have the same batch (axis 0)")
    evaluation = read_data(job.evaluation, job.model, inputs, "--eval", job.images)
    if job.task is Task.EMBEDDING and evaluation.count < 2:
        raise InputError(f"--eval {job.evaluation}: 1 sample; the embedding gate ranks neighbours and needs at least 2")
    if job.precision is not Precision.INT8 or job.calibration is None:
        return evaluation, None, 0
    calib = read_data(job.calibration, job.model, inputs, "--calib", job.images)
    return evaluation, calib, check_disjoint(calib, evaluation)


def _file_info(path: Path) -> dict:
    return {"file": path.name, "size": path.stat().st_size, "sha256": file_sha256(path)}


#: Op types counted in the report: the QDQ pairs of static INT8, the integer ops of dynamic INT8.
QUANT_OPS = ("QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "MatMulInteger", "ConvInteger")


def _quantize(build: ModelBuild, fp32: Path, calib: Samples | None, work: Path, progress: ProgressFn) -> Path:
    profile = build.job.profile
    if build.job.weight_only:
        # level 0: fp32 activations and arithmetic in MatMulNBits, what the gate measures on any host
        build.settings = settings_for(profile, QuantMode.INT8_WEIGHT_ONLY, int4_accuracy_level=0)
        targets = weight_matmuls(fp32)
        if not targets:
            raise InputError(
                f"{build.job.model}: --weight-only quantizes MatMul nodes with a constant 2-D weight, and the "
                "model has none; use static INT8 (--calib) or --dynamic"
            )
        line = f"weight-only INT8: {len(targets)} MatMul weights to 8-bit blocks of {build.settings.int4_block_size}"
    elif calib is None:
        build.settings = settings_for(profile, QuantMode.DYNAMIC)
        line = "dynamic INT8 (weights now, activations at run time)"
    else:
        build.settings = settings_for(profile, QuantMode.STATIC_QDQ)
        line = f"static INT8 (QDQ) calibrated on {calib.count} samples of {calib.path.name}"
    feeds = calib.batches(build.inputs) if calib is not None else None
    stem = fp32.name.removesuffix(".fp32.onnx")
    with timed(progress, line, f"model: quantize {stem} {build.settings.mode.value} {profile.name}"):
        int8 = quantize_model(fp32, work / f"{stem}.int8.onnx", build.settings, feeds)
    counts = op_counts(int8)
    if build.job.weight_only:
        build.quant_ops = {"MatMulNBits": counts.get("MatMulNBits", 0), "MatMul": counts.get("MatMul", 0)}
    elif calib is not None:
        build.quant_ops = {op: counts.get(op, 0) for op in ("QuantizeLinear", "DequantizeLinear")}
    else:
        build.quant_ops = {op: counts[op] for op in QUANT_OPS if counts.get(op)}
    build.files["int8_onnx"] = _file_info(int8)
    build.shipped = "int8_onnx"
    if profile.cpu.arch is not Arch.WASM32:
        with timed(progress, "ORT format for the target's CPU", f"model: ORT format {stem} {profile.name}"):
            build.files["int8_ort"] = _file_info(to_ort_format(int8, work, profile))
        build.shipped = "int8_ort"
    return int8


def _evaluate(
    build: ModelBuild, frontend: Frontend, fp32: Path, candidate: Path, evaluation: Samples, progress: ProgressFn
) -> tuple[list[str], list]:
    """Gate ``candidate`` (and the fp32 copy) against the source; returns the source's output names and outputs."""
    job = build.job
    threads = max(1, min(job.profile.runtime.threads, default_threads()))
    batches = evaluation.batches(build.inputs)
    progress(f"running the source and the candidate on {evaluation.count} samples of {evaluation.path.name}")
    names, ref = frontend.run(batches, threads)
    _, copy = run_model(fp32, batches, threads, Optimization.ALL, progress, "batches, fp32 copy")
    fp32_figures = measure_raw(names, ref, copy)
    build.failures = fp32_failures(fp32_figures, job.thresholds.fp32_max_abs)
    if candidate == fp32:
        build.figures = measure(job.task, names, ref, copy)
        build.figures["fp32_copy"] = fp32_figures
        return names, ref
    # Unfused, the QDQ graph computes the target's integer arithmetic (up to float rounding) on any host.
    _, cand = run_model(candidate, batches, threads, Optimization.NONE, progress, "batches, candidate")
    build.figures = measure(job.task, names, ref, cand)
    build.figures["fp32_copy"] = fp32_figures
    build.failures += failures(job.task, build.figures, job.thresholds)
    return names, ref


def _build_into(build: ModelBuild, frontend: Frontend, work: Path, progress: ProgressFn) -> None:
    """Every stage, writing into ``work``."""
    job, lap = build.job, Laps()
    evaluation, calib, shared = _read_data(job, build.inputs)
    build.evaluation = {**evaluation.to_dict(), "shared_with_calibration": shared}
    unused = " (--calib given, not used)" if job.calibration else ""
    reason = "not needed for fp32" + unused
    if job.dynamic:
        reason = "dynamic INT8: activations quantized at run time"
    elif job.weight_only:
        reason = "weight-only INT8: activations stay float"

    build.calibration = calib.to_dict() if calib else {"samples": 0, "reason": reason}
    lap("read")
    stem = job.model.name.removesuffix(f".{build.source.format}")
    if build.source.format == "onnx":
        fp32 = frontend.write_fp32(build.inputs, work / f"{stem}.fp32.onnx")
    else:
        verb = "translating the .tflite" if build.source.format == "tflite" else "exporting the torch.export program"
        with timed(progress, f"{verb} to ONNX", f"model: {verb} {job.model.name}"):
            fp32 = frontend.write_fp32(build.inputs, work / f"{stem}.fp32.onnx")
    build.files["fp32_onnx"], build.shipped = _file_info(fp32), "fp32_onnx"
    _check_runtime(build, fp32, progress)
    int8 = job.precision is Precision.INT8
    candidate = _quantize(build, fp32, calib, work, progress) if int8 else fp32
    if candidate != fp32:
        _check_runtime(build, candidate, progress)
    lap("convert")
    source = _evaluate(build, frontend, fp32, candidate, evaluation, progress)
    lap("evaluate")
    if job.tflite and build.passed:
        _twin(build, fp32, evaluation, calib if int8 else None, source, work, progress)
        lap("tflite")
    build.seconds = {**lap.seconds, "total": lap.total()}
    if build.passed:
        write_models_json(build, work)
    write_reports(build, work)


def _check_runtime(build: ModelBuild, model: Path, progress: ProgressFn) -> None:
    """Refuse now what the target's runtime cannot load (``converters.byom.target_ops``), not on the device.

    The fp32 copy is the user's model (InputError); the INT8 candidate is ours (ConversionError).
    """
    from converters.byom.target_ops import check_target_ops

    job, fp32 = build.job, model.name == build.files["fp32_onnx"]["file"]
    progress(f"loading {model.name} in {job.profile.name}'s runtime")
    name = job.model if fp32 else Path(f"{job.model}'s {job.precision.value} candidate {model.name}")
    try:
        record = check_target_ops(model, job.profile, name)
    except InputError as exc:
        if fp32:
            raise
        raise ConversionError(str(exc)) from exc
    checked = build.target_runtime.get("loaded", [])
    build.target_runtime = {**record, "loaded": [*checked, model.name]}


def _twin(
    build: ModelBuild,
    fp32: Path,
    evaluation: Samples,
    calib: Samples | None,
    source: tuple[list[str], list],
    work: Path,
    progress: ProgressFn,
) -> None:
    """The TFLite twin, recorded in the files and figures: an fp32 twin must be the fp32 copy; an INT8 twin
    (``calib`` given) must pass the task gate against the source, as the ONNX INT8 did."""
    from converters.byom.tflite_twin import TWIN_KEY, compare_twin, gate_twin, write_twin

    job = build.job
    twin = write_twin(fp32, build.inputs, work, progress, calib)
    build.files[TWIN_KEY] = _file_info(twin)
    progress(f"running {twin.name} (LiteRT) on {evaluation.count} samples of {evaluation.path.name}")
    if calib is not None:  # an image model's (check_twin_inputs): its one input
        samples = evaluation.arrays[build.inputs[0].name]
        build.figures[TWIN_KEY], missed = gate_twin(twin, samples, source, job.task, job.thresholds)
        build.failures += missed
        return
    record = compare_twin(twin, fp32, build.inputs, evaluation.arrays)
    limit = job.thresholds.fp32_max_abs
    record["passed"] = record["max_abs_diff"] <= limit
    build.figures[TWIN_KEY] = record
    if not record["passed"]:
        build.failures.append(
            f"TFLite twin {twin.name}: max |difference| to {fp32.name} {record['max_abs_diff']:.3g} > {limit:g}"
        )


def _move_into_place(work: Path, out: Path) -> None:
    if out.is_dir():
        out.rmdir()  # checked empty before the work started
    os.replace(work, out)


def convert_model(job: ModelJob, progress: ProgressFn = silent) -> ModelBuild:
    """Convert the user's ONNX model for ``job.profile`` and gate it on ``job.evaluation``.

    Args:
        job: the model, data, target, precision, task and thresholds.
        progress: called with a line per stage.

    Returns:
        The ModelBuild (also written as report.json / report.md, and models.json when it passed).

    Raises:
        InputError: a bad model, shape, data file, flag or output folder (nothing is written).
        ConversionError: quantization or the ORT-format conversion failed (nothing is written).
        InferenceError: onnxruntime cannot run the model (nothing is written).
        ValidationError: the gate failed; the message lists every missed threshold (the report is written).
    """
    _check_job(job)
    source, frontend = read_model(job.model)
    build = ModelBuild(job, source, resolve_inputs(source, job.input_shapes))
    if job.tflite:
        from converters.byom.tflite_twin import check_twin_inputs

        check_twin_inputs(job.model, build.inputs, job.precision)
    out = Path(job.out_dir)
    parent = out.resolve().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=parent))
    except OSError as exc:
        raise InputError(f"-o {out}: cannot create the output folder ({exc.strerror or exc})") from None
    try:
        _build_into(build, frontend, work, progress)
        _move_into_place(work, out)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    build.raise_if_failed()
    return build
