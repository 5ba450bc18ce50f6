"""The face pipeline on the device: detect -> align -> embed, one Face per detection."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from edge.errors import InferenceError, InputError
from edge.face.align import align_chip, align_chip_dlib5
from edge.face.shape5 import MTCNN_TO_HOG_BOX, ShapePredictor, hog_like_rect
from edge.face.types import DLIB_DESCRIPTOR_SIZE, DLIB_SAME_PERSON_THRESHOLD, Detection


class Detector(Protocol):
    """Anything that finds faces: ``detect(rgb uint8 [H, W, 3]) -> list[Detection]``."""

    def detect(self, rgb: np.ndarray) -> list[Detection]: ...


class Embedder(Protocol):
    """Anything that describes aligned chips: ``embed(uint8 [N, S, S, 3]) -> float32 [N, D]`` (dlib's: S 150,
    D 128; an embedder with a ``descriptor_size`` attribute says its D)."""

    def embed(self, chips: np.ndarray) -> np.ndarray: ...


@dataclass(frozen=True)
class Face:
    """One face: where it is and its descriptor (float32; 128-d with dlib's embedder)."""

    detection: Detection
    descriptor: np.ndarray

    def to_dict(self) -> dict:
        """JSON-ready form (descriptor rounded to 6 decimals)."""
        out = self.detection.to_dict()
        out["descriptor"] = [round(float(v), 6) for v in self.descriptor]
        return out


class FacePipeline:
    """Detect faces, cut dlib-style chips, describe them in one batch.

    Two ways to place the chip:

    * ``shape_predictor=None``: from the detector's five landmarks (eye centres, nose, mouth corners)
      with a template taken from dlib's mean face (``edge.face.align.align_chip``);
    * with ``edge.face.shape5.ShapePredictor``: as face_recognition does: dlib's 5-point model on the
      detector's box (mapped to a HOG-like box), then dlib's own 5-point template
      (``align_chip_dlib5``). This makes our chips, hence decisions, match face_recognition's far more
      closely (docs/evaluation.md), for about 1.5 ms more per face (docs/benchmarks.md, face alignment).

    The pipeline owns its parts: ``close()`` (or leaving a ``with`` block) closes detector and embedder.
    """

    def __init__(
        self,
        detector: Detector,
        embedder: Embedder,
        shape_predictor: ShapePredictor | None = None,
        chip_size: int = 150,
        padding: float = 0.25,
        min_score: float = 0.0,
        box_map: tuple[float, float, float] | None = None,
        threshold: float = DLIB_SAME_PERSON_THRESHOLD,
    ) -> None:
        """Args:
        detector: e.g. ``edge.face.detect_mtcnn.MtcnnDetector``.
        embedder: e.g. ``edge.face.embed.FaceEmbedder``.
        shape_predictor: optional dlib 5-point model, see the class docstring.
        chip_size: side of the aligned chip the embedder expects.
        padding: chip margin around the face, as dlib's ``get_face_chip_details``.
        min_score: detections scoring lower are dropped before alignment (``open_face_pipeline`` passes
            ``edge.face.recognize.DEFAULT_MIN_SCORE``: MTCNN's last stage passes a fist or a metal bowl at 0.86).
        box_map: how dlib's HOG box sits on this detector's box (``edge.face.shape5.hog_like_rect``), for the
            shape predictor; None: the detector's ``hog_box_map`` attribute, else MTCNN's.
        threshold: the embedder's same-person descriptor distance (dlib's 0.6; a user's embedder has the one
            its conversion calibrated, ``edge.face.models.ModelsFolder.threshold``), the default of
            ``edge.face.recognize.recognize_image``.
        """
        self.detector = detector
        self.embedder = embedder
        self.shape_predictor = shape_predictor
        self.chip_size = chip_size
        self.padding = padding
        self.min_score = min_score
        self.threshold = threshold
        self.box_map = box_map if box_map is not None else getattr(detector, "hog_box_map", MTCNN_TO_HOG_BOX)

    def chip(self, rgb: np.ndarray, detection: Detection) -> np.ndarray:
        """The aligned chip of one detection, uint8 [size, size, 3]."""
        if self.shape_predictor is None:
            return align_chip(rgb, detection.landmarks, self.chip_size, self.padding)
        points5 = self.shape_predictor.predict(rgb, hog_like_rect(detection.box, self.box_map))
        return align_chip_dlib5(rgb, points5, self.chip_size, self.padding)

    def points5(self, rgb: np.ndarray, boxes: list[tuple[float, float, float, float]]) -> np.ndarray:
        """dlib's five landmarks of the face in each of the detector's boxes, in one pass: the shape predictor on
        the box mapped to a HOG-like box (``box_map``). float64 [N, 5, 2] in dlib's 5-point order.

        Raises:
            InputError: if the pipeline has no shape predictor, or the image is not uint8 [H, W, 3].
        """
        if self.shape_predictor is None:
            raise InputError("face pipeline: dlib's five landmarks need its shape predictor; this pipeline has none")
        return self.shape_predictor.predict_many(rgb, [hog_like_rect(box, self.box_map) for box in boxes])

    def chips(self, rgb: np.ndarray, detections: list[Detection], points: np.ndarray | None = None) -> np.ndarray:
        """Aligned chips, uint8 [N, size, size, 3], one per detection (landmarks of all faces in one pass).

        ``points``: dlib's five landmarks of each detection (``points5``), when they are known already.
        """
        if not detections:
            return np.zeros((0, self.chip_size, self.chip_size, 3), np.uint8)
        if self.shape_predictor is None:
            return np.stack([self.chip(rgb, d) for d in detections])
        if points is None:
            points = self.points5(rgb, [d.box for d in detections])
        return np.stack([align_chip_dlib5(rgb, p, self.chip_size, self.padding) for p in points])

    def detections(self, rgb: np.ndarray) -> list[Detection]:
        """The detector's faces scoring at least ``min_score``, in its order.

        Raises:
            InputError: if the image is not uint8 [H, W, 3] (raised by the detector).
        """
        return [d for d in self.detector.detect(rgb) if d.score >= self.min_score]

    def describe(self, rgb: np.ndarray, detections: list[Detection], points: np.ndarray | None = None) -> list[Face]:
        """One Face per detection: its chip (from ``points`` when given, see ``chips``) described by the embedder.

        Raises:
            InferenceError: if the embedder fails or returns the wrong shape.
        """
        if not detections:
            return []
        descriptors = self.descriptors(self.chips(rgb, detections, points))
        return [Face(d, v) for d, v in zip(detections, descriptors, strict=True)]

    def descriptors(self, chips: np.ndarray) -> np.ndarray:
        """The embedder's descriptors of aligned chips (uint8 [N, size, size, 3], N >= 1), float32 [N, D].

        Raises:
            InferenceError: if the embedder fails or returns the wrong shape.
        """
        descriptors = np.asarray(self.embedder.embed(chips), dtype=np.float32)
        size = getattr(self.embedder, "descriptor_size", DLIB_DESCRIPTOR_SIZE)
        if descriptors.shape != (len(chips), size):
            raise InferenceError(
                f"embedder returned descriptors of shape {descriptors.shape}; expected ({len(chips)}, {size})"
            )
        return descriptors

    def analyze(self, rgb: np.ndarray) -> list[Face]:
        """Find and describe every face in an image.

        Args:
            rgb: uint8 [H, W, 3], RGB.

        Returns:
            One Face per detection scoring at least ``min_score``, in the detector's order; [] when there is none.

        Raises:
            InputError: if the image is not uint8 [H, W, 3] (raised by the detector).
            InferenceError: if a runtime fails, or the embedder returns the wrong shape.
        """
        return self.describe(rgb, self.detections(rgb))

    def close(self) -> None:
        """Close the detector and the embedder (each only if it has ``close``)."""
        for part in (self.detector, self.embedder):
            close = getattr(part, "close", None)
            if close is not None:
                close()

    def __enter__(self) -> FacePipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
