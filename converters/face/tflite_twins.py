"""TFLite twins of a face models folder (``edge-deploy convert face --format tflite|both``).

For every face net with a fixed input size, onnx2tf (``converters.tflite.convert``, its own venv) converts
the fp32 ONNX file into TFLite: fp32, or full-integer INT8 (int8 input and output) for the nets the ONNX
build quantizes, calibrated on the same calibration samples as the ONNX INT8 (``CalibrationSet``). Each twin
is then

* compared with the ONNX file it was made from (``compare_tflite_with_onnx``): fp32 twins must equal it
  within ``FP32_TWIN_TOLERANCE`` (the embedder: the profile's ``embed_max_abs_diff_fp32``);
* for the embedder, put behind the same accuracy gate as the ONNX embedder (``gate_failures``' embedder
  thresholds: mean cosine and same/different decisions against the fp32 descriptors on the evaluation set).

The twins are listed in ``models.json`` under their own roles (``tflite.embedder``, ``tflite.detector.rnet``,
...), so the roles the device pipeline opens keep pointing at the ONNX/ORT files; ``edge.face.embed`` runs the
TFLite embedder on LiteRT like the ONNX one on onnxruntime. MTCNN's PNet has no twin: it runs on every level
of the image pyramid at a different size, and onnx2tf converts at one fixed input size (its MaxPool padding is
made explicit for that size, ``converters.tflite.prep``).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from converters.face.calibration import CalibrationSet
from converters.face.quant_eval import Fp32Reference, evaluate_embedder
from converters.face.quantize import embedder_failures
from converters.tflite.convert import DEFAULT_VENV, TfliteVariant, compare_tflite_with_onnx, export_tflite
from edge import __version__
from edge.errors import ValidationError
from edge.face import models as face_models
from edge.face.models import FaceModel
from edge.profiles import TargetProfile
from edge.progress import ProgressFn, silent
from edge.runtime import default_threads

#: The nets that get a TFLite twin (PNet: see the module docstring).
TWIN_NETS = (FaceModel.RNET, FaceModel.ONET, FaceModel.EMBEDDER)
#: models.json role of a twin: this prefix + the net's role.
ROLE_PREFIX = "tflite."
#: fp32 twin vs its ONNX source, detector nets: measured 6.3e-7 (RNet), 7.7e-7 (ONet) here; a wrong layout or
#: padding moves outputs by 1e-2 or more (tests/integration/test_tflite.py).
FP32_TWIN_TOLERANCE = 1e-4
#: At most this many samples per net go through the LiteRT/ONNX comparison (LiteRT runs one at a time).
COMPARE_SAMPLES = 64
REPORT_JSON = "tflite_report.json"
REPORT_MD = "tflite_report.md"
_INPUT = {FaceModel.RNET: "input", FaceModel.ONET: "input", FaceModel.EMBEDDER: "chip"}


def twin_role(net: FaceModel) -> str:
    """``tflite.embedder``, ``tflite.detector.rnet``, ..."""
    return ROLE_PREFIX + net.role


@dataclass
class TwinReport:
    """The twins of one folder: per net its file, variant, comparison with ONNX and (embedder) gate figures."""

    target: str
    out_dir: Path
    nets: dict[str, dict] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures

    def to_dict(self) -> dict:
        return {
            "tool_version": __version__,
            "target": self.target,
            "passed": self.passed,
            "failures": self.failures,
            "pnet": "no twin: PNet runs at a different input size on every pyramid level; onnx2tf converts at one",
            "nets": self.nets,
        }

    def markdown(self) -> str:
        lines = [
            "## TFLite twins (onnx2tf, run on LiteRT)",
            "",
            f"Verdict: **{'PASSED' if self.passed else 'FAILED'}**. Each twin is compared with the fp32 ONNX "
            "file it was converted from, on real samples; the embedder twin also goes through the ONNX "
            "embedder's accuracy gate (against the fp32 descriptors on the evaluation set). PNet has no twin "
            "(its input size changes with every pyramid level). Details: `" + REPORT_JSON + "`.",
            "",
            "| net | file | precision | vs ONNX: max abs diff / min cosine (samples) | gate: cosine mean / "
            "decisions agreeing |",
            "|---|---|---|---|---|",
        ]
        for net, d in self.nets.items():
            c, g = d["vs_onnx"], d.get("gate")
            gate = f"{g['cosine_mean']:.5f} / {g['decisions']['agreement']:.4f}" if g else "-"
            lines.append(
                f"| {net} | `{d['file']}` | {d['precision']} | {c['max_abs_diff']:.2e} / {c['min_cosine']:.6f} "
                f"({c['samples']}) | {gate} |"
            )
        if self.failures:
            lines += ["", "TFLite failures:", ""] + [f"- {f}" for f in self.failures]
        return "\n".join(lines) + "\n"

    def summary(self) -> str:
        lines = [f"TFLite twins in {self.out_dir}:"]
        for net, d in self.nets.items():
            g = d.get("gate")
            gate = f"; gate cosine {g['cosine_mean']:.5f}, decisions {g['decisions']['agreement']:.4f}" if g else ""
            lines.append(
                f"  {net:9} {d['file']:32} {d['precision']:5} vs ONNX max |diff| {d['vs_onnx']['max_abs_diff']:.2e}"
                + gate
            )
        lines.append("PASSED" if self.passed else "FAILED:\n  " + "\n  ".join(self.failures))
        return "\n".join(lines)


def _samples(net: FaceModel, calibration: CalibrationSet, reference: Fp32Reference) -> np.ndarray:
    """NCHW float32 samples to compare a twin with ONNX: evaluation chips (embedder), cascade crops (detector)."""
    if net is FaceModel.EMBEDDER:
        chips = np.transpose(reference.chips, (0, 3, 1, 2)).astype(np.float32)
    else:
        chips = np.concatenate([feed[_INPUT[net]] for feed in calibration.feeds[net]])
    return chips[:COMPARE_SAMPLES]


def _calibration_nhwc(net: FaceModel, calibration: CalibrationSet) -> np.ndarray:
    """The ONNX INT8 calibration samples of ``net``, channels last as onnx2tf takes them."""
    nchw = np.concatenate([feed[_INPUT[net]] for feed in calibration.feeds[net]])
    return np.ascontiguousarray(np.transpose(nchw, (0, 2, 3, 1)), dtype=np.float32)


def _convert(onnx_path: Path, out_dir: Path, int8: bool, calib: np.ndarray | None, net, progress, venv) -> Path:
    """One onnx2tf run in a scratch folder; the kept twin is moved to ``out_dir``, the log to ``out_dir/onnx2tf``."""
    variant = TfliteVariant.INT8 if int8 else TfliteVariant.FP32
    with tempfile.TemporaryDirectory(prefix="tflite-", dir=out_dir) as tmp:
        export = export_tflite(
            onnx_path, Path(tmp), int8=int8, calibration=calib, input_name=_INPUT[net], progress=progress, venv=venv
        )
        logs = out_dir / "onnx2tf"
        logs.mkdir(exist_ok=True)
        shutil.move(export.log_path, logs / export.log_path.name)
        kept = out_dir / export.files[variant].name
        shutil.move(export.files[variant], kept)
    return kept


def _check(net: FaceModel, path: Path, int8: bool, profile: TargetProfile, reference, samples, onnx_path, threads):
    """The twin against its ONNX source (and, for the embedder, the accuracy gate): (record, failures)."""
    vs_onnx = compare_tflite_with_onnx(path, onnx_path, samples)
    vs_onnx.pop("tflite"), vs_onnx.pop("onnx")
    record = {"file": path.name, "precision": "int8" if int8 else "fp32", "source": onnx_path.name, "vs_onnx": vs_onnx}
    failures = []
    tolerance = profile.thresholds.embed_max_abs_diff_fp32 if net is FaceModel.EMBEDDER else FP32_TWIN_TOLERANCE
    if not int8 and vs_onnx["max_abs_diff"] > tolerance:
        failures.append(
            f"TFLite {net} ({path.name}): max |diff| to {onnx_path.name} {vs_onnx['max_abs_diff']:.3g} > {tolerance:g}"
        )
    if net is FaceModel.EMBEDDER:
        stats = evaluate_embedder(reference, path, threads).to_dict()
        record["gate"] = {k: v for k, v in stats.items() if k != "cosines"}
        failures += [f"TFLite {path.name}: {f}" for f in embedder_failures(profile, stats)]
    return record, failures


def _reuse(sources: dict[str, face_models.ModelEntry], fp32_dir: Path, out_dir: Path, net: FaceModel) -> Path | None:
    """The fp32 twin already in ``fp32_dir`` (``sources``: its models.json entries), copied into ``out_dir``, or
    None."""
    entry = sources.get(twin_role(net)) if fp32_dir != out_dir else None
    if entry is None or entry.precision != "fp32":
        return None
    shutil.copy2(fp32_dir / entry.file, out_dir / entry.file)
    return out_dir / entry.file


def _record(out_dir: Path, profile: TargetProfile, entries: list[face_models.ModelEntry]) -> None:
    """Add (or replace) the twins' entries in ``out_dir/models.json``, keeping its other entries and keys."""
    path = out_dir / face_models.MODELS_FILE
    data = json.loads(path.read_text(encoding="utf-8"))
    roles = {e.role for e in entries}
    kept = [m for m in data["models"] if m["role"] not in roles]
    data["models"] = kept + [e.to_dict() for e in entries]
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def write_tflite_twins(
    fp32_dir: Path,
    out_dir: Path,
    profile: TargetProfile,
    calibration: CalibrationSet,
    reference: Fp32Reference,
    *,
    int8_nets: tuple[FaceModel, ...] = (),
    progress: ProgressFn = silent,
    venv: Path = DEFAULT_VENV,
) -> TwinReport:
    """Write the TFLite twins of ``fp32_dir``'s nets into ``out_dir``, check them, record them in models.json.

    Args:
        fp32_dir: the fp32 folder (``convert_face``): the ONNX sources and their models.json entries.
        out_dir: the folder the twins join (``fp32_dir`` itself, or the quantized folder beside it); its
            models.json gets a ``tflite.<role>`` entry per twin.
        profile: thresholds and threads.
        calibration: the ONNX INT8's calibration samples (INT8 twins calibrate on them; RNet/ONet twins are
            compared with ONNX on them).
        reference: the fp32 results on the evaluation set (the embedder's comparison and gate).
        int8_nets: nets whose twin is full-integer INT8 (the ones the ONNX build quantizes); others fp32. An
            fp32 twin already in ``fp32_dir`` is reused.
        progress: called with a line per step (onnx2tf takes a minute or more per net).
        venv: onnx2tf's venv.

    Returns:
        The TwinReport (also written as ``tflite_report.json`` / ``.md``).

    Raises:
        MissingDependencyError: onnx2tf's venv is missing (the message names scripts/setup_onnx2tf.sh).
        ConversionError: onnx2tf failed.
        ValidationError: a twin is off its ONNX source or misses the gate; the report on disk says which.
    """
    fp32_dir, out_dir = Path(fp32_dir), Path(out_dir)
    sources = face_models.read_models_folder(fp32_dir).entries
    threads = max(1, min(profile.runtime.threads, default_threads()))
    report, entries = TwinReport(profile.name, out_dir), []
    for i, net in enumerate(TWIN_NETS, 1):
        int8 = net in int8_nets
        onnx_path = fp32_dir / sources[net.role].file
        path = None if int8 else _reuse(sources, fp32_dir, out_dir, net)
        if path is None:
            kind = "full-integer INT8" if int8 else "fp32"
            progress(f"TFLite twin {i}/{len(TWIN_NETS)}: {net} {kind} with onnx2tf (seconds to minutes)")
            calib = _calibration_nhwc(net, calibration) if int8 else None
            path = _convert(onnx_path, out_dir, int8, calib, net, progress, venv)
        progress(f"TFLite twin {i}/{len(TWIN_NETS)}: comparing {path.name} with {onnx_path.name}")
        record, failures = _check(
            net, path, int8, profile, reference, _samples(net, calibration, reference), onnx_path, threads
        )
        report.nets[net.value], report.failures = record, report.failures + failures
        precision = "int8" if int8 else "fp32"
        entries.append(face_models.describe(path, twin_role(net), "tflite", precision, sources[net.role].source))
    _record(out_dir, profile, entries)
    (out_dir / REPORT_JSON).write_text(json.dumps(report.to_dict(), indent=2) + "\n", encoding="utf-8")
    (out_dir / REPORT_MD).write_text(f"# TFLite twins for `{profile.name}`\n\n" + report.markdown(), encoding="utf-8")
    progress("TFLite report written: " + str(out_dir / REPORT_MD))
    return report


def run_embedder_twin(folder: Path) -> None:
    """Make the device run the embedder's TFLite twin from ``folder`` on LiteRT: models.json
    ``embedder_runtime = "litert"`` (``edge.face.models.EMBEDDER_RUNTIME_KEY``, read by ``open_face_pipeline``,
    the daemon and a bundle's golden set). What ``--format tflite`` (or a profile's ``runtime.face_formats =
    "tflite"``) asks beyond the twins ``both`` writes.

    Raises:
        InputError: the folder has no ``tflite.embedder`` twin (``write_tflite_twins`` makes it).
    """
    path = Path(folder) / face_models.MODELS_FILE
    # raises naming the role when absent
    face_models.read_models_folder(folder).model_path(face_models.TFLITE_EMBEDDER_ROLE)
    data = json.loads(path.read_text(encoding="utf-8"))
    data[face_models.EMBEDDER_RUNTIME_KEY] = "litert"
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def raise_if_failed(report: TwinReport) -> None:
    """ValidationError listing every failure (the reports are already on disk)."""
    if report.failures:
        raise ValidationError(
            f"TFLite face models for {report.target} failed their checks (see {report.out_dir / REPORT_MD}):\n  "
            + "\n  ".join(report.failures)
        )
