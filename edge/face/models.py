"""The face models folder a conversion writes, as the device reads it.

``models.json`` says which file plays which role (detector nets, embedder), its format, precision, size and
sha256, and where its weights came from. The device opens models by role through this file — never by
guessing from file names.
"""

from __future__ import annotations

import enum
import hashlib
import json
import stat
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from edge.digest import file_sha256
from edge.errors import InferenceError, InputError

if TYPE_CHECKING:
    from edge.runtime import LoadOptions, Model

MODELS_FILE = "models.json"
MODELS_SCHEMA_VERSION = 1
#: models.json key of a user embedder's recognition settings (``write_models_file``): chip and descriptor
#: size, preprocessing, and the calibrated same-person threshold. Absent for dlib's embedder: its threshold is
#: ``edge.face.types.DLIB_SAME_PERSON_THRESHOLD``.
RECOGNITION_KEY = "recognition"
#: models.json key naming the detector the folder runs when none is asked for (a ``Detector`` value, written by
#: ``edge-deploy convert blazeface --default-detector``, or by ``build`` for a profile's ``runtime.face_detector``).
#: Absent: MTCNN.
DETECTOR_KEY = "detector"
#: models.json key naming the runtime the device runs the embedder on: ``"litert"`` runs its TFLite twin (role
#: ``TFLITE_EMBEDDER_ROLE``; written by ``edge-deploy convert face --format tflite``, or by a profile's
#: ``runtime.face_formats = "tflite"``). Absent: the ``embedder`` role's ONNX/ORT file on onnxruntime.
EMBEDDER_RUNTIME_KEY = "embedder_runtime"
#: The embedder's TFLite twin's role (``converters.face.tflite_twins.twin_role``).
TFLITE_EMBEDDER_ROLE = "tflite.embedder"
#: ``EMBEDDER_RUNTIME_KEY`` values, by the role each runs.
EMBEDDER_RUNTIMES = {"onnxruntime": "embedder", "litert": TFLITE_EMBEDDER_ROLE}
#: models.json key naming the runtime a BlazeFace detector runs on: ``"litert"`` runs MediaPipe's ``.tflite``
#: original (``TFLITE_BLAZEFACE_ROLES``; written by ``edge-deploy convert blazeface --runtime litert``, or by a
#: profile's ``runtime.face_detector_runtime``). Absent: its ONNX translation on onnxruntime. MTCNN always runs
#: on onnxruntime.
DETECTOR_RUNTIME_KEY = "detector_runtime"
#: ``DETECTOR_RUNTIME_KEY`` values.
DETECTOR_RUNTIMES = ("onnxruntime", "litert")


class FaceModel(enum.StrEnum):
    """The models of a face folder by short name: the keys of every per-model dict (files, calibration,
    quantization settings, reports). ``role`` is the name ``models.json`` gives each."""

    PNET = "pnet"
    RNET = "rnet"
    ONET = "onet"
    SHAPE5 = "shape5"
    EMBEDDER = "embedder"

    @property
    def role(self) -> str:
        """Its role in ``models.json``: ``"detector.pnet"``, ``"landmarks.shape5"``, ``"embedder"``..."""
        return _ROLES[self]


_ROLES = {
    FaceModel.PNET: "detector.pnet",
    FaceModel.RNET: "detector.rnet",
    FaceModel.ONET: "detector.onet",
    FaceModel.SHAPE5: "landmarks.shape5",
    FaceModel.EMBEDDER: "embedder",
}
#: MTCNN's three nets, in the order they run.
DETECTOR_NETS = (FaceModel.PNET, FaceModel.RNET, FaceModel.ONET)
#: The neural nets (ONNX) of a face folder: what quantization and the runtimes see (shape5 is a numpy model).
FACE_NETS = (*DETECTOR_NETS, FaceModel.EMBEDDER)
#: Every role of a complete face folder.
FACE_ROLES = tuple(model.role for model in FaceModel)


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


def write_models_file(
    folder: Path,
    entries: list[ModelEntry],
    target: str,
    tool_version: str,
    int8_arithmetic: str | None = None,
    recognition: dict | None = None,
) -> Path:
    """Write models.json; ``int8_arithmetic`` (quantized builds) says how the gate and the device compute INT8,
    ``recognition`` (a user's embedder) its descriptor size and same-person threshold (``RECOGNITION_KEY``)."""
    data: dict[str, object] = {
        "schema_version": MODELS_SCHEMA_VERSION,
        "target": target,
        "tool_version": tool_version,
        "models": [e.to_dict() for e in entries],
    }
    if int8_arithmetic:
        data["int8_arithmetic"] = int8_arithmetic
    if recognition:
        data[RECOGNITION_KEY] = recognition
    path = folder / MODELS_FILE
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return path


#: Largest models.json read (a real one is ~2 KB).
MAX_MODELS_FILE_BYTES = 1 << 20
_ENTRY_TYPES: dict[str, type] = {
    "role": str, "file": str, "format": str, "precision": str, "sha256": str, "size": int, "source": dict,
}  # fmt: skip
#: (path, size, mtime_ns) -> sha256 of model files already checked by this process.
_VERIFIED: dict[tuple[str, int, int], str] = {}


def _checked_entry(path: Path, i: int, raw: object) -> ModelEntry:
    """One ``models[i]`` entry: keys of the right types, a plain file name inside the folder, size and sha256."""
    where = f"{path}: models[{i}]"
    if not isinstance(raw, dict):
        raise InputError(f"{where} = {raw!r:.80}; expected an object with {', '.join(_ENTRY_TYPES)}")
    missing = [key for key in _ENTRY_TYPES if key not in raw]
    if missing:
        raise InputError(f"{where} lacks key '{missing[0]}'; expected {', '.join(_ENTRY_TYPES)}")
    for key, kind in _ENTRY_TYPES.items():
        if not isinstance(raw[key], kind) or isinstance(raw[key], bool):
            expected = {str: "a string", int: "a whole number", dict: "an object"}[kind]
            raise InputError(f"{where}.{key} = {raw[key]!r:.80}; expected {expected}")
    entry = ModelEntry(**{k: raw[k] for k in _ENTRY_TYPES})
    if entry.file in ("", ".", "..") or "/" in entry.file or "\\" in entry.file or "\0" in entry.file:
        raise InputError(f"{where}.file = {entry.file!r:.80}; expected a file name inside {path.parent}")
    file = path.parent / entry.file
    try:
        st = file.lstat()
    except OSError:
        raise InputError(f"{path}: models[{i}].file = {entry.file!r} is missing from {path.parent}") from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{where}.file = {entry.file!r}: not a regular file; expected the model file itself")
    if st.st_size != entry.size:
        raise InputError(f"{where}.file = {entry.file!r}: {st.st_size} bytes; models.json says {entry.size}")
    seen = (str(file), st.st_size, st.st_mtime_ns)
    digest = _VERIFIED.get(seen) or file_sha256(file)
    if digest != entry.sha256:
        raise InputError(
            f"{where}.file = {entry.file!r}: sha256 {digest[:12]}… but models.json says {entry.sha256[:12]}…; "
            "expected the file the conversion wrote"
        )
    _VERIFIED[seen] = digest
    return entry


def _models_bytes(folder: Path) -> bytes:
    """The bytes of ``folder/models.json`` (never through a link), at most ``MAX_MODELS_FILE_BYTES`` + 1."""
    from edge.bundle import read_bundle_file

    path = Path(folder) / MODELS_FILE
    try:
        return read_bundle_file(path, MAX_MODELS_FILE_BYTES + 1)
    except FileNotFoundError:
        raise InputError(
            f"{path}: not found; expected a models folder written by 'edge-deploy convert face' (with {MODELS_FILE})"
        ) from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from None


def _models_json(folder: Path, raw: bytes) -> dict:
    """``folder/models.json``'s bytes ``raw`` parsed (size- and depth-limited), its schema version checked."""
    from edge.payload import PayloadError, parse_json

    path = Path(folder) / MODELS_FILE
    try:
        data = parse_json(raw, str(path), MAX_MODELS_FILE_BYTES)
    except PayloadError as exc:
        raise InputError(str(exc)) from None
    if not isinstance(data, dict) or data.get("schema_version") != MODELS_SCHEMA_VERSION:
        found = data.get("schema_version") if isinstance(data, dict) else type(data).__name__
        raise InputError(f"{path}: schema_version = {found!r}; expected {MODELS_SCHEMA_VERSION}")
    return data


@dataclass(frozen=True)
class ModelsFolder:
    """A models folder (``convert face``'s, or ``convert model``'s) as ``read_models_folder`` found it: models.json
    read once, its entries checked (each listed file against its size and sha256). Stages pass this value instead
    of reading the file again.

    The optional keys (``recognition``, ``detector``, ``detector_runtime``, ``embedder_runtime``) are checked when
    asked for, each raising the InputError that names the file and the key: a folder whose ``detector`` is wrong
    still runs a detector asked for by name, and ``convert blazeface --default-detector`` can still rewrite it.
    """

    path: Path
    #: the models by role
    entries: dict[str, ModelEntry]
    #: models.json as parsed (schema version checked)
    document: dict
    #: the first 16 hex digits of models.json's sha256 (any change to the set of models changes it)
    bundle_id: str

    @property
    def models_file(self) -> Path:
        return self.path / MODELS_FILE

    @property
    def recognition(self) -> dict | None:
        """``RECOGNITION_KEY``'s table (a user's embedder), None for dlib's embedder; ``threshold`` (a finite
        distance > 0) and ``descriptor_size`` (a whole number >= 1) checked.

        Raises:
            InputError: ``recognition`` not an object or its two keys wrong.
        """
        return _checked_recognition(self.models_file, self.document.get(RECOGNITION_KEY))

    @property
    def detector(self) -> Detector:
        """The detector it runs when none is asked for: ``DETECTOR_KEY``, else MTCNN (InputError: not a name)."""
        return _checked_detector(self.models_file, self.document.get(DETECTOR_KEY))

    @property
    def detector_runtime(self) -> str:
        """The runtime its BlazeFace detector runs on: ``DETECTOR_RUNTIME_KEY``, else ``"onnxruntime"`` (InputError:
        not one of ``DETECTOR_RUNTIMES``)."""
        return _runtime_key(self.models_file, self.document, DETECTOR_RUNTIME_KEY, DETECTOR_RUNTIMES)

    @property
    def embedder_runtime(self) -> str:
        """The runtime its embedder runs on: ``EMBEDDER_RUNTIME_KEY``, else ``"onnxruntime"`` (InputError: not a
        runtime name)."""
        return _runtime_key(self.models_file, self.document, EMBEDDER_RUNTIME_KEY, EMBEDDER_RUNTIMES)

    @property
    def embedder_role(self) -> str:
        """The role of the embedder the device runs: ``tflite.embedder`` where models.json says
        ``embedder_runtime = "litert"``, else ``embedder``."""
        return EMBEDDER_RUNTIMES[self.embedder_runtime]

    @property
    def threshold(self) -> float:
        """The same-person descriptor distance: the calibrated one of a user's embedder (``recognition.threshold``),
        else dlib's ``DLIB_SAME_PERSON_THRESHOLD`` (0.6). Raises as ``recognition``."""
        from edge.face.types import DLIB_SAME_PERSON_THRESHOLD

        table = self.recognition
        return float(table["threshold"]) if table else DLIB_SAME_PERSON_THRESHOLD

    def model_path(self, role: str) -> Path:
        """The file that plays ``role``.

        Raises:
            InputError: when models.json has no model for that role.
        """
        if role not in self.entries:
            found = ", ".join(sorted(self.entries)) or "none"
            raise InputError(f"{self.models_file}: no model with role {role!r}; found {found}")
        return self.path / self.entries[role].file

    def model_paths(self, models: tuple[FaceModel, ...] = tuple(FaceModel)) -> dict[FaceModel, Path]:
        """The files of ``models``, by model.

        Raises:
            InputError: models.json has no model for one of their roles.
        """
        return {model: self.model_path(model.role) for model in models}

    def running(self, role: str | None = None) -> dict[str, str]:
        """What the folder runs, as the telemetry fields that name it (``edge.telemetry.schema.RUNNING_FIELDS``).

        The model is the file playing ``role`` (default: the embedder the device runs, ``embedder_role``).

        Raises:
            InputError: when no model plays ``role``.
        """
        from edge.runtime import default_backend_name
        from edge.runtime.base import ModelFormat

        role = self.embedder_role if role is None else role
        entry = self.entries.get(role)
        if entry is None:
            raise InputError(f"{self.models_file}: no model with role {role!r}")
        return {
            "model": Path(entry.file).stem,
            "model_version": str(self.document.get("tool_version", "")),
            "model_sha256": entry.sha256,
            "bundle_id": self.bundle_id,
            "profile": str(self.document.get("target", "")),
            "runtime": default_backend_name(ModelFormat(entry.format))
            if entry.format in {f.value for f in ModelFormat} else entry.format,
            "precision": entry.precision,
        }  # fmt: skip

    def detector_file(self, detector: Detector) -> Path | None:
        """The file a BlazeFace ``detector`` runs (None for MTCNN, whose nets are face roles).

        Raises:
            InputError: models.json lacks the detector's role (naming the command that adds it).
        """
        return None if detector is Detector.MTCNN else self.blazeface_file(detector)

    def blazeface_file(self, detector: Detector, detector_model: Path | None = None) -> Path:
        """The file a BlazeFace ``detector`` runs: ``detector_model`` when given, else its role's
        (``BLAZEFACE_ROLES``, or ``TFLITE_BLAZEFACE_ROLES`` where ``detector_runtime`` is ``"litert"``).

        Raises:
            InputError: models.json lacks the detector's role (naming the command that adds it).
        """
        if detector_model is not None:
            return Path(detector_model)
        litert = self.detector_runtime == "litert"
        role = (TFLITE_BLAZEFACE_ROLES if litert else BLAZEFACE_ROLES)[detector]
        if role not in self.entries:
            command = "edge-deploy convert blazeface MODELS" + (
                "" if detector is Detector.BLAZEFACE else " --range full"
            )
            runs = f" on {DETECTOR_RUNTIME_KEY} 'litert'" if litert else ""
            raise InputError(
                f"{self.models_file}: no model with role {role!r} for detector {detector.value!r}{runs}; add "
                f"it with '{command}' (converters.face.blazeface.add_blazeface), or pass detector_model"
            )
        return self.path / self.entries[role].file


def read_models_folder(folder: str | Path) -> ModelsFolder:
    """``folder/models.json`` read once (never through a link), its schema version and entries checked (each
    listed file against its size and sha256); the optional keys are checked when asked for (``ModelsFolder``).

    Raises:
        InputError: a missing folder or file, bad JSON, a missing or mistyped key, or a listed file that is
            absent, outside the folder, or not the file the conversion wrote (size or sha256 differ).
    """
    folder = Path(folder)
    path = folder / MODELS_FILE
    raw = _models_bytes(folder)
    data = _models_json(folder, raw)
    models = data.get("models", [])
    if not isinstance(models, list):
        raise InputError(f"{path}: models = {models!r:.80}; expected a list of model entries")
    entries: dict[str, ModelEntry] = {}
    for i, item in enumerate(models):
        entry = _checked_entry(path, i, item)
        entries[entry.role] = entry
    return ModelsFolder(folder, entries, data, hashlib.sha256(raw).hexdigest()[:16])


def _checked_recognition(path: Path, table: object) -> dict | None:
    """models.json's ``recognition`` (a user's embedder), None for dlib's: ``threshold`` (a finite distance > 0)
    and ``descriptor_size`` (a whole number >= 1) checked."""
    import math

    if table is None:
        return None
    if not isinstance(table, dict):
        raise InputError(f"{path}: {RECOGNITION_KEY} = {table!r:.80}; expected an object")
    threshold = table.get("threshold")
    if (
        isinstance(threshold, bool)
        or not isinstance(threshold, int | float)
        or not math.isfinite(threshold)
        or (threshold <= 0)
    ):
        raise InputError(f"{path}: {RECOGNITION_KEY}.threshold = {threshold!r:.80}; expected a finite distance > 0")
    size = table.get("descriptor_size")
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise InputError(f"{path}: {RECOGNITION_KEY}.descriptor_size = {size!r:.80}; expected a whole number >= 1")
    return table


def _runtime_key(path: Path, data: dict, key: str, runtimes: Collection[str]) -> str:
    """models.json ``key`` (a runtime name, one of ``runtimes``), else ``"onnxruntime"``; InputError naming the
    file, the key and the choices otherwise."""
    value = data.get(key, "onnxruntime")
    if not isinstance(value, str) or value not in runtimes:
        known = ", ".join(repr(k) for k in runtimes)
        raise InputError(f"{path}: {key} = {value!r:.80}; expected one of {known}")
    return value


def _checked_detector(path: Path, value: object) -> Detector:
    """models.json ``detector`` (``DETECTOR_KEY``) as a Detector, MTCNN when absent."""
    if value is None:
        return Detector.MTCNN
    if isinstance(value, str) and value in {d.value for d in Detector}:
        return Detector(value)
    known = ", ".join(repr(d.value) for d in Detector)
    raise InputError(f"{path}: {DETECTOR_KEY} = {value!r:.80}; expected one of {known}")


def open_net(path: Path, threads: int, options: LoadOptions, backend: str | None = None) -> Model:
    """One of the face nets, on the runtime its format calls for (``edge.runtime.open_model``).

    Args:
        path: an ONNX, ORT or TFLite file.
        threads: intra-op threads.
        options: onnxruntime's knobs and how errors name the net.
        backend: a backend to force; None: the one for the file's format.

    Raises:
        InferenceError: when the file is not a model at all (for the pipeline, a net that does not load) or the
            runtime cannot load it.
        InputError: a forced backend that cannot read the format, or onnxruntime settings for a TFLite file.
        MissingDependencyError: if the runtime is not installed.
    """
    from edge.runtime import detect_format, open_model

    try:
        detect_format(path)
    except InputError as exc:
        raise InferenceError(str(exc)) from exc
    return open_model(path, threads, backend=backend, options=options)


class Detector(enum.StrEnum):
    """The face detectors ``open_face_pipeline`` can run."""

    MTCNN = "mtcnn"  # the default: the three nets of models.json
    BLAZEFACE = "blazeface"  # MediaPipe's short-range BlazeFace (128x128)
    BLAZEFACE_FULL = "blazeface-full"  # MediaPipe's full-range detector (192x192)
    #: full range on the whole frame and on overlapping tiles of a large one (``edge.face.tiles.DEFAULT_TILING``)
    BLAZEFACE_FULL_TILED = "blazeface-full-tiled"


#: models.json roles of the optional BlazeFace detectors (``converters.face.blazeface.add_blazeface`` adds them;
#: a folder without them is complete: MTCNN is the default). The tiled detector runs the full-range file.
BLAZEFACE_ROLES = {
    Detector.BLAZEFACE: "detector.blazeface",
    Detector.BLAZEFACE_FULL: "detector.blazeface_full",
    Detector.BLAZEFACE_FULL_TILED: "detector.blazeface_full",
}
#: models.json roles of the BlazeFace ``.tflite`` originals (listed beside their ONNX translations by
#: ``add_blazeface``): what a folder whose ``detector_runtime`` is ``"litert"`` runs.
TFLITE_BLAZEFACE_ROLES = {kind: f"tflite.{role}" for kind, role in BLAZEFACE_ROLES.items()}


def default_min_score(detector: Detector) -> float:
    """The detection score below which a face is not reported when no cut-off is asked for: MTCNN's
    ``edge.face.recognize.DEFAULT_MIN_SCORE`` (0.9; its last stage passes a fist at 0.87), 0 for BlazeFace (its
    own threshold, MediaPipe's 0.5 short range and 0.6 full range, already applies inside the detector)."""
    from edge.face.recognize import DEFAULT_MIN_SCORE

    return DEFAULT_MIN_SCORE if detector is Detector.MTCNN else 0.0


def open_face_pipeline(
    folder: str | Path,
    threads: int = 1,
    unfused: bool = False,
    min_score: float | None = None,
    min_face_size: int | None = None,
    detector: Detector | str | None = None,
    detector_model: Path | None = None,
):
    """The device pipeline over the models of a converted folder: models.json read once (``read_models_folder``,
    every file's sha256 checked), then ``edge.face.folder_pipeline.open_pipeline``, whose arguments these are.

    MTCNN (or BlazeFace, if asked) finds the faces; dlib's 5-point landmark model places the landmarks, the chip
    is cut as dlib's ``get_face_chip``; the embedder (dlib's ResNet, a user's, or its TFLite twin where models.json
    says so) describes it. The pipeline's ``threshold`` is the folder's same-person distance
    (``ModelsFolder.threshold``).

    Returns:
        An ``edge.face.pipeline.FacePipeline`` (close it, or use it in a ``with`` block).

    Raises:
        InputError: models.json is missing or lacks a role (BlazeFace's too, when asked for without
            ``detector_model``), or the detector name is unknown; InferenceError: a model does not load, or
            ``threads`` is not a whole number >= 1.
    """
    from edge.face.folder_pipeline import detector_choice, open_pipeline

    detector = detector_choice(detector)  # an unknown name before reading the folder
    face = read_models_folder(folder)  # once: every file's sha256 is checked
    return open_pipeline(face, threads, unfused, min_score, min_face_size, detector, detector_model)
