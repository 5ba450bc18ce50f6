"""``edge-deploy convert face``: dlib's ResNet-29 embedder and MTCNN to ONNX, checked, with a report.

Stages: locate the shipped weights -> export each model -> check each ONNX model against its source network
-> (when dlib is installed) prove the embedder equal to dlib's own descriptor on real chips and our whole
pipeline in agreement with face_recognition's on the evaluation pairs -> write ``models.json``,
``report.json`` and ``report.md``. The report is written before the gate raises, so a failed build still
leaves its explanation on disk.
"""

from __future__ import annotations

import importlib.util
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from converters.face.build_report import render_build_markdown
from converters.paths import make_output_dir
from converters.quiet import quiet_torch_export
from converters.sources import DLIB_RESNET, DLIB_SHAPE5, MTCNN_NETS
from converters.validate import OutputCheck, check_against_source
from converters.versions import library_versions
from edge import __version__
from edge.errors import InputError, ValidationError
from edge.face import models as face_models
from edge.face.models import FaceModel
from edge.profiles import ModelFormats, Precision, TargetProfile
from edge.progress import ProgressFn, silent, timed, tracked
from edge.runtime import default_threads

if TYPE_CHECKING:
    from converters.byom.face_detector import UserDetector
    from converters.byom.face_embedder import EmbedderOptions

EMBEDDER_FILE = "face_embedder.onnx"
SHAPE5_FILE = "shape5.npz"
#: Decision agreement between our pipeline and face_recognition's that the build must reach.
PIPELINE_AGREEMENT_GOAL = 0.99
#: How many real aligned chips the dlib proof uses at least.
MIN_PROOF_CHIPS = 20
#: Calibration images whose cascade crops an fp32 build's RNet/ONet twins are compared on (INT8 builds use
#: the INT8 calibration set itself).
TWIN_CALIBRATION_IMAGES = 16


@dataclass
class FaceBuild:
    """What ``convert_face`` produced: files, checks and the gate's verdict."""

    target: str
    out_dir: Path
    models: list[face_models.ModelEntry]
    source_checks: list[OutputCheck]
    dlib_proof: dict
    agreement: dict
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0
    recognition: dict = field(default_factory=dict)  # a user embedder's models.json ``recognition``; {}: dlib's

    @property
    def passed(self) -> bool:
        return not self.failures

    def to_dict(self) -> dict:
        return {
            "tool": "edge-deploy",
            "tool_version": __version__,
            "versions": library_versions(),
            "target": self.target,
            "out_dir": str(self.out_dir),
            "passed": self.passed,
            "failures": self.failures,
            "seconds": round(self.seconds, 1),
            "models": [m.to_dict() for m in self.models],
            "source_checks": [c.to_dict() for c in self.source_checks],
            "dlib_proof": self.dlib_proof,
            "pipeline_agreement": self.agreement,
            "recognition": self.recognition or None,
        }

    def summary(self) -> str:
        lines = [f"face models for {self.target} in {self.out_dir} ({self.seconds:.0f} s):"]
        for m in self.models:
            lines.append(
                f"  {m.role:15} {m.file:22} {m.size / 1e6:6.2f} MB  {m.source['package']} {m.source['licence']}"
            )
        worst = max((c.max_abs_diff for c in self.source_checks), default=0.0)
        lines.append(f"  ONNX vs source networks: max |diff| {worst:.2e} over {len(self.source_checks)} outputs")
        if self.dlib_proof.get("ran"):
            p = self.dlib_proof
            lines.append(f"  embedder vs dlib on {p['chips']} real chips: max |diff| {p['max_abs_diff']:.2e}")
        else:
            lines.append(f"  embedder vs dlib: not run ({self.dlib_proof.get('reason')})")
        if self.agreement.get("ran"):
            a = self.agreement
            lines.append(
                f"  pipeline vs face_recognition: {a['decision_agreement']:.2%} of {a['pairs_decided_by_both']} "
                "decided pairs agree, "
                f"mean descriptor distance {a['mean_descriptor_distance']:.4f}"
            )
        else:
            lines.append(f"  pipeline vs face_recognition: not run ({self.agreement.get('reason')})")
        if self.recognition:
            r, c = self.recognition, self.recognition["calibration"]
            lines.append(
                f"  user embedder: {r['chip_size']}x{r['chip_size']} {r['layout']} chips -> {r['descriptor_size']}-d; "
                f"threshold {r['threshold']:.4f} (pair accuracy {c['pair_accuracy']:.4f} on {c['pairs']} pairs)"
            )
        lines.append("  report: " + str(self.out_dir / "report.md"))
        lines.append("PASSED" if self.passed else "FAILED:\n  " + "\n  ".join(self.failures))
        return "\n".join(lines)


@dataclass
class FaceModels:
    """What ``build_face_models`` produced: the fp32 build, the quantized one (or None), the TFLite twins."""

    fp32: FaceBuild
    quant: Any | None  # converters.face.quantize.QuantBuild (imported lazily: it pulls onnxruntime.quantization)
    twins: list[Any]  # converters.face.tflite_twins.TwinReport, one per folder

    def to_dict(self) -> dict:
        return {
            "fp32": self.fp32.to_dict(),
            "quantized": self.quant.to_dict() if self.quant else None,
            "tflite": [t.to_dict() for t in self.twins],
        }

    def summary(self) -> str:
        parts = [self.fp32.summary()] + ([self.quant.summary()] if self.quant else [])
        return "\n".join(parts + [t.summary() for t in self.twins])


def _export_dlib_embedder(out_dir: Path, progress: ProgressFn) -> tuple[face_models.ModelEntry, list[OutputCheck]]:
    from converters.face.dlib_reader import read_dlib_face_net
    from converters.face.dlib_resnet import INPUT_NAME, OUTPUT_NAME, build_torch_embedder, export_dlib_embedder

    torch = __import__("torch")
    dat = DLIB_RESNET.locate()
    with timed(progress, f"exporting dlib's ResNet-29 embedder from {dat.name}", "face: export dlib embedder"):
        embedder = export_dlib_embedder(dat, out_dir / EMBEDDER_FILE)
    module = build_torch_embedder(read_dlib_face_net(dat))
    chips = np.random.default_rng(1).integers(0, 256, size=(4, 3, 150, 150)).astype(np.float32)

    def source(feeds):
        with torch.no_grad():
            return {OUTPUT_NAME: module(torch.from_numpy(feeds[INPUT_NAME])).numpy()}

    checks = check_against_source("dlib-resnet29", embedder, source, {INPUT_NAME: chips}, 1e-5)
    entry = face_models.describe(embedder, FaceModel.EMBEDDER.role, "onnx", "fp32", DLIB_RESNET.provenance())
    return entry, checks


def _export(
    out_dir: Path, progress: ProgressFn, with_embedder: bool = True
) -> tuple[list[face_models.ModelEntry], list[OutputCheck]]:
    """Export MTCNN, the 5-point model and (``with_embedder``) dlib's ResNet: their entries and checks."""
    from converters.face.dlib_shape import export_shape_predictor
    from converters.face.mtcnn import compare_with_torch, export_mtcnn, load_mtcnn_nets

    checks: list[OutputCheck] = []
    embedder = None
    if with_embedder:
        embedder, checks = _export_dlib_embedder(out_dir, progress)
    with timed(progress, "exporting dlib's 5-point landmark model to numpy arrays", "face: export dlib 5-point"):
        shape5 = export_shape_predictor(DLIB_SHAPE5.locate(), out_dir / SHAPE5_FILE)
    with timed(progress, "exporting MTCNN P/R/O-nets from facenet-pytorch's weights", "face: export MTCNN"):
        mtcnn = export_mtcnn(out_dir)
        for net, diff in compare_with_torch(load_mtcnn_nets(), mtcnn).items():
            checks.append(OutputCheck(f"mtcnn-{net}", "all outputs", (), diff, 1e-5))
    entries = [
        face_models.describe(mtcnn[net], net.role, "onnx", "fp32", MTCNN_NETS[net].provenance())
        for net in face_models.DETECTOR_NETS
    ]
    entries.append(face_models.describe(shape5, FaceModel.SHAPE5.role, "npz", "fp32", DLIB_SHAPE5.provenance()))
    return entries + ([embedder] if embedder else []), checks


def _reference_checks(out_dir: Path, profile: TargetProfile, threads: int, progress: ProgressFn) -> tuple[dict, dict]:
    """The dlib proof (embedder on real chips) and the pipeline agreement, when dlib is installed."""
    if importlib.util.find_spec("dlib") is None:
        reason = "dlib-bin is not installed: pip install 'edge-deploy[reference]'"
        return {"ran": False, "reason": reason}, {"ran": False, "reason": reason}
    from converters.face.agreement import compare_pipelines
    from converters.face.facedata import make_eval_set
    from converters.face.reference import ReferencePipeline

    with timed(progress, "building the evaluation set from the photos shipped in packages", "face: evaluation set"):
        eval_set = make_eval_set(seed=0)
    reference = ReferencePipeline()
    from edge.face.folder_pipeline import open_pipeline

    folder = face_models.read_models_folder(out_dir)
    detector = folder.detector
    with open_pipeline(folder, threads) as pipeline:
        progress("proving the embedder equal to dlib's compute_face_descriptor on real chips")
        chips = []
        for image in tracked(progress, eval_set.images, "images"):
            dets = pipeline.detector.detect(image.rgb)
            if dets:
                chips.append(pipeline.chips(image.rgb, dets))
        chips_arr = np.concatenate(chips)
        ours = pipeline.embedder.embed(chips_arr).astype(np.float64)
        dlib_desc = np.stack([reference.descriptor_of_chip(c) for c in tracked(progress, chips_arr, "dlib chips")])
        diff = float(np.max(np.abs(ours - dlib_desc)))
        proof = {
            "ran": True,
            "chips": int(len(chips_arr)),
            "max_abs_diff": diff,
            "tolerance": profile.thresholds.embed_max_abs_diff_fp32,
            "chips_from": f"our pipeline's chips ({detector.value} box, dlib 5-point "
            "landmarks, dlib-exact chip) of every evaluation image (docs/evaluation.md)",
        }
        progress(f"comparing our pipeline with face_recognition's on {len(eval_set.pairs)} evaluation pairs")
        report = compare_pipelines(eval_set, pipeline, reference, progress=progress)
    summary = report.summary()
    agreement = {
        "ran": True,
        "pairs": summary.get("pairs"),
        "pairs_decided_by_both": summary.get("pairs_decided_by_both"),
        "decision_agreement": report.agreement(),
        "mean_descriptor_distance": summary.get("descriptor_distance_mean"),
        "goal": PIPELINE_AGREEMENT_GOAL,
        "summary": summary,
    }
    (out_dir / "agreement.md").write_text(report.to_markdown(), encoding="utf-8")
    (out_dir / "agreement.json").write_text(json.dumps(report.to_dict(), indent=2) + "\n", encoding="utf-8")
    return proof, agreement


def _gate(build: FaceBuild) -> list[str]:
    failures = [
        f"{c.model} output {c.output!r}: max |diff| {c.max_abs_diff:.3g} vs source > {c.tolerance:g}"
        for c in build.source_checks
        if not c.ok
    ]
    p = build.dlib_proof
    if p.get("ran"):
        if p["chips"] < MIN_PROOF_CHIPS:
            failures.append(f"dlib proof used {p['chips']} chips; expected at least {MIN_PROOF_CHIPS}")
        if p["max_abs_diff"] > p["tolerance"]:
            failures.append(f"embedder vs dlib: max |diff| {p['max_abs_diff']:.3g} > {p['tolerance']:g}")
    a = build.agreement
    if a.get("ran") and (a["decision_agreement"] is None or a["decision_agreement"] < PIPELINE_AGREEMENT_GOAL):
        failures.append(
            f"pipeline vs face_recognition: decisions agree on {a['decision_agreement']} of pairs; "
            f"expected >= {PIPELINE_AGREEMENT_GOAL}"
        )
    return failures


def convert_face(
    profile: TargetProfile,
    out_dir: Path,
    progress: ProgressFn = silent,
    embedder: EmbedderOptions | None = None,
    detector: UserDetector | None = None,
) -> FaceBuild:
    """Convert the face models for ``profile`` into ``out_dir`` and check them.

    Args:
        profile: the target (its thresholds and thread count are used).
        out_dir: output folder (created).
        progress: called with a line per stage.
        embedder: a user's ONNX embedder to ship instead of dlib's ResNet (``converters.byom.face_embedder``):
            read and checked before anything is written; its threshold is calibrated on the evaluation pairs.
        detector: a user's detector in BlazeFace's layout (``converters.byom.face_detector``, already read) to
            ship as the folder's detector instead of the profile's; the pipeline checks run with it.

    Returns:
        The FaceBuild (also written as report.json / report.md / models.json).

    Raises:
        InputError: the user's embedder is not one (nothing is written).
        ConversionError: a model could not be read or exported.
        ValidationError: a check failed; the report on disk says which.
    """
    start = time.perf_counter()
    user = None
    if embedder is not None:
        from converters.byom.face_embedder import read_user_embedder

        user = read_user_embedder(embedder)  # before any output: bad input leaves nothing
    out_dir = make_output_dir(out_dir)
    with quiet_torch_export():
        entries, checks = _export(out_dir, progress, with_embedder=user is None)
    threads = max(1, min(profile.runtime.threads, default_threads()))
    recognition: dict = {}
    if user is not None:
        from converters.byom.face_build import NO_DLIB_REFERENCE, add_user_embedder

        entries, check, recognition = add_user_embedder(
            *user, out_dir, entries, profile.name, EMBEDDER_FILE, threads, progress
        )
        checks.append(check)
        proof = agreement = {"ran": False, "reason": NO_DLIB_REFERENCE}
        add_detector(out_dir, profile, detector, progress)
    else:
        face_models.write_models_file(out_dir, entries, profile.name, __version__)
        # before the checks: the pipeline compared with face_recognition is the one that ships
        add_detector(out_dir, profile, detector, progress)
        proof, agreement = _reference_checks(out_dir, profile, threads, progress)
    entries = list(face_models.read_models_folder(out_dir).entries.values())  # with the detector the folder runs
    build = FaceBuild(profile.name, out_dir, entries, checks, proof, agreement, recognition=recognition)
    build.failures = _gate(build)
    build.seconds = time.perf_counter() - start
    (out_dir / "report.json").write_text(json.dumps(build.to_dict(), indent=2) + "\n", encoding="utf-8")
    (out_dir / "report.md").write_text(render_build_markdown(build), encoding="utf-8")
    progress("report written: " + str(out_dir / "report.md"))
    if not build.passed:
        raise ValidationError(
            f"face models for {profile.name} failed the checks (see {out_dir / 'report.md'}):\n  "
            + "\n  ".join(build.failures)
        )
    return build


def _append_twins(report_md: Path, report_json: Path, twins) -> None:
    """Add the TFLite twins' section to a build report (Markdown and JSON) already on disk."""
    with report_md.open("a", encoding="utf-8") as fh:
        fh.write("\n" + twins.markdown())
    data = json.loads(report_json.read_text(encoding="utf-8"))
    data["tflite"] = twins.to_dict()
    report_json.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def twin_inputs(fp32_dir: Path, profile: TargetProfile, count: int, progress: ProgressFn):
    """(calibration, fp32 reference) for the TFLite twins: the same calibration and evaluation data as INT8."""
    from converters.face.calibration import chip_landmarks, collect_calibration
    from converters.face.facedata import make_eval_set
    from converters.face.quant_eval import fp32_reference

    threads = max(1, min(profile.runtime.threads, default_threads()))
    fp32 = face_models.read_models_folder(fp32_dir)
    calibration = collect_calibration(fp32, count, threads=threads, progress=progress)
    progress("running the fp32 pipeline on the evaluation set (the reference of the gate)")
    nets = fp32.model_paths(face_models.FACE_NETS)
    return calibration, fp32_reference(make_eval_set(0), nets, threads, chip_landmarks(fp32), progress=progress)


def add_tflite_twins(
    fp32_dir: Path,
    out_dir: Path,
    profile: TargetProfile,
    inputs: tuple | None = None,
    int8_nets: tuple[FaceModel, ...] = (),
    progress: ProgressFn = silent,
):
    """The TFLite twins of ``fp32_dir``'s nets in ``out_dir`` (``converters.face.tflite_twins``), their section
    added to the folder's report (``report.md``/``.json`` of an fp32 folder, else ``quant_report.*``).

    Args:
        inputs: ``(calibration, fp32 reference)`` shared with the INT8 build; None: made here (calibration
            crops of ``TWIN_CALIBRATION_IMAGES`` images, which an fp32 build only compares on).

    Returns:
        The TwinReport; the caller raises on its failures (``tflite_twins.raise_if_failed``).
    """
    from converters.face.tflite_twins import write_tflite_twins

    calibration, reference = inputs or twin_inputs(fp32_dir, profile, TWIN_CALIBRATION_IMAGES, progress)
    twins = write_tflite_twins(
        fp32_dir, out_dir, profile, calibration, reference, int8_nets=int8_nets, progress=progress
    )
    name = "report" if Path(out_dir).resolve() == Path(fp32_dir).resolve() else "quant_report"
    _append_twins(Path(out_dir) / f"{name}.md", Path(out_dir) / f"{name}.json", twins)
    return twins


def check_formats(precision: Precision, dynamic: bool, output_format: ModelFormats) -> None:
    """Refuse a format that cannot be built at ``precision`` (before any work).

    Raises:
        InputError: TFLite twins with fp16 or dynamic INT8, naming the options.
    """
    if not output_format.tflite:
        return
    if precision is Precision.FP16:
        raise InputError(
            f"--format {output_format.value} with --precision fp16: the TFLite twins are fp32 and full-integer "
            "INT8; use --precision fp32 or int8, or --format onnx"
        )
    if dynamic:
        raise InputError(
            f"--format {output_format.value} with --dynamic: the INT8 TFLite twin is full-integer, calibrated; "
            "drop --dynamic or use --format onnx"
        )


def build_face_models(
    profile: TargetProfile,
    out_dir: Path,
    precision: Precision | None = None,
    dynamic: bool = False,
    progress: ProgressFn = silent,
    output_format: ModelFormats | None = None,
    embedder: EmbedderOptions | None = None,
    detector: UserDetector | None = None,
) -> FaceModels:
    """The deployable face models for ``profile`` in ``out_dir``, at ``precision`` (default: the profile's).

    fp32 goes straight into ``out_dir``. For int8/fp16 the fp32 models (checked as in ``convert_face``) go
    into ``out_dir/fp32`` and the quantized, gated set (with its own models.json) into ``out_dir``. With
    ``output_format`` (default: the profile's ``runtime.face_formats``) tflite or both, each folder also gets
    the TFLite twins of its nets (``converters.face.tflite_twins``; INT8 for the nets the ONNX build
    quantizes, calibrated on the same samples), checked against ONNX and gated; their section is added to the
    folder's report. ``embedder``: a user's ONNX embedder instead of dlib's (``convert_face``); the quantized
    build keeps the threshold calibrated on fp32 and gates decisions at it. No TFLite twins for it. The
    profile's ``runtime.face_detector``, when a BlazeFace one, is added to ``out_dir`` and named its detector
    (``converters.face.blazeface.add_profile_detector``); ``detector``, a user's (``convert face --detector``,
    ``converters.byom.face_detector``), is added and named instead, to both folders.

    Returns:
        ``FaceModels(fp32, quantized or None, TFLite twin reports)``.

    Raises:
        InputError: --dynamic without int8, or a format that does not go with the precision.
        MissingDependencyError: TFLite asked for and onnx2tf's venv is missing (naming its set-up script).
        ConversionError / ValidationError: as ``convert_face``, ``quantize_face_models`` and
            ``write_tflite_twins``.
    """
    built = _build_face_models(profile, out_dir, precision, dynamic, progress, output_format, embedder, detector)
    if built.quant is not None:  # convert_face added it to the fp32 folder, which is out_dir itself at fp32
        add_detector(Path(out_dir), profile, detector, progress)
    return built


def face_output_format(
    profile: TargetProfile, asked: ModelFormats | None, user_embedder: bool, progress: ProgressFn = silent
) -> ModelFormats:
    """What a face build writes: ``asked`` (``--format``), else the profile's ``runtime.face_formats``; with a
    user's embedder, which gets no TFLite twin, a profile's tflite or both falls back to ONNX (said in
    ``progress``) where an asked one is refused by the caller."""
    if asked is not None:
        return asked
    own = profile.runtime.face_formats
    if user_embedder and own.tflite:
        progress(f"--embedder: your embedder gets no TFLite twin; ONNX only ({profile.name}'s runtime.face_formats "
                 f"= '{own.value}' is for dlib's)")  # fmt: skip
        return ModelFormats.ONNX
    return own


def _build_face_models(
    profile: TargetProfile,
    out_dir: Path,
    precision: Precision | None,
    dynamic: bool,
    progress: ProgressFn,
    output_format: ModelFormats | None,
    embedder: EmbedderOptions | None,
    detector: UserDetector | None,
) -> FaceModels:
    from converters.face.tflite_twins import raise_if_failed, run_embedder_twin

    precision = precision or profile.runtime.precision
    output_format = face_output_format(profile, output_format, embedder is not None, progress)
    if precision is Precision.INT4:  # a profile's default for LMs; CNN weights get INT8
        precision = Precision.INT8
    check_formats(precision, dynamic, output_format)
    if embedder is not None and output_format.tflite:
        raise InputError(
            f"--embedder {embedder.model} with --format {output_format.value}: the TFLite twins are made for "
            "dlib's embedder only; use --format onnx"
        )
    if output_format.tflite:
        from converters.tflite.convert import onnx2tf_executable

        onnx2tf_executable()  # fail before minutes of work when onnx2tf's venv is missing
    if precision is Precision.FP32:
        if dynamic:
            raise InputError("--dynamic is dynamic INT8 quantization; it needs --precision int8")
        fp32 = convert_face(profile, out_dir, progress=progress, embedder=embedder, detector=detector)
        if not output_format.tflite:
            return FaceModels(fp32, None, [])
        twins = add_tflite_twins(fp32.out_dir, fp32.out_dir, profile, progress=progress)
        raise_if_failed(twins)
        if output_format is ModelFormats.TFLITE:
            run_embedder_twin(fp32.out_dir)
        return FaceModels(fp32, None, [twins])
    from converters.face.quantize import DEFAULT_CALIBRATION_COUNT, quantize_face_models
    from converters.quantize import QuantMode

    fp32 = convert_face(profile, Path(out_dir) / "fp32", progress=progress, embedder=embedder, detector=detector)
    calibration = reference = None
    if output_format.tflite:  # shared by the ONNX INT8 and the TFLite twins
        calibration, reference = twin_inputs(fp32.out_dir, profile, DEFAULT_CALIBRATION_COUNT, progress)
    mode = QuantMode.DYNAMIC if dynamic else None
    quant = quantize_face_models(
        fp32.out_dir, out_dir, profile, precision, progress=progress, mode=mode,
        calibration=calibration, reference=reference,
    )  # fmt: skip
    if calibration is None or reference is None:
        return FaceModels(fp32, quant, [])
    inputs = (calibration, reference)
    twins = [add_tflite_twins(fp32.out_dir, fp32.out_dir, profile, inputs, progress=progress)]
    int8_nets = tuple(FaceModel(net) for net in quant.settings)
    twins.append(add_tflite_twins(fp32.out_dir, quant.out_dir, profile, inputs, int8_nets, progress))
    for report in twins:
        raise_if_failed(report)
    if output_format is ModelFormats.TFLITE:  # the device runs the embedder's twin (the fp32 folder stays the
        run_embedder_twin(quant.out_dir)  # gate's reference, on ONNX)
    return FaceModels(fp32, quant, twins)


def export_face_models(out_dir: Path, target: str = "rpi4", progress: ProgressFn = silent) -> Path:
    """The fp32 face models folder (ONNX nets, landmarks, models.json) as ``edge-deploy convert face`` makes it.

    Only the export and its checks against the source networks: the dlib proof and the pipeline agreement
    of ``convert_face`` are left to that command. Reused when ``out_dir/models.json`` exists.

    Raises:
        ConversionError: a model could not be read or exported.
        ValidationError: an exported model differs from its source network beyond tolerance.
    """
    out_dir = Path(out_dir)
    if (out_dir / face_models.MODELS_FILE).is_file():
        return out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    with quiet_torch_export():
        entries, checks = _export(out_dir, progress)
    bad = [f"{c.model} {c.output}: max |diff| {c.max_abs_diff:.3g} > {c.tolerance:g}" for c in checks if not c.ok]
    if bad:
        raise ValidationError(f"{out_dir}: exported face models differ from their sources: " + "; ".join(bad))
    face_models.write_models_file(out_dir, entries, target, __version__)
    return out_dir


def add_detector(folder: Path, profile: TargetProfile, detector: UserDetector | None, progress: ProgressFn) -> None:
    """The user's ``--detector`` into ``folder`` when given, else the profile's (``runtime.face_detector``:
    ``converters.face.blazeface.add_profile_detector``); either becomes the folder's detector."""
    if detector is None:
        from converters.face.blazeface import add_profile_detector

        runtime = profile.runtime
        add_profile_detector(folder, runtime.face_detector, progress, runtime.face_detector_runtime.value)
        return
    from converters.byom.face_detector import add_user_detector

    side = f"{detector.side}x{detector.side}"
    progress(f"adding your detector {detector.path.name} (BlazeFace {side}, {detector.format})")
    add_user_detector(folder, detector)
