"""Faces through a video: the detector on every n-th frame, dlib's shape predictor carrying each face between.

On a frame where the detector runs, the tracker keeps, for every face, its detection, dlib's five landmarks
(the shape predictor on the detector's box, as the pipeline aligns it) and its descriptor. On the frames in
between, each face's box of the frame before is given to the shape predictor again: the landmarks it finds
move the box and the detector's landmarks by the similarity transform that takes the old landmarks onto the
new ones, and the chip is cut from the new landmarks as on a detected frame. This is how MediaPipe's face
pipelines follow a face (the detector only when the landmark model loses it), with dlib's predictor as the
landmark model.

A face is lost, and the detector runs on that same frame instead, when its descriptor moves farther than
``lost_distance`` from the frame before's (a cut to another scene, another person walking in front), when its
box changes size by more than ``MAX_SCALE_STEP`` in one frame, or when its centre leaves the image. A face
that enters between two detector frames is found at the next one: at most ``detect_every - 1`` frames late.
The cost of a frame the detector skips is the landmarks, chip and embedder only (docs/benchmarks.md,
section ``arm-frame``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edge.errors import InputError
from edge.face.align import similarity_transform
from edge.face.pipeline import Face, FacePipeline
from edge.face.types import Detection

#: A face whose box grows or shrinks by more than this factor from one frame to the next is taken as lost.
MAX_SCALE_STEP = 1.5
#: The largest ``detect_every`` accepted (a new face waits at most that many frames minus one).
MAX_DETECT_EVERY = 1000


@dataclass(frozen=True)
class _Track:
    detection: Detection
    points: np.ndarray  # dlib's five landmarks, float64 [5, 2]
    descriptor: np.ndarray


def check_detect_every(value: object, where: str = "detect_every") -> int:
    """``value`` as a whole number of frames in 1..``MAX_DETECT_EVERY``.

    Raises:
        InputError: naming ``where`` and the value, if it is anything else.
    """
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or not 1 <= value <= MAX_DETECT_EVERY:
        raise InputError(
            f"{where} = {value!r}; expected a whole number of frames from 1 (the detector on every frame) "
            f"to {MAX_DETECT_EVERY}"
        )
    return int(value)


class FaceTracker:
    """``analyze`` of a ``FacePipeline`` for consecutive frames of one video, the detector on every
    ``detect_every``-th frame (and whenever a face is lost, or no face is followed).

    Args:
        pipeline: the face pipeline, with its shape predictor (``open_face_pipeline`` builds one).
        detect_every: 1 runs the detector on every frame (then ``analyze`` is the pipeline's); n > 1 runs it on
            one frame in n while faces are followed.
        lost_distance: a followed face whose descriptor moves farther than this from the frame before's is
            lost; None: half the pipeline's same-person ``threshold`` (dlib's: 0.3).

    Raises:
        InputError: if ``detect_every`` is not in 1..``MAX_DETECT_EVERY``, ``lost_distance`` is not a positive
            number, or ``detect_every`` > 1 and the pipeline has no shape predictor to follow faces with.
    """

    def __init__(self, pipeline: FacePipeline, detect_every: int, lost_distance: float | None = None) -> None:
        self.detect_every = check_detect_every(detect_every)
        if self.detect_every > 1 and pipeline.shape_predictor is None:
            raise InputError(
                f"detect_every = {detect_every}: following faces between detector frames needs the pipeline's "
                "shape predictor (dlib's 5-point model); this pipeline aligns from the detector's landmarks"
            )
        if lost_distance is None:
            lost_distance = float(pipeline.threshold) / 2.0
        if not np.isfinite(lost_distance) or lost_distance <= 0:
            raise InputError(f"lost_distance = {lost_distance!r}; expected a positive descriptor distance")
        self.pipeline = pipeline
        self.lost_distance = float(lost_distance)
        self._tracks: list[_Track] = []
        self._followed = 0  # frames followed since the detector last ran
        #: True when the last ``analyze`` followed its faces without the detector.
        self.last_followed = False
        #: Frames analysed, and how many of them ran the detector.
        self.frames = 0
        self.detector_frames = 0

    @property
    def threshold(self) -> float:
        """The pipeline's same-person distance (``edge.face.recognize.recognize_image`` reads it)."""
        return self.pipeline.threshold

    def reset(self) -> None:
        """Forget the faces followed: the next frame runs the detector (a gap or a cut in the video)."""
        self._tracks = []

    def analyze(self, rgb: np.ndarray) -> list[Face]:
        """Every face of the next frame, as ``FacePipeline.analyze`` returns them.

        Raises:
            InputError: if the image is not uint8 [H, W, 3].
            InferenceError: if a runtime fails, or the embedder returns the wrong shape.
        """
        self.frames += 1
        if self._tracks and self._followed < self.detect_every - 1:
            faces = self._follow(rgb)
            if faces is not None:
                self._followed += 1
                self.last_followed = True
                return faces
        return self._detect(rgb)

    def _detect(self, rgb: np.ndarray) -> list[Face]:
        pipeline = self.pipeline
        detections = pipeline.detections(rgb)
        follow = self.detect_every > 1 and bool(detections)
        points = pipeline.points5(rgb, [d.box for d in detections]) if follow else None
        faces = pipeline.describe(rgb, detections, points)
        self._tracks = (
            [_Track(f.detection, p, f.descriptor) for f, p in zip(faces, points, strict=True)]
            if points is not None
            else []
        )
        self._followed = 0
        self.detector_frames += 1
        self.last_followed = False
        return faces

    def _follow(self, rgb: np.ndarray) -> list[Face] | None:
        """The followed faces on this frame; None when one is lost (the caller runs the detector)."""
        points = self.pipeline.points5(rgb, [t.detection.box for t in self._tracks])
        moved = [_moved(t.detection, t.points, p, rgb.shape) for t, p in zip(self._tracks, points, strict=True)]
        if any(d is None for d in moved):
            return None
        detections = [d for d in moved if d is not None]
        faces = self.pipeline.describe(rgb, detections, points)
        previous = np.stack([t.descriptor for t in self._tracks])
        current = np.stack([f.descriptor for f in faces])
        if (np.linalg.norm(current - previous, axis=1) > self.lost_distance).any():
            return None
        self._tracks = [_Track(f.detection, p, f.descriptor) for f, p in zip(faces, points, strict=True)]
        return faces


def _moved(detection: Detection, old: np.ndarray, new: np.ndarray, image_shape: tuple[int, ...]) -> Detection | None:
    """``detection`` carried by the similarity transform from the ``old`` landmarks to the ``new`` ones (the box
    stays upright: its centre moves, its sides scale); None when the face is lost (see the module docstring)."""
    m = similarity_transform(old, new)
    scale = float(np.sqrt(abs(np.linalg.det(m[:, :2]))))
    if not 1.0 / MAX_SCALE_STEP <= scale <= MAX_SCALE_STEP:
        return None
    x1, y1, x2, y2 = detection.box
    cx, cy = m[:, :2] @ np.array([(x1 + x2) / 2.0, (y1 + y2) / 2.0]) + m[:, 2]
    if not (0.0 <= cx < image_shape[1] and 0.0 <= cy < image_shape[0]):
        return None
    half_w, half_h = scale * (x2 - x1) / 2.0, scale * (y2 - y1) / 2.0
    landmarks = (np.asarray(detection.landmarks, np.float64) @ m[:, :2].T + m[:, 2]).astype(np.float32)
    box = (float(cx - half_w), float(cy - half_h), float(cx + half_w), float(cy + half_h))
    return Detection(box=box, score=detection.score, landmarks=landmarks)
