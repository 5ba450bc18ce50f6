"""Quantized face models per target, and the accuracy gate (``edge-deploy convert face --precision ...``).

Stages: calibration inputs from the fp32 pipeline on calibration images (``converters.face.calibration``) ->
quantize each net per the profile (``converters.quantize``) -> ORT-format copies for the target's CPU ->
compare with fp32 on the evaluation set (``converters.face.quant_eval``) -> ``models.json`` pointing at the
shipped files, ``quant_report.json``, ``quant_report.md`` and ``cosine_hist.png`` -> the gate. The report
is written before the gate raises, so a failed build leaves its explanation on disk.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from converters.compile import ort_target_platform, to_ort_format_all
from converters.face.calibration import CalibrationSet, chip_landmarks, collect_calibration
from converters.face.facedata import make_eval_set
from converters.face.quant_eval import (
    EVALUATED_AS,
    TWIN_MIN_IOU,
    Fp32Reference,
    evaluate_detector,
    evaluate_embedder,
    evaluate_end_to_end,
    fp32_reference,
)
from converters.face.report import render_markdown, write_histogram
from converters.paths import make_output_dir
from converters.quantize import QuantMode, QuantSettings, quantize_model, settings_for
from converters.timing import Laps
from converters.versions import library_versions
from edge import __version__
from edge.cpu import int8_kernels
from edge.digest import file_sha256
from edge.errors import InputError, ValidationError
from edge.face import models as face_models
from edge.face.models import FACE_NETS, FaceModel
from edge.profiles import Arch, Precision, TargetProfile
from edge.progress import ProgressFn, silent, timed
from edge.runtime import default_threads
from edge.runtime.ort_session import Optimization

#: Calibration images of a production build (the tests use fewer; see docs/quantization.md).
DEFAULT_CALIBRATION_COUNT = 200
#: Nets quantized by default. MTCNN's P/R/O-nets stay fp32: quantized alone, each moved some face's final
#: box below the gate's IoU 0.9 (PNet 0.81, RNet 0.90, ONet 0.78 with MinMax; other methods no better,
#: docs/quantization.md), while they hold 8 % of the bytes. The embedder holds 92 % and quantizes cleanly.
DEFAULT_QUANTIZED_NETS = (FaceModel.EMBEDDER,)
#: Quantization mode of each precision (``mode=`` picks dynamic INT8 instead of static).
PRECISION_MODES = {Precision.INT8: QuantMode.STATIC_QDQ, Precision.FP16: QuantMode.FP16}
_MODE_PRECISION = {
    QuantMode.STATIC_QDQ: Precision.INT8,
    QuantMode.DYNAMIC: Precision.INT8,
    QuantMode.FP16: Precision.FP16,
}


@dataclass
class QuantBuild:
    """What ``quantize_face_models`` produced: files, measurements and the gate's verdict."""

    target: str
    precision: Precision
    mode: QuantMode
    out_dir: Path
    settings: dict[FaceModel, QuantSettings]
    models: list[face_models.ModelEntry]
    onnx_files: dict[str, dict]
    ort_files: dict[str, dict]
    ort_platform: str | None
    calibration: dict
    thresholds: dict
    embedder: dict
    detector: dict
    end_to_end: dict
    failures: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return not self.failures

    @property
    def shipped(self) -> str:
        """Which files models.json points at: "ort" or "onnx"."""
        return "ort" if self.ort_files else "onnx"

    def to_dict(self) -> dict:
        return {
            "tool": "edge-deploy",
            "tool_version": __version__,
            "versions": library_versions(),
            "target": self.target,
            "precision": self.precision.value,
            "mode": self.mode.value,
            "passed": self.passed,
            "failures": self.failures,
            "shipped": self.shipped,
            "ort_target_platform": self.ort_platform,
            "settings": {net: s.to_dict() for net, s in self.settings.items()},
            "models": [m.to_dict() for m in self.models],
            "onnx_files": self.onnx_files,
            "ort_files": self.ort_files,
            "calibration": self.calibration,
            "thresholds": self.thresholds,
            "embedder": self.embedder,
            "detector": self.detector,
            "end_to_end": self.end_to_end,
            "evaluated_as": EVALUATED_AS,
            "build_host_int8_kernels": int8_kernels().to_dict(),
            "seconds": {k: round(v, 1) for k, v in self.seconds.items()},
        }

    def summary(self) -> str:
        """A few lines for the CLI."""
        e, d = self.embedder, self.detector
        lines = [
            f"{self.precision.value} ({self.mode.value}) face models for {self.target} in {self.out_dir}:",
            f"  embedder: cosine to fp32 mean {e['cosine_mean']:.5f} min {e['cosine_min']:.5f}; decisions agree "
            f"on {e['decisions']['agreement']:.4f} of {e['decisions']['pairs']} pairs",
            f"  detector: IoU with fp32 min {d['iou_min']:.3f} mean {d['iou_mean']:.3f}; {d['lost']} of "
            f"{d['faces']} faces lost",
            f"  shipped: {self.shipped} files; report: {self.out_dir / 'quant_report.md'}",
        ]
        lines.append("PASSED" if self.passed else "FAILED:\n  " + "\n  ".join(self.failures))
        return "\n".join(lines)

    def raise_if_failed(self) -> None:
        """Raise ValidationError listing every missed threshold (the report is already on disk)."""
        if self.failures:
            raise ValidationError(
                f"{self.precision.value} face models for {self.target} failed the accuracy gate "
                f"(see {self.out_dir / 'quant_report.md'}):\n  " + "\n  ".join(self.failures)
            )


def embedder_failures(profile: TargetProfile, embedder: dict) -> list[str]:
    """The embedder's thresholds of ``profile`` that ``embedder`` (``EmbedderStats.to_dict()``) misses."""
    t = profile.thresholds
    where = f"{profile.source.name} [thresholds]"
    out = []
    if embedder["cosine_mean"] < t.embed_mean_cosine:
        out.append(
            f"embedder: mean cosine to fp32 {embedder['cosine_mean']:.5f} < embed_mean_cosine "
            f"{t.embed_mean_cosine:g} ({where}; {embedder['faces']} faces)"
        )
    agreement = embedder["decisions"]["agreement"]
    if agreement < t.embed_decision_agreement:
        dec = embedder["decisions"]
        out.append(
            f"embedder: same/different decisions agree with fp32 on {agreement:.4f} of pairs "
            f"({dec['agree']} of {dec['pairs']}) < embed_decision_agreement {t.embed_decision_agreement:g} ({where})"
        )
    return out


def gate_failures(profile: TargetProfile, embedder: dict, detector: dict) -> list[str]:
    """Every threshold of ``profile`` that the measurements miss, with values and thresholds in the text."""
    t = profile.thresholds
    where = f"{profile.source.name} [thresholds]"
    out = embedder_failures(profile, embedder)
    if detector["lost"] > t.detect_max_lost:
        out.append(
            f"detector: {detector['lost']} of {detector['faces']} faces found by fp32 lost (no box with IoU >= "
            f"{TWIN_MIN_IOU}) > detect_max_lost {t.detect_max_lost} ({where}): " + "; ".join(detector["lost_faces"])
        )
    if detector["iou_min"] < t.detect_iou:
        out.append(
            f"detector: min IoU of a face's box with its fp32 twin {detector['iou_min']:.3f} < detect_iou "
            f"{t.detect_iou:g} ({where}; mean {detector['iou_mean']:.3f})"
        )
    return out


def _mode_for(precision: Precision, mode: QuantMode | None) -> QuantMode:
    if mode is None:
        if precision not in PRECISION_MODES:
            allowed = ", ".join(p.value for p in PRECISION_MODES)
            raise InputError(
                f"face models: precision '{precision.value}' is not a quantized precision; expected {allowed}"
            )
        return PRECISION_MODES[precision]
    if _MODE_PRECISION.get(mode) is not precision:
        raise InputError(f"face models: mode '{mode.value}' does not give precision '{precision.value}'")
    return mode


def _file_info(path: Path) -> dict:
    return {"file": path.name, "size": path.stat().st_size, "sha256": file_sha256(path)}


def _quantize_all(fp32, out_dir, settings, calib: CalibrationSet | None, tag: str, progress) -> dict[FaceModel, Path]:
    out = {}
    for net, path in fp32.items():
        if net not in settings:
            out[net] = out_dir / path.name
            shutil.copy(path, out[net])
            continue
        how = f"{settings[net].mode.value}, {settings[net].calibration.value}"
        feeds = calib.feeds[net] if calib is not None else None
        with timed(progress, f"quantizing {net} ({how})", f"face: quantize {net} {tag} ({how})"):
            out[net] = quantize_model(path, out_dir / f"{path.stem}.{tag}.onnx", settings[net], feeds)
    return out


def _entries(
    fp32: face_models.ModelsFolder, out_dir: Path, shipped: dict[FaceModel, Path], fmt: str, precisions: dict
) -> list:
    """models.json entries: the nets as shipped, then every other role of the fp32 folder copied as it is."""
    sources = fp32.entries
    entries = [
        face_models.describe(shipped[net], net.role, fmt, precisions[net], sources[net.role].source)
        for net in FACE_NETS
    ]
    for role, entry in sources.items():
        # e.g. the 5-point landmark model (numpy, not quantized); TFLite twins are made apart (face.tflite_twins)
        if role not in {net.role for net in FACE_NETS} and not role.startswith("tflite."):
            shutil.copy(fp32.path / entry.file, out_dir / entry.file)
            entries.append(
                face_models.describe(out_dir / entry.file, role, entry.format, entry.precision, entry.source)
            )
    return entries


def _ort_copies(
    quantized: dict[FaceModel, Path], out_dir: Path, profile: TargetProfile, progress: ProgressFn
) -> tuple[dict[FaceModel, Path], dict[str, dict], str | None]:
    """ORT-format copies for the profile's CPU: (files to ship by net, their info, target platform).

    The browser has no ORT-format build: it ships the .onnx files.
    """
    if profile.cpu.arch is Arch.WASM32:
        return quantized, {}, None
    platform = ort_target_platform(profile)
    nets = " ".join(p.stem for p in quantized.values())
    with timed(progress, f"ORT format for {platform} (Fixed optimisations)", f"face: ORT format {platform} {nets}"):
        ort_paths = to_ort_format_all(list(quantized.values()), out_dir, profile)
    shipped = dict(zip(quantized, ort_paths, strict=True))
    return shipped, {net: _file_info(p) for net, p in shipped.items()}, platform


def _write_report(build: QuantBuild, cosines, threshold: float, progress: ProgressFn) -> None:
    out_dir = build.out_dir
    write_histogram(out_dir / "cosine_hist.png", cosines, threshold, build)
    (out_dir / "quant_report.json").write_text(json.dumps(build.to_dict(), indent=2) + "\n", encoding="utf-8")
    (out_dir / "quant_report.md").write_text(render_markdown(build), encoding="utf-8")
    progress("report written: " + str(out_dir / "quant_report.md"))


def _int8_arithmetic(profile: TargetProfile) -> str:
    """models.json's ``int8_arithmetic``: what the gate ran and what the target's CPU will."""
    device = {
        Arch.X86_64: "x86: onnxruntime sessions on a CPU without VNNI get session.x64quantprecision=1 (u8u8 "
        "kernels instead of saturating u8s8 ones); VNNI CPUs keep the defaults (edge.cpu; bench and telemetry "
        "name the CPU's kind)",
        Arch.AARCH64: "ARM: onnxruntime's NEON (or dot-product) integer kernels, checked against the gate on "
        "emulated Cortex-A72/A76",
        Arch.WASM32: "browser: onnxruntime-web's wasm integer kernels",
    }[profile.cpu.arch]
    return f"gate: QDQ .onnx unfused (ORT_DISABLE_ALL), independent of the build host; device: {device}"


def _evaluate(
    reference: Fp32Reference | None,
    fp32_folder: face_models.ModelsFolder,
    candidate: dict[FaceModel, Path],
    threads: int,
    progress: ProgressFn,
) -> tuple:
    """The candidate nets against fp32 on the evaluation set: (embedder, detector, end-to-end) results.

    ``candidate`` are the quantized .onnx files, run unfused (``EVALUATED_AS``). ``reference`` (fp32's
    results on ``make_eval_set(0)``) is computed from ``fp32_folder`` when None.
    """
    progress("comparing with fp32 on the evaluation set (quantized graphs unfused: host-independent)")
    if reference is None:
        fp32 = fp32_folder.model_paths(FACE_NETS)
        threshold = fp32_folder.threshold
        reference = fp32_reference(make_eval_set(0), fp32, threads, chip_landmarks(fp32_folder), threshold, progress)
    unfused = Optimization.NONE
    emb = evaluate_embedder(reference, candidate[FaceModel.EMBEDDER], threads, unfused)
    det, found = evaluate_detector(reference, candidate, threads, unfused, progress)
    return emb, det, evaluate_end_to_end(reference, candidate, found, threads, unfused)


def _check_nets(nets: Sequence[str], overrides: Mapping[str, object]) -> None:
    for net in [*nets, *overrides]:
        if net not in FACE_NETS:
            raise InputError(f"face models: no net called {net!r}; expected one of {', '.join(FACE_NETS)}")


def quantize_face_models(
    fp32_dir: Path,
    out_dir: Path,
    profile: TargetProfile,
    precision: Precision,
    calibration_count: int = DEFAULT_CALIBRATION_COUNT,
    progress: ProgressFn = silent,
    *,
    mode: QuantMode | None = None,
    nets: Sequence[str] = DEFAULT_QUANTIZED_NETS,
    overrides: Mapping[str, Mapping[str, object]] | None = None,
    calibration: CalibrationSet | None = None,
    reference: Fp32Reference | None = None,
    check: bool = True,
) -> QuantBuild:
    """Quantize the face nets of an fp32 models folder for ``profile`` and check them against fp32.

    Args:
        fp32_dir: folder written by ``converters.face.build.convert_face`` (fp32 .onnx + models.json).
        out_dir: where the quantized models, models.json and the report go (created; not ``fp32_dir``).
        profile: the target: quantization settings, thresholds, ORT-format platform, threads.
        precision: ``Precision.INT8`` (static QDQ unless ``mode``) or ``Precision.FP16``.
        calibration_count: calibration images for static INT8.
        progress: called with a line per stage.
        mode: ``QuantMode.DYNAMIC`` for dynamic INT8 (else derived from ``precision``).
        nets: which of ``FACE_NETS`` to quantize (``FaceModel`` or its name); the others ship fp32 (their
            models.json precision says so).
        overrides: per net (``FaceModel`` or its name) QuantSettings fields that replace the
            profile's (measurements and deliberately broken builds).
        calibration: feeds collected earlier by ``collect_calibration`` (else collected here).
        reference: the fp32 results from ``fp32_reference`` on ``make_eval_set(0)`` (else computed here).
        check: raise ValidationError when the gate fails (after writing the report).

    Returns:
        The QuantBuild (also written as quant_report.json / .md, cosine_hist.png and models.json).

    Raises:
        InputError: bad precision/mode/override, or an unusable models folder.
        ConversionError: quantization or ORT-format conversion failed.
        ValidationError: ``check`` and a threshold is missed; the message lists every one.
    """
    lap = Laps()
    quant_mode = _mode_for(precision, mode)
    _check_nets(nets, overrides or {})
    fp32_dir, out_dir = Path(fp32_dir), Path(out_dir)
    if out_dir.resolve() == fp32_dir.resolve():
        raise InputError(f"{out_dir}: the quantized models need their own folder, not the fp32 folder")
    fp32_folder = face_models.read_models_folder(fp32_dir)
    fp32 = fp32_folder.model_paths(FACE_NETS)
    overrides = overrides or {}
    settings = {net: settings_for(profile, quant_mode, **overrides.get(net, {})) for net in fp32 if net in nets}
    threads = max(1, min(profile.runtime.threads, default_threads()))
    out_dir = make_output_dir(out_dir)
    if quant_mode is QuantMode.STATIC_QDQ and calibration is None:
        calibration = collect_calibration(fp32_folder, calibration_count, threads=threads, progress=progress)
        lap("calibration")
    quantized = _quantize_all(fp32, out_dir, settings, calibration, precision.value, progress)
    lap("quantize")
    shipped, ort_files, platform = _ort_copies(quantized, out_dir, profile, progress)
    lap("ort_format")
    emb, det, e2e = _evaluate(reference, fp32_folder, quantized, threads, progress)
    lap("evaluate")
    precisions = {net: precision.value if net in settings else "fp32" for net in fp32}
    entries = _entries(fp32_folder, out_dir, shipped, "ort" if ort_files else "onnx", precisions)
    arithmetic = _int8_arithmetic(profile) if quant_mode is not QuantMode.FP16 else None
    recognition = fp32_folder.recognition  # a user embedder's threshold, kept as calibrated
    face_models.write_models_file(out_dir, entries, profile.name, __version__, arithmetic, recognition)
    build = QuantBuild(
        target=profile.name,
        precision=precision,
        mode=quant_mode,
        out_dir=out_dir,
        settings=settings,
        models=entries,
        onnx_files={net: {**_file_info(p), "fp32_size": fp32[net].stat().st_size} for net, p in quantized.items()},
        ort_files=ort_files,
        ort_platform=platform,
        calibration=calibration.to_dict() if calibration is not None else {"images": 0, "reason": "not needed"},
        thresholds=dict(profile.thresholds.__dict__),
        embedder=emb.to_dict(),
        detector=det.to_dict(),
        end_to_end=e2e,
    )
    build.failures = gate_failures(profile, build.embedder, build.detector)
    build.seconds = {**lap.seconds, "total": lap.total()}
    _write_report(build, emb.cosines, profile.thresholds.embed_mean_cosine, progress)
    if check:
        build.raise_if_failed()
    return build
