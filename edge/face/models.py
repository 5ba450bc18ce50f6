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


def _models_json(folder: Path, raw: bytes | None = None) -> dict:
    """``folder/models.json`` (or its bytes ``raw``) parsed (size- and depth-limited), its schema version checked."""
    from edge.payload import PayloadError, parse_json

    path = Path(folder) / MODELS_FILE
    try:
        data = parse_json(_models_bytes(folder) if raw is None else raw, str(path), MAX_MODELS_FILE_BYTES)
    except PayloadError as exc:
        raise InputError(str(exc)) from None
    if not isinstance(data, dict) or data.get("schema_version") != MODELS_SCHEMA_VERSION:
        found = data.get("schema_version") if isinstance(data, dict) else type(data).__name__
        raise InputError(f"{path}: schema_version = {found!r}; expected {MODELS_SCHEMA_VERSION}")
    return data


def read_models_file(folder: Path) -> dict[str, ModelEntry]:
    """The entries of ``folder/models.json`` by role, each file checked against its size and sha256.

    Raises:
        InputError: a missing folder or file, bad JSON, a missing or mistyped key, or a listed file that is
            absent, outside the folder, or not the file the conversion wrote (size or sha256 differ).
    """
    path = Path(folder) / MODELS_FILE
    data = _models_json(folder)
    models = data.get("models", [])
    if not isinstance(models, list):
        raise InputError(f"{path}: models = {models!r:.80}; expected a list of model entries")
    entries: dict[str, ModelEntry] = {}
    for i, raw in enumerate(models):
        entry = _checked_entry(path, i, raw)
        entries[entry.role] = entry
    return entries


def read_recognition(folder: Path) -> dict | None:
    """``folder/models.json``'s ``recognition`` (a user's embedder), checked; None for dlib's embedder.

    Returns:
        The table as written by the conversion; ``threshold`` (a finite distance > 0) and ``descriptor_size``
        (a whole number >= 1) are checked.

    Raises:
        InputError: models.json unreadable, or ``recognition`` not an object or its two keys wrong.
    """
    import math

    path = Path(folder) / MODELS_FILE
    table = _models_json(folder).get(RECOGNITION_KEY)
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


def same_person_threshold(folder: Path) -> float:
    """The same-person descriptor distance of a models folder: the calibrated one of a user's embedder
    (models.json ``recognition.threshold``), else dlib's ``DLIB_SAME_PERSON_THRESHOLD`` (0.6).

    Raises:
        InputError: as ``read_recognition``.
    """
    return _threshold_of(read_recognition(folder))


def _threshold_of(table: dict | None) -> float:
    """The threshold of a ``recognition`` table (``read_recognition``), dlib's when there is none."""
    from edge.face.types import DLIB_SAME_PERSON_THRESHOLD

    return float(table["threshold"]) if table else DLIB_SAME_PERSON_THRESHOLD


def embedder_role(folder: Path) -> str:
    """The models.json role of the embedder the device runs: ``tflite.embedder`` where models.json says
    ``embedder_runtime = "litert"`` (``EMBEDDER_RUNTIME_KEY``), else ``embedder``.

    Raises:
        InputError: models.json unreadable, or ``embedder_runtime`` not a runtime name.
    """
    return EMBEDDER_RUNTIMES[_runtime_key(folder, EMBEDDER_RUNTIME_KEY, EMBEDDER_RUNTIMES)]


def _runtime_key(folder: Path, key: str, runtimes: Collection[str]) -> str:
    """models.json ``key`` (a runtime name, one of ``runtimes``), else ``"onnxruntime"``; InputError naming the
    file, the key and the choices otherwise."""
    value = _models_json(folder).get(key, "onnxruntime")
    if not isinstance(value, str) or value not in runtimes:
        known = ", ".join(repr(k) for k in runtimes)
        raise InputError(f"{Path(folder) / MODELS_FILE}: {key} = {value!r:.80}; expected one of {known}")
    return value


def running_of(folder: Path, role: str | None = None) -> dict[str, str]:
    """What a models folder runs, as the telemetry fields that name it (``edge.telemetry.schema.RUNNING_FIELDS``).

    The model is the file playing ``role`` (default: the embedder the device runs, ``embedder_role``); the
    bundle id is the first 16 hex digits of models.json's sha256 (any change to the set of models changes it).

    Raises:
        InputError: as ``read_models_file``, or when no model plays ``role``.
    """
    from edge.runtime import default_backend_name
    from edge.runtime.base import ModelFormat

    role = embedder_role(folder) if role is None else role
    path = Path(folder) / MODELS_FILE
    entry = read_models_file(folder).get(role)
    if entry is None:
        raise InputError(f"{path}: no model with role {role!r}")
    raw = _models_bytes(folder)
    data = _models_json(folder, raw)
    return {
        "model": Path(entry.file).stem,
        "model_version": str(data.get("tool_version", "")),
        "model_sha256": entry.sha256,
        "bundle_id": hashlib.sha256(raw).hexdigest()[:16],
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


def model_paths(folder: Path, models: tuple[FaceModel, ...] = tuple(FaceModel)) -> dict[FaceModel, Path]:
    """The files of ``models`` in ``folder``, by model.

    Raises:
        InputError: models.json is missing, or has no model for one of their roles.
    """
    return {model: model_path(folder, model.role) for model in models}


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


def _onnx_source(path: Path) -> Path:
    """The ``.onnx`` an ``.ort`` file was made from (beside it), or ``path`` itself when it is one."""
    if path.suffix != ".ort":
        return path
    source = path.with_suffix(".onnx")
    if not source.is_file():
        raise InputError(f"{source}: not found; the gate's unfused arithmetic needs the .onnx beside {path.name}")
    return source


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


def folder_detector(folder: Path) -> Detector:
    """The detector a models folder runs by default: models.json ``detector`` (``DETECTOR_KEY``), else MTCNN.

    Raises:
        InputError: models.json unreadable, or ``detector`` not a known detector name.
    """
    value = _models_json(folder).get(DETECTOR_KEY)
    if value is None:
        return Detector.MTCNN
    try:
        return Detector(value)
    except ValueError:
        known = ", ".join(repr(d.value) for d in Detector)
        where = Path(folder) / MODELS_FILE
        raise InputError(f"{where}: {DETECTOR_KEY} = {value!r:.80}; expected one of {known}") from None


def detector_runtime(folder: Path) -> str:
    """The runtime a folder's BlazeFace detector runs on: models.json ``detector_runtime``
    (``DETECTOR_RUNTIME_KEY``), else ``"onnxruntime"``.

    Raises:
        InputError: models.json unreadable, or ``detector_runtime`` not one of ``DETECTOR_RUNTIMES``.
    """
    return _runtime_key(folder, DETECTOR_RUNTIME_KEY, DETECTOR_RUNTIMES)


def default_min_score(detector: Detector) -> float:
    """The detection score below which a face is not reported when no cut-off is asked for: MTCNN's
    ``edge.face.recognize.DEFAULT_MIN_SCORE`` (0.9; its last stage passes a fist at 0.87), 0 for BlazeFace (its
    own threshold, MediaPipe's 0.5 short range and 0.6 full range, already applies inside the detector)."""
    from edge.face.recognize import DEFAULT_MIN_SCORE

    return DEFAULT_MIN_SCORE if detector is Detector.MTCNN else 0.0


def _blazeface_path(folder: Path, entries: dict, detector: Detector, detector_model: Path | None) -> Path:
    if detector_model is not None:
        return Path(detector_model)
    litert = detector_runtime(folder) == "litert"
    role = (TFLITE_BLAZEFACE_ROLES if litert else BLAZEFACE_ROLES)[detector]
    if role not in entries:
        command = "edge-deploy convert blazeface MODELS" + ("" if detector is Detector.BLAZEFACE else " --range full")
        runs = f" on {DETECTOR_RUNTIME_KEY} 'litert'" if litert else ""
        raise InputError(
            f"{Path(folder) / MODELS_FILE}: no model with role {role!r} for detector {detector.value!r}{runs}; add "
            f"it with '{command}' (converters.face.blazeface.add_blazeface), or pass detector_model"
        )
    return Path(folder) / entries[role].file


def detector_file(folder: Path, detector: Detector) -> Path | None:
    """The file a BlazeFace ``detector`` runs from ``folder`` (None for MTCNN, whose nets are face roles).

    Raises:
        InputError: models.json is invalid or lacks the detector's role (naming the command that adds it).
    """
    if detector is Detector.MTCNN:
        return None
    return _blazeface_path(folder, read_models_file(folder), detector, None)


def _open_detector(
    folder: Path, entries: dict, paths: dict, threads: int, optimization, detector, detector_model, min_face_size
):
    if detector is Detector.MTCNN:
        from edge.face.detect_mtcnn import DEFAULT_MIN_FACE_SIZE, MtcnnDetector

        nets: dict[str, Path] = {net: paths[net] for net in DETECTOR_NETS}
        min_face = DEFAULT_MIN_FACE_SIZE if min_face_size is None else min_face_size
        return MtcnnDetector(nets, threads=threads, min_face_size=min_face, optimization=optimization)
    from edge.face.detect_blazeface import BlazeFaceDetector
    from edge.face.tiles import DEFAULT_TILING
    from edge.runtime import Optimization, detect_format
    from edge.runtime.base import ModelFormat

    tiling = DEFAULT_TILING if detector is Detector.BLAZEFACE_FULL_TILED else None
    path = _blazeface_path(folder, entries, detector, detector_model)
    # unfused (the gate's arithmetic) concerns ONNX files; a .tflite runs on LiteRT as it is
    onnx_optimization = optimization if detect_format(path) is not ModelFormat.TFLITE else Optimization.ALL
    return BlazeFaceDetector(path, threads=threads, tiling=tiling, optimization=onnx_optimization)


def open_face_pipeline(
    folder: Path,
    threads: int = 1,
    unfused: bool = False,
    min_score: float | None = None,
    min_face_size: int | None = None,
    detector: Detector | str | None = None,
    detector_model: Path | None = None,
):
    """The device pipeline over the models of a converted folder.

    MTCNN (or BlazeFace, if asked) finds the faces; dlib's 5-point landmark model (numpy, OpenCV) places the landmarks
    on each box, as face_recognition does on its HOG boxes; the chip is cut as dlib's ``get_face_chip`` (at
    the embedder's chip size; within ``edge.face.align.CHIP_TOLERANCE`` of it); the ONNX ResNet (or a user's
    embedder) describes it, or its TFLite twin on LiteRT where models.json says so (``embedder_role``). The
    pipeline's ``threshold`` is the folder's same-person distance (``same_person_threshold``).

    Args:
        folder: a folder written by ``edge-deploy convert face`` (with models.json).
        threads: the pipeline's threads: each ONNX Runtime session's intra-op threads, and OpenCV's (set for
            the whole process with ``cv2.setNumThreads``: left at its default, OpenCV's pool splits the chip's
            warpAffine across every core and spins there after it, about 0.5 M instructions a one-face frame on
            emulated Cortex-A72 that a one-thread figure would not own).
        unfused: run the accuracy gate's arithmetic instead of the shipped files: each net's ``.onnx``
            (the ``.ort`` file's source, beside it) with onnxruntime's graph optimisations off, so that QDQ
            runs as dequantize -> float op -> quantize whatever INT8 kernels this CPU has (a TFLite embedder
            twin runs as it is: its gate measured LiteRT's arithmetic). The emulated-Pi
            check compares the Pi's own results with these.
        min_score: detections scoring lower are left out; None: ``default_min_score`` of the detector
            (MTCNN: ``edge.face.recognize.DEFAULT_MIN_SCORE``, 0.9, as the daemon and the browser page; on
            t1.jpg MTCNN's last stage also passes a fist and a metal bowl at 0.87 and 0.86; BlazeFace: 0, its
            own threshold, MediaPipe's 0.5 short range and 0.6 full range, already applies); 0 keeps every
            detection the detector returns.
        detector: None (default): the folder's (``folder_detector``: models.json ``detector``, else MTCNN);
            ``"mtcnn"``, ``"blazeface"`` (short range), ``"blazeface-full"`` or
            ``"blazeface-full-tiled"`` (``Detector``): full range on the whole frame and, when its long side
            is at least 576 pixels, on a grid of overlapping tiles too (``edge.face.tiles.DEFAULT_TILING``;
            it finds the 80-120 pixel faces of a 1280-pixel group photo that the whole-frame pass misses, for
            about four more network runs).
        detector_model: the BlazeFace ``.onnx``/``.tflite`` to run; None: the file of its role in models.json
            (``BLAZEFACE_ROLES``; ``TFLITE_BLAZEFACE_ROLES``, the ``.tflite`` original on LiteRT, where
            models.json's ``detector_runtime`` is ``"litert"``). MTCNN always comes from models.json.
        min_face_size: smallest face side MTCNN looks for, in pixels (None: MtcnnDetector's default, 20). The
            first level of its image pyramid is scaled by 12 / min_face_size, so doubling it cuts the
            detector's work about fourfold (benchmarks/frame_speed.py measures speed and faces found).

    Returns:
        An ``edge.face.pipeline.FacePipeline`` (close it, or use it in a ``with`` block).

    Raises:
        InputError: models.json is missing or lacks a role (BlazeFace's too, when asked for without
            ``detector_model``), or the detector name is unknown; InferenceError: a model does not load, or
            ``threads`` is not a whole number >= 1.
    """
    import cv2

    from edge.face.pipeline import FacePipeline
    from edge.face.shape5 import ShapePredictor
    from edge.runtime.base import check_threads
    from edge.runtime.ort_session import Optimization

    try:
        kind = folder_detector(folder) if detector is None else Detector(detector)
    except ValueError:
        known = ", ".join(repr(d.value) for d in Detector)
        raise InputError(f"face detector {detector!r} is unknown; expected one of {known}") from None
    entries = read_models_file(folder)  # once: every file's sha256 is checked
    cv2.setNumThreads(check_threads(threads))
    role = embedder_role(folder)  # its TFLite twin, where the folder says so
    missing = [r for r in (*(model.role for model in FaceModel), role) if r not in entries]
    if missing:
        model_path(folder, missing[0])  # raises naming the role
    paths = {model: Path(folder) / entries[model.role].file for model in FaceModel}
    paths[FaceModel.EMBEDDER] = Path(folder) / entries[role].file
    optimization = Optimization.ALL
    if unfused:
        paths = {model: _onnx_source(path) if model in FACE_NETS else path for model, path in paths.items()}
        optimization = Optimization.NONE
    found = _open_detector(folder, entries, paths, threads, optimization, kind, detector_model, min_face_size)
    embedder = None
    try:
        embedder = _open_embedder(paths[FaceModel.EMBEDDER], threads, optimization)
        shape = ShapePredictor(paths[FaceModel.SHAPE5])
        threshold = _threshold_for(folder, embedder)
    except BaseException:
        found.close()
        if embedder is not None:
            embedder.close()
        raise
    score = default_min_score(kind) if min_score is None else min_score
    chip = embedder.chip_size
    return FacePipeline(found, embedder, shape_predictor=shape, chip_size=chip, min_score=score, threshold=threshold)


def _open_embedder(path: Path, threads: int, optimization):
    """The embedder on the runtime its file calls for; onnxruntime's optimisation concerns ONNX files only (a
    ``.tflite`` twin runs on LiteRT as it is, its arithmetic the one its gate measured)."""
    from edge.face.embed import FaceEmbedder
    from edge.runtime import detect_format
    from edge.runtime.base import ModelFormat

    if detect_format(path) is ModelFormat.TFLITE:
        return FaceEmbedder(path, threads=threads)
    return FaceEmbedder(path, threads=threads, optimization=optimization)


def _threshold_for(folder: Path, embedder) -> float:
    """The folder's same-person threshold, after checking that models.json's descriptor size is the model's."""
    from edge.face.types import DLIB_DESCRIPTOR_SIZE

    table = read_recognition(folder)
    size = table["descriptor_size"] if table else DLIB_DESCRIPTOR_SIZE
    if embedder.descriptor_size != size:
        raise InputError(
            f"{Path(folder) / MODELS_FILE}: the embedder gives {embedder.descriptor_size}-d descriptors, but "
            f"models.json says {size}; expected the folder 'edge-deploy convert face' wrote"
        )
    return _threshold_of(table)
