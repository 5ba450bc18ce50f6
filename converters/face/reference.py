"""face_recognition's own pipeline, called through dlib exactly as face_recognition 1.3.0 calls it.

``face_recognition.face_encodings(img)`` (model="small", num_jitters=1) runs dlib's HOG
``get_frontal_face_detector()`` with one upsampling, the 5-point ``shape_predictor`` on each box, and
``face_recognition_model_v1.compute_face_descriptor(img, shape, 1)``. We call dlib directly rather than
import face_recognition: its package imports ``face_recognition_models``, which needs ``pkg_resources``,
gone from setuptools >= 81. The model files come from the installed ``face-recognition-models`` package.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from converters.face.boxes import match_boxes
from edge.errors import InputError, require

#: Upsampling face_recognition.face_locations uses by default.
HOG_UPSAMPLE = 1
#: face_recognition.face_encodings' default; dlib treats num_jitters <= 1 as "no jitter".
NUM_JITTERS = 1

_MODEL_FILES = {
    "embedder": "dlib_face_recognition_resnet_model_v1.dat",
    "landmarks5": "shape_predictor_5_face_landmarks.dat",
    "landmarks68": "shape_predictor_68_face_landmarks.dat",
}


def dlib_model_path(kind: str) -> Path:
    """Path of one of dlib's model files shipped in ``face-recognition-models``.

    Args:
        kind: "embedder", "landmarks5" or "landmarks68".

    Returns:
        Path of the .dat file.

    Raises:
        InputError: if the kind is unknown, or the package / file is missing.
    """
    if kind not in _MODEL_FILES:
        raise InputError(f"dlib model kind '{kind}'; expected one of {', '.join(_MODEL_FILES)}")
    spec = importlib.util.find_spec("face_recognition_models")
    if spec is None or not spec.submodule_search_locations:
        raise InputError(
            "package 'face_recognition_models' is not installed; "
            "pip install face-recognition-models==0.3.0 (it ships dlib's model files)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "models" / _MODEL_FILES[kind]
    if not path.is_file():
        raise InputError(f"{path}: missing; reinstall face-recognition-models==0.3.0")
    return path


@dataclass(frozen=True)
class ReferenceFace:
    """One face as face_recognition sees it.

    Attributes:
        box: (x1, y1, x2, y2) of dlib's rectangle, right/bottom exclusive (dlib's are inclusive).
        landmarks5: float64 [5, 2], dlib's 5-point model order (right eye outer/inner corner as seen in
            the picture, left eye outer/inner, nose base).
        descriptor: float64 [128].
    """

    box: tuple[float, float, float, float]
    landmarks5: np.ndarray
    descriptor: np.ndarray


class ReferencePipeline:
    """dlib HOG detector + 5-point landmarks + ResNet descriptor, as face_recognition.face_encodings."""

    def __init__(self, upsample: int = HOG_UPSAMPLE, num_jitters: int = NUM_JITTERS) -> None:
        """Load dlib's models.

        Args:
            upsample: HOG upsampling (face_recognition's default 1).
            num_jitters: face_recognition's default 1 (no jitter).

        Raises:
            MissingDependencyError: if dlib is not installed.
            InputError: if the model files are missing.
        """
        dlib = require("dlib", "reference", "the face_recognition reference pipeline")
        self._dlib = dlib
        self.upsample = upsample
        self.num_jitters = num_jitters
        self._detector = dlib.get_frontal_face_detector()
        self._shape5 = dlib.shape_predictor(str(dlib_model_path("landmarks5")))
        self._encoder = dlib.face_recognition_model_v1(str(dlib_model_path("embedder")))

    def analyze(self, rgb: np.ndarray) -> list[ReferenceFace]:
        """Detect, landmark and describe every face in an image.

        Args:
            rgb: uint8 [H, W, 3], RGB.

        Returns:
            One ReferenceFace per HOG detection, in dlib's order.

        Raises:
            InputError: if the image is not uint8 [H, W, 3].
        """
        if not isinstance(rgb, np.ndarray) or rgb.dtype != np.uint8 or rgb.ndim != 3 or rgb.shape[2] != 3:
            desc = f"{rgb.dtype} {rgb.shape}" if isinstance(rgb, np.ndarray) else type(rgb).__name__
            raise InputError(f"reference pipeline: image is {desc}; expected uint8 array [H, W, 3] (RGB)")
        img = np.ascontiguousarray(rgb)
        faces = []
        for rect in self._detector(img, self.upsample):
            shape = self._shape5(img, rect)
            desc = self._encoder.compute_face_descriptor(img, shape, self.num_jitters)
            faces.append(
                ReferenceFace(
                    box=(float(rect.left()), float(rect.top()), float(rect.right() + 1), float(rect.bottom() + 1)),
                    landmarks5=np.array([[p.x, p.y] for p in shape.parts()], np.float64),
                    descriptor=np.array(desc, np.float64),
                )
            )
        return faces

    def boxes(self, rgb: np.ndarray) -> list[tuple[float, float, float, float]]:
        """face_recognition's face boxes (``face_locations``: HOG, ``upsample``), as ``ReferenceFace.box``."""
        img = np.ascontiguousarray(rgb)
        return [
            (float(r.left()), float(r.top()), float(r.right() + 1), float(r.bottom() + 1))
            for r in self._detector(img, self.upsample)
        ]

    def descriptor_of_chip(self, chip: np.ndarray) -> np.ndarray:
        """dlib's descriptor of an already aligned 150x150 RGB chip (float64 [128])."""
        if chip.shape != (150, 150, 3) or chip.dtype != np.uint8:
            raise InputError(f"reference pipeline: chip is {chip.dtype} {chip.shape}; expected uint8 (150, 150, 3)")
        return np.array(self._encoder.compute_face_descriptor(np.ascontiguousarray(chip)), np.float64)


def reference_faces(rgb: np.ndarray) -> list[tuple[tuple[float, float, float, float], np.ndarray]]:
    """face_recognition's (box, descriptor) list for one image, with a fresh ReferencePipeline."""
    return [(f.box, f.descriptor) for f in ReferencePipeline().analyze(rgb)]


def measure_box_map(
    detector_boxes: list[list[tuple[float, float, float, float]]],
    reference_boxes: list[list[tuple[float, float, float, float]]],
) -> tuple[tuple[float, float, float], int]:
    """How dlib's HOG box sits relative to another detector's box of the same face, on average.

    Args:
        detector_boxes: per image, the other detector's (x1, y1, x2, y2) boxes (e.g. MTCNN's).
        reference_boxes: per image, HOG's boxes (``ReferenceFace.box``).

    Returns:
        ((dx, dy, side), faces): centre offset and side of HOG's box relative to the other box's mean
        side (the form of ``edge.face.shape5.MTCNN_TO_HOG_BOX``), and how many matched faces it is from.

    Raises:
        InputError: if no face is matched (IoU >= 0.3) in any image.
    """

    rows = []
    for mine, hog in zip(detector_boxes, reference_boxes, strict=True):
        for i, j, _ in match_boxes(hog, mine):
            (hx1, hy1, hx2, hy2), (mx1, my1, mx2, my2) = hog[i], mine[j]
            side = ((mx2 - mx1) + (my2 - my1)) / 2.0
            rows.append(
                (((hx1 + hx2) - (mx1 + mx2)) / 2 / side, ((hy1 + hy2) - (my1 + my2)) / 2 / side, (hx2 - hx1) / side)
            )
    if not rows:
        raise InputError("measure_box_map: no face found by both detectors; expected photos with faces")
    dx, dy, side = np.mean(rows, axis=0)
    return (float(dx), float(dy), float(side)), len(rows)
