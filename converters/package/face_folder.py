"""``edge-deploy build --model OUT_DIR`` for a face folder of ``convert face``: ours, or one with ``--embedder``.

``build --model face`` converts dlib's models in the build's own stage cache; a face folder that
``convert face`` already wrote (a user's own embedder with its calibrated threshold, a BlazeFace detector
added with ``convert blazeface``, TFLite twins) is bundled as it is instead, like a ``convert model`` folder
(``converters.package.user_model``): not converted again, its gate's report must say it passed, and every
file models.json lists is checked against the size and sha256 recorded there before it is copied. The bundle
is then what ``build --model face`` makes: ``models/face``, the daemon's files, the golden set of the
device's acceptance check (computed from the folder's own models), the wheelhouse and the manifest.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from converters.package.stages import face_metrics, face_result, quantized_record
from converters.package.user_model import refuse_other_build
from edge.errors import InputError
from edge.face import models as face_models
from edge.face.models import MODELS_FILE, FaceModel
from edge.profiles import Precision, TargetProfile
from edge.progress import ProgressFn, silent

#: Reports shipped beside the models when present: the fp32 report, or the quantized build's (with its plot).
REPORTS = ("report.json", "report.md", "quant_report.json", "quant_report.md", "cosine_hist.png",
           "tflite_report.json", "tflite_report.md")  # fmt: skip
#: Where a quantized folder keeps the fp32 models it was quantized from (``converters.face.build``).
FP32_SUBFOLDER = "fp32"


@dataclass(frozen=True)
class FaceFolder:
    """A ``convert face`` output folder, as read and checked."""

    folder: Path
    target: str
    precision: Precision
    #: The gate's report: quant_report.json of a quantized folder, report.json of an fp32 one.
    report: dict[str, Any]
    #: report.json of the fp32 models (the folder's own, or its ``fp32/`` subfolder's).
    fp32_report: dict[str, Any]
    #: Names inside ``folder`` to ship: what models.json lists, each ``.ort`` file's ``.onnx`` (the graph the
    #: gate ran unfused, which the golden set and the emulated-Pi check run again), models.json, the reports.
    ship: tuple[str, ...]


def is_face_folder(folder: Path) -> bool:
    """True when ``folder/models.json`` lists an embedder: a ``convert face`` folder (a ``convert model``
    folder lists one model of role ``model``)."""
    try:
        data = json.loads((Path(folder) / MODELS_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    models = data.get("models") if isinstance(data, dict) else None
    return isinstance(models, list) and any(
        isinstance(m, dict) and m.get("role") == FaceModel.EMBEDDER.role for m in models
    )


def _report(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(
            f"--model {path.parent}: no {path.name}; expected the report 'edge-deploy convert face' writes beside "
            "models.json (only a gated face folder is bundled)"
        ) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: cannot read the face build's report ({exc})") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: the face build's report is not a JSON object")
    return data


def read_face_folder(folder: Path) -> FaceFolder:
    """Read and check a ``convert face`` output folder.

    Raises:
        InputError: no models.json; a listed file missing or changed since convert face recorded it (size or
            sha256); no report, or a report whose gate did not pass; no 'target'.
    """
    folder = Path(folder)
    models = face_models.read_models_folder(folder)  # every listed file's size and sha256 checked
    entries = models.entries
    embedder = entries.get(FaceModel.EMBEDDER.role)
    if embedder is None:
        raise InputError(f"{folder / MODELS_FILE}: no {FaceModel.EMBEDDER.role!r} entry; not a convert face folder")
    target = models.document.get("target")
    if not isinstance(target, str):
        raise InputError(f"{folder / MODELS_FILE}: no 'target'; expected the profile convert face built for")
    try:
        precision = Precision(embedder.precision)
    except ValueError:
        raise InputError(
            f"{folder / MODELS_FILE}: the embedder's precision is {embedder.precision!r}; expected one of "
            f"{', '.join(p.value for p in Precision)}"
        ) from None
    quantized = precision is not Precision.FP32
    report_path = folder / ("quant_report.json" if quantized else "report.json")
    report = _report(report_path)
    if report.get("passed") is not True:
        raise InputError(f"{report_path}: passed = {report.get('passed')!r}; only a gated face folder is bundled")
    fp32_report = _report(folder / FP32_SUBFOLDER / "report.json") if quantized else report
    ship = {MODELS_FILE, *(e.file for e in entries.values()), *(r for r in REPORTS if (folder / r).is_file())}
    for entry in entries.values():
        gated = Path(entry.file).with_suffix(".onnx").name
        if entry.file.endswith(".ort") and (folder / gated).is_file():
            ship.add(gated)
    return FaceFolder(folder, target, precision, report, fp32_report, tuple(sorted(ship)))


def check_target(face: FaceFolder, profile: TargetProfile, precision: Precision | None) -> None:
    """Refuse a bundle for another target or precision than the folder was converted and gated for.

    Raises:
        InputError: naming both.
    """
    built = face.precision.value
    asked = precision.value if precision else None
    refuse_other_build(face.folder, face.target, built, f"{built} face models", profile, asked)


def bundle_name(face: FaceFolder, profile: TargetProfile) -> str:
    """``<target>-face-<folder name>``, the folder name reduced to letters, digits, '.', '_' and '-'."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", face.folder.resolve().name).strip("._") or "models"
    return f"{profile.name}-face-{name}"


def copy_face_folder(face: FaceFolder, dest: Path, progress: ProgressFn = silent) -> dict[str, Any]:
    """Copy the shipped files into ``dest`` (``models/face`` of the bundle) and return the manifest's record:
    the face stage's (kind, precision, format, files, sources with licences, quantization, metrics) and the
    folder it came from."""
    dest.mkdir(parents=True)
    progress(f"copying {len(face.ship)} files of {face.folder} (gate passed; sizes and sha256 checked)")
    for name in face.ship:
        shutil.copy2(face.folder / name, dest / name)
    if face.precision is Precision.FP32:
        metrics, quantization = face_metrics(face.report), {"method": "none"}
    else:
        for name in ("report.json", "report.md"):  # the fp32 build's reports, named as the face stage names them
            if (face.folder / FP32_SUBFOLDER / name).is_file():
                shutil.copy2(face.folder / FP32_SUBFOLDER / name, dest / f"fp32_{name}")
        done = quantized_record(face.report, face.fp32_report, face.report if face.report.get("tflite") else None)
        metrics, quantization = done["metrics"], done["quantization"]
    return {**face_result(face.precision, dest, quantization, metrics).to_dict(), "from": str(face.folder)}
