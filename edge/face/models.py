"""The face models folder a conversion writes, as the device reads it.

``models.json`` says which file plays which role (detector nets, embedder), its format, precision, size and
sha256, and where its weights came from. The device opens models by role through this file — never by
guessing from file names.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from edge.digest import file_sha256
from edge.errors import InputError

MODELS_FILE = "models.json"
MODELS_SCHEMA_VERSION = 1

ROLE_EMBEDDER = "embedder"
ROLE_PNET = "detector.pnet"
ROLE_RNET = "detector.rnet"
ROLE_ONET = "detector.onet"
ROLE_LANDMARKS = "landmarks.shape5"
FACE_ROLES = (ROLE_PNET, ROLE_RNET, ROLE_ONET, ROLE_LANDMARKS, ROLE_EMBEDDER)


@dataclass(frozen=True)
class ModelEntry:
    """One model file of a models folder."""

    role: str
    file: str
    format: str
    precision: str
    sha256: str
    size: int
    source: dict

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def describe(path: Path, role: str, fmt: str, precision: str, source: dict) -> ModelEntry:
    """A ModelEntry for a file that exists now (hash and size measured)."""
    return ModelEntry(role, path.name, fmt, precision, file_sha256(path), path.stat().st_size, source)


def write_models_file(folder: Path, entries: list[ModelEntry], target: str, tool_version: str) -> Path:
    data = {
        "schema_version": MODELS_SCHEMA_VERSION,
        "target": target,
        "tool_version": tool_version,
        "models": [e.to_dict() for e in entries],
    }
    path = folder / MODELS_FILE
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return path


def read_models_file(folder: Path) -> dict[str, ModelEntry]:
    """The entries of ``folder/models.json`` by role.

    Raises:
        InputError: a missing folder or file, bad JSON, a missing key, or a listed file that is absent.
    """
    path = Path(folder) / MODELS_FILE
    if not path.is_file():
        raise InputError(
            f"{path}: not found; expected a models folder written by 'edge-deploy convert face' (with {MODELS_FILE})"
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(data, dict) or data.get("schema_version") != MODELS_SCHEMA_VERSION:
        found = data.get("schema_version") if isinstance(data, dict) else type(data).__name__
        raise InputError(f"{path}: schema_version = {found!r}; expected {MODELS_SCHEMA_VERSION}")
    entries: dict[str, ModelEntry] = {}
    for i, raw in enumerate(data.get("models", [])):
        try:
            entry = ModelEntry(**{k: raw[k] for k in ModelEntry.__dataclass_fields__})
        except (KeyError, TypeError) as exc:
            raise InputError(
                f"{path}: models[{i}] lacks key {exc}; expected {', '.join(ModelEntry.__dataclass_fields__)}"
            ) from exc
        if not (path.parent / entry.file).is_file():
            raise InputError(f"{path}: models[{i}].file = {entry.file!r} is missing from {path.parent}")
        entries[entry.role] = entry
    return entries


def running_of(folder: Path, role: str = ROLE_EMBEDDER) -> dict[str, str]:
    """What a models folder runs, as the telemetry fields that name it (``edge.telemetry.schema.RUNNING_FIELDS``).

    The model is the file playing ``role``; the bundle id is the first 16 hex digits of models.json's sha256
    (any change to the set of models changes it).

    Raises:
        InputError: as ``read_models_file``, or when no model plays ``role``.
    """
    from edge.runtime import default_backend_name
    from edge.runtime.base import ModelFormat

    path = Path(folder) / MODELS_FILE
    entry = read_models_file(folder).get(role)
    if entry is None:
        raise InputError(f"{path}: no model with role {role!r}")
    data = json.loads(path.read_text(encoding="utf-8"))
    return {
        "model": Path(entry.file).stem,
        "model_version": str(data.get("tool_version", "")),
        "model_sha256": entry.sha256,
        "bundle_id": file_sha256(path)[:16],
        "profile": str(data.get("target", "")),
        "runtime": default_backend_name(ModelFormat(entry.format)) if entry.format in {f.value for f in ModelFormat}
        else entry.format,
        "precision": entry.precision,
    }  # fmt: skip


def model_path(folder: Path, role: str) -> Path:
    """The file that plays ``role`` in ``folder``.

    Raises:
        InputError: when models.json has no model for that role.
    """
    entries = read_models_file(folder)
    if role not in entries:
        raise InputError(
            f"{Path(folder) / MODELS_FILE}: no model with role {role!r}; found {', '.join(sorted(entries)) or 'none'}"
        )
    return Path(folder) / entries[role].file


def open_face_pipeline(folder: Path, threads: int = 1):
    """The device pipeline over the models of a converted folder.

    MTCNN finds the faces; dlib's 5-point landmark model (numpy) places the landmarks on each MTCNN box, as
    face_recognition does on its HOG boxes; the chip is cut exactly as dlib's ``get_face_chip``; the ONNX
    ResNet describes it.

    Args:
        folder: a folder written by ``edge-deploy convert face`` (with models.json).
        threads: intra-op threads of each ONNX Runtime session.

    Returns:
        An ``edge.face.pipeline.FacePipeline`` (close it, or use it in a ``with`` block).

    Raises:
        InputError: models.json is missing or lacks a role; InferenceError: a model does not load.
    """
    from edge.face.detect_mtcnn import MtcnnDetector
    from edge.face.embed import FaceEmbedder
    from edge.face.pipeline import FacePipeline
    from edge.face.shape5 import ShapePredictor

    paths = {role: model_path(folder, role) for role in FACE_ROLES}
    nets = {"pnet": paths[ROLE_PNET], "rnet": paths[ROLE_RNET], "onet": paths[ROLE_ONET]}
    detector = MtcnnDetector(nets, threads=threads)
    try:
        embedder = FaceEmbedder(paths[ROLE_EMBEDDER], threads=threads)
        shape = ShapePredictor(paths[ROLE_LANDMARKS])
    except BaseException:
        detector.close()
        raise
    return FacePipeline(detector, embedder, shape_predictor=shape)
