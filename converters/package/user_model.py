"""``edge-deploy build --model OUT_DIR``: a bundle of a user's model, from a passed ``convert model`` folder.

The folder is not converted again: its ``models.json`` (written only when the gate passed) names the target,
the shipped file and its sha256, the source and the gate's figures. Every file it ships is checked against
the sha256 that ``convert model`` recorded (models.json, report.json) before it is copied, so a folder changed
after its gate ran is refused. The bundle is then finished like the face and slm bundles
(``converters.package.bundle.finish_bundle``: wheelhouse, install.sh, profile, manifest.json, signature,
verification, archive). There is no golden set: the device's acceptance check after an update is for our
face and language models.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from converters.byom.report import MODEL_ROLE, UNKNOWN_LICENCE
from edge.digest import file_sha256
from edge.errors import InputError
from edge.face.models import MODELS_FILE
from edge.profiles import TargetProfile
from edge.progress import ProgressFn, silent

#: The manifest's ``kind`` of a user model and its folder in the bundle (``models/model``).
USER_KIND = "model"
#: Reports copied beside the model when present.
REPORTS = ("report.json", "report.md")


@dataclass(frozen=True)
class ModelFolder:
    """A passed ``convert model`` output folder, as read and checked."""

    folder: Path
    models: dict[str, Any]
    report: dict[str, Any]
    #: The files to ship (names inside ``folder``): the model models.json names, the .onnx the gate ran beside
    #: an .ort, and the reports.
    ship: tuple[str, ...]

    @property
    def target(self) -> str:
        return str(self.models["target"])

    @property
    def precision(self) -> str:
        return str(self.models["models"][0]["precision"])


def _read_json(path: Path, what: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: cannot read {what} ({exc})") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: {what} is not a JSON object")
    return data


def _check_file(folder: Path, name: object, sha256: object, where: str, named: str) -> None:
    if not isinstance(name, str) or Path(name).name != name or name in ("", ".", ".."):
        raise InputError(f"{named}: {where} names file {name!r}; expected a file name in the folder")
    path = folder / name
    if not path.is_file():
        raise InputError(f"{named}: {name} is named in {where} but missing")
    actual = file_sha256(path)
    if actual != sha256:
        raise InputError(
            f"{named}: {name} has sha256 {actual[:16]}..., {where} recorded {str(sha256)[:16]}... (the folder "
            "changed after convert model gated it); convert the model again"
        )


def read_model_folder(folder: Path, given_as: str = "--model") -> ModelFolder:
    """Read and check a ``convert model`` output folder.

    Args:
        folder: the folder ``convert model`` wrote.
        given_as: the flag that named the folder, for the errors (``build --model``, ``build --search``); ""
            when it was given on its own (``emulate FOLDER``).

    Raises:
        InputError: no such folder; no models.json (the gate failed, or not a convert model folder); a
            models.json of another tool (face or slm folders) or of a failed gate; a file missing or changed
            since convert model recorded its sha256.
    """
    folder = Path(folder)
    named = f"{given_as} {folder}" if given_as else str(folder)
    if not folder.is_dir():
        kinds = "face, slm, all or a convert model output folder" if given_as == "--model" else "a convert model folder"
        raise InputError(f"{named}: no such folder; expected {kinds}")
    models_path = folder / MODELS_FILE
    if not models_path.is_file():
        hint = f" (see {folder / 'report.md'})" if (folder / "report.md").is_file() else ""
        raise InputError(
            f"{named}: no {MODELS_FILE}; convert model writes it only when the gate passed{hint}: only "
            "gated models are bundled"
        )
    models = _read_json(models_path, MODELS_FILE)
    entries = models.get("models")
    if not isinstance(entries, list) or len(entries) != 1 or not isinstance(entries[0], dict):
        raise InputError(f"{models_path}: expected one model entry (a convert model folder)")
    entry = entries[0]
    if entry.get("role") != MODEL_ROLE or not isinstance(models.get("gate"), dict):
        raise InputError(
            f"{models_path}: role {entry.get('role')!r}, not a convert model folder (face and slm models are built "
            "with --model face / slm)"
        )
    if models["gate"].get("passed") is not True:
        raise InputError(f"{models_path}: the gate did not pass; only gated models are bundled")
    for key in ("file", "sha256", "precision", "source"):
        if key not in entry:
            raise InputError(f"{models_path}: models[0] has no {key!r}")
    if not isinstance(models.get("target"), str):
        raise InputError(f"{models_path}: no 'target'")
    _check_file(folder, entry["file"], entry["sha256"], MODELS_FILE, named)
    report = _read_json(folder / "report.json", "report.json") if (folder / "report.json").is_file() else {}
    ship = [entry["file"]]
    files = report.get("files", {})
    for key, info in files.items() if isinstance(files, dict) else ():
        if not isinstance(info, dict):
            continue
        # Beside an .ort, the .onnx it was made from: the graph the gate ran unfused (as the face bundles); and
        # the TFLite twin convert model --format tflite checked against the fp32 copy.
        beside = entry["file"].endswith(".ort") and info.get("file") == Path(entry["file"]).with_suffix(".onnx").name
        if beside or key == "tflite":
            _check_file(folder, info["file"], info["sha256"], "report.json", named)
            ship.append(info["file"])
    ship += [MODELS_FILE, *(r for r in REPORTS if (folder / r).is_file())]
    return ModelFolder(folder, models, report, tuple(ship))


def licence_of(model: ModelFolder, licence: str | None) -> tuple[str, str]:
    """The licence to record and who gave it: ``build --licence``, else models.json's, else ``UNKNOWN_LICENCE``."""
    if licence is not None:
        if not licence.strip():
            raise InputError("--licence '': expected the model's licence, e.g. Apache-2.0")
        return licence.strip(), "edge-deploy build --licence"
    source = model.models["models"][0]["source"]
    if isinstance(source, dict) and isinstance(source.get("licence"), str):
        return source["licence"], str(source.get("licence_given_by", "models.json"))
    return UNKNOWN_LICENCE, "nobody: no --licence given"


def bundle_name(model: ModelFolder, profile: TargetProfile) -> str:
    """``<target>-model-<folder name>``, the folder name reduced to letters, digits, '.', '_' and '-'."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", model.folder.resolve().name).strip("._") or "model"
    return f"{profile.name}-{USER_KIND}-{name}"


def copy_model(model: ModelFolder, dest: Path, licence: str | None, progress: ProgressFn = silent) -> dict[str, Any]:
    """Copy the shipped files into ``dest`` (``models/model`` of the bundle) and return the manifest's record.

    Args:
        model: the checked folder (``read_model_folder``).
        dest: the bundle's model folder (created).
        licence: ``build --licence`` (None: models.json's, else ``UNKNOWN_LICENCE``).
        progress: called with a line.

    Returns:
        The ``models[]`` record of manifest.json: kind, precision, format, files, sources (with licence),
        quantization, metrics (the gate), task, inputs.
    """
    text, given_by = licence_of(model, licence)
    dest.mkdir(parents=True)
    progress(f"copying {len(model.ship)} files of {model.folder} (gate passed; sha256 checked)")
    for name in model.ship:
        shutil.copy2(model.folder / name, dest / name)
    entry = model.models["models"][0]
    source = entry["source"] if isinstance(entry["source"], dict) else {}
    return {
        "kind": USER_KIND,
        "precision": entry["precision"],
        "format": entry.get("format", Path(entry["file"]).suffix.lstrip(".")),
        "files": sorted(model.ship),
        "from": str(model.folder),
        "sources": [
            {
                "model": Path(str(source.get("path", "?"))).name,
                "file": source.get("path"),
                "sha256": source.get("sha256"),
                "format": source.get("format"),
                "licence": text,
                "licence_given_by": given_by,
            }
        ],
        "quantization": {"settings": model.report.get("settings"), "quant_ops": model.report.get("quant_ops", {})},
        "metrics": model.models["gate"],
        "task": model.models.get("task"),
        "inputs": model.models.get("inputs"),
    }


def check_target(model: ModelFolder, profile: TargetProfile, precision: str | None) -> None:
    """Refuse a bundle for another target or precision than the folder was converted and gated for.

    Raises:
        InputError: naming both.
    """
    refuse_other_build(model.folder, model.target, model.precision, f"a {model.precision} model", profile, precision)


def refuse_other_build(
    folder: Path, target: str, built: str, holds: str, profile: TargetProfile, precision: str | None
) -> None:
    """The check of ``check_target`` for any converted folder: made for ``target`` at precision ``built``
    (``holds`` says what it holds, e.g. "int8 face models").

    Raises:
        InputError: another target than ``profile``, or a precision asked for that is not ``built``.
    """
    if profile.name != target:
        raise InputError(
            f"--target {profile.name}: {folder} was converted and gated for {target}; convert it again "
            f"for {profile.name}, or build with --target {target}"
        )
    if precision is not None and precision != built:
        raise InputError(
            f"--precision {precision}: {folder} holds {holds}; convert it again with --precision {precision}"
        )
