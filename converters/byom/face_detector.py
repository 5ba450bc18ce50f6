"""A user's own face detector for ``edge-deploy convert face --detector MODEL`` (.tflite or .onnx).

The output contract is MediaPipe BlazeFace's SSD layout, which ``edge.face.detect_blazeface`` decodes: one
float32 NHWC input of (1, 128, 128, 3) (short range) or (1, 192, 192, 3) (full range) holding RGB scaled to
[-1, 1], and two outputs told apart by shape, the box regressors (1, N, 16) and the score logits (1, N, 1),
N = 896 or 2304 anchors. A re-trained or fine-tuned BlazeFace (MediaPipe Model Maker's, or one's own) keeps
it. The file is read, and run on the proof photos, before anything is written; then it is copied into the
face folder unchanged, recorded in models.json under the BlazeFace role of its input side with its sha256 and
licence, and made the folder's detector, so the pipeline checks that follow (the agreement with
face_recognition on the evaluation pairs and its gate) run with it, and so does the device.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from converters.byom.face_embedder import user_file_source
from edge.digest import file_sha256
from edge.errors import InferenceError, InputError
from edge.face.models import BLAZEFACE_ROLES, MODELS_FILE, Detector, ModelEntry, describe, read_models_folder

#: What ``--detector`` must be, in the words of the errors.
CONTRACT = (
    "a detector in MediaPipe BlazeFace's layout: one float32 input (1, 128, 128, 3) or (1, 192, 192, 3) of RGB "
    "in [-1, 1], outputs (1, N, 16) box regressors and (1, N, 1) score logits (N = 896 or 2304), as .tflite or "
    ".onnx"
)


@dataclass(frozen=True)
class UserDetector:
    """A user's detector file, read and run once: which detector it is by its input side."""

    path: Path
    format: str
    kind: Detector
    side: int
    sha256: str
    licence: str | None = None

    def source(self) -> dict:
        """models.json ``source``: the user's file, its sha256 and licence, and the layout it was read as."""
        source = user_file_source(self.path, self.sha256, self.format, self.licence, "--detector-licence")
        return {**source, "layout": f"BlazeFace {self.side}x{self.side}"}


def read_user_detector(path: Path, licence: str | None = None) -> UserDetector:
    """Read ``--detector MODEL`` and run it on the proof photos.

    Raises:
        InputError: no such file, or not a detector in BlazeFace's layout (naming the shapes found), or it fails
            on a real photo.
        MissingDependencyError: the runtime for its format is not installed.
    """
    from converters.face.blazeface import proof_photos
    from edge.face.detect_blazeface import BlazeFaceDetector
    from edge.runtime import detect_format

    path = Path(path)
    if not path.is_file():
        raise InputError(f"--detector {path}: no such file; expected {CONTRACT}")
    try:
        with BlazeFaceDetector(path, threads=1) as detector:
            for _name, rgb in proof_photos():
                detector.detect(rgb)
            spec = detector.spec
    except (InferenceError, InputError) as exc:
        raise InputError(f"--detector {path}: {exc}; expected {CONTRACT}") from None
    kind = Detector.BLAZEFACE if spec.size == 128 else Detector.BLAZEFACE_FULL
    return UserDetector(path, detect_format(path).value, kind, spec.size, file_sha256(path), licence)


def add_user_detector(folder: Path, user: UserDetector) -> ModelEntry:
    """Copy the user's detector into a face folder, record it in models.json (its BlazeFace role, replacing an
    earlier entry of that role) and make it the folder's detector.

    Raises:
        InputError: ``folder`` has no valid models.json, or another model of the folder has the file's name.
    """
    from converters.face.blazeface import set_default_detector

    folder = Path(folder)
    entries = read_models_folder(folder).entries
    role = BLAZEFACE_ROLES[user.kind]
    taken = {e.file for r, e in entries.items() if r != role}
    if user.path.name in taken:
        raise InputError(
            f"--detector {user.path}: {folder} already holds a model named {user.path.name}; rename the detector"
        )
    target = folder / user.path.name
    if target.resolve() != user.path.resolve():
        shutil.copyfile(user.path, target)
    entry = describe(target, role, user.format, "fp32", user.source())
    models_path = folder / MODELS_FILE
    data = json.loads(models_path.read_text(encoding="utf-8"))
    data["models"] = [m for m in data["models"] if m.get("role") != role] + [entry.to_dict()]
    models_path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    set_default_detector(folder, user.kind.value)
    return entry
