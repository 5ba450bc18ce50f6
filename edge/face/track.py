"""Faces through a video: the detector on every n-th frame, dlib's shape predictor carrying each face between.

On a frame where the detector runs, the tracker keeps, for every face, its detection, dlib's five landmarks
(the shape predictor on the detector's box, as the pipeline aligns it) and its descriptor. On the frames in
between, each face's box of the frame before is given to the shape predictor again: the landmarks it finds
move the box and the detector's landmarks by the similarity transform that takes the old landmarks onto the
new ones, and the chip is cut from the new landmarks as on a detected frame. This is how MediaPipe's face
pipelines follow a face (the detector only when the landmark model loses it), with dlib's predictor as the
landmark model.

A followed face keeps its descriptor while its chip stays within ``keep_descriptor_within`` grey levels (mean
absolute difference over the chip) of the chip that descriptor was computed from: the alignment takes the
camera's pan, zoom and turn out of the chip, so the chip of a face that is merely carried along barely changes,
and the embedder would give it back a descriptor about as far from the kept one as two detector frames of the
same face are from each other. On a hand-held clip of the evaluation photos nearly every followed face keeps its
descriptor, while the chips of two different people there differ by about three times the default, and a
lighting change of the default's size (brighter, darker, less contrast, light from one side) moves a descriptor by
less than 0.1 (docs/benchmarks.md, section ``face-track``). A chip that changed more is described again. The
same holds on the detector's frames: a face found where a face was followed (boxes overlapping by more than
``SAME_FACE_IOU``) keeps that face's descriptor while its chip is within ``keep_descriptor_within`` of the chip the
descriptor came from, so the embedder runs only for new faces and changed chips.

A face is lost, and the detector runs on that same frame instead, when its new descriptor moves farther than
``lost_distance`` from the one it had (a cut to another scene, another person walking in front: the chip changes,
so the face is described again), when its box changes size by more than ``MAX_SCALE_STEP`` in one frame, or when
its centre leaves the image. A face that enters between two detector frames is found at the next one: at most
``detect_every - 1`` frames late.

A detector that also runs on tiles of the frame (``blazeface-full-tiled``: five network passes on a 640x480 frame
whose whole-frame pass finds no face or a small one, ``edge.face.tiles``) runs its tiles, while faces are followed,
on one detector frame in ``TILES_EVERY``; the others run its whole-frame pass alone, which finds again every face
but the small ones only a tile finds, and those are followed on as on the frames between (lost by the same rules,
and then the detector runs with its tiles at once). So a face only the tiles can find is found at most ``TILES_EVERY
x detect_every - 1`` frames late, a larger one at most ``detect_every - 1``; with no face followed, or one lost,
every detector frame runs the tiles. Their cue holds here too: beside only large faces they do not run, and a small
face there is left to the second look.

The cost of a frame the detector skips is the landmarks and chips, and the embedder for the faces whose chip
changed; a detector frame adds the detector (docs/benchmarks.md, section ``arm-frame``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np

from edge.errors import InputError
from edge.face.align import similarity_transform
from edge.face.pipeline import Face, FacePipeline
from edge.face.types import Detection

#: A face whose box grows or shrinks by more than this factor from one frame to the next is taken as lost.
MAX_SCALE_STEP = 1.5
#: The largest ``detect_every`` accepted (a new face waits at most that many frames minus one).
MAX_DETECT_EVERY = 1000
#: ``face.detect_every`` of a video or a camera source when the daemon config does not set it: the largest n whose
#: followed faces are named as on every frame with the detector, on the hand-held camera clip (docs/daemon.md).
VIDEO_DETECT_EVERY = 8
#: A followed face keeps its descriptor while its chip is within this many grey levels (mean absolute
#: difference) of the chip the descriptor came from (see the module docstring).
KEEP_DESCRIPTOR_WITHIN = 10.0
#: A face the detector finds whose box overlaps a followed face's box of the frame before by more than this (IoU)
#: is that face (and may keep its descriptor, as a followed face does).
SAME_FACE_IOU = 0.5
#: A followed face whose box overlaps a face the whole-frame pass found by more than this (IoU) is that face.
ALSO_FOUND_IOU = 0.3
#: On a detector that also runs on tiles of the frame (``blazeface-full-tiled``), while faces are followed, one
#: detector frame in this many runs the tiles; the others run the whole-frame pass alone, and the followed faces
#: it does not find again (the small ones only a tile finds) are followed on (see the module docstring).
TILES_EVERY = 4


@dataclass(frozen=True)
class _Track:
    detection: Detection
    points: np.ndarray  # dlib's five landmarks, float64 [5, 2]
    descriptor: np.ndarray
    chip: np.ndarray  # the aligned chip ``descriptor`` was computed from, uint8 [S, S, 3]


def chip_change(a: np.ndarray, b: np.ndarray) -> float:
    """Mean absolute difference of two uint8 chips of one shape, in grey levels (0 to 255).

    OpenCV's L1 norm sums the differences without wrapping, exactly (a chip's sum is far below 2**53), in one
    pass: the same value as numpy's ``abs(int16 difference).mean()`` without its three temporary arrays.
    """
    if a.shape != b.shape:
        raise InputError(f"chips of shapes {a.shape} and {b.shape}; expected two chips of one shape")
    return float(cv2.norm(a, b, cv2.NORM_L1)) / a.size


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
        lost_distance: a followed face whose descriptor moves farther than this from the one it had is lost;
            None: half the pipeline's same-person ``threshold`` (dlib's: 0.3).
        keep_descriptor_within: a followed face whose chip is within this many grey levels (mean absolute
            difference, 0 to 255) of the chip its descriptor came from keeps that descriptor; 0 describes every
            followed face on every frame.

    Raises:
        InputError: if ``detect_every`` is not in 1..``MAX_DETECT_EVERY``, ``lost_distance`` is not a positive
            number, ``keep_descriptor_within`` is not in 0..255, or ``detect_every`` > 1 and the pipeline has no
            shape predictor to follow faces with.
    """

    def __init__(
        self,
        pipeline: FacePipeline,
        detect_every: int,
        lost_distance: float | None = None,
        keep_descriptor_within: float = KEEP_DESCRIPTOR_WITHIN,
    ) -> None:
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
        if not 0.0 <= keep_descriptor_within <= 255.0:  # also refuses nan
            raise InputError(
                f"keep_descriptor_within = {keep_descriptor_within!r}; expected grey levels from 0 (describe every "
                "followed face) to 255"
            )
        self.pipeline = pipeline
        self.lost_distance = float(lost_distance)
        self.keep_descriptor_within = float(keep_descriptor_within)
        self._tracks: list[_Track] = []
        self._followed = 0  # frames followed since the detector last ran
        self._untiled = 0  # detector frames without the tiles since they last ran
        # the detector tiles the frame (BlazeFace tiled): between detector frames with tiles, whole-frame passes
        self._tiles = getattr(pipeline.detector, "tiling", None) is not None
        #: True when the last ``analyze`` followed its faces without the detector.
        self.last_followed = False
        #: Frames analysed, and how many of them ran the detector.
        self.frames = 0
        self.detector_frames = 0
        #: Faces reported on followed frames, and how many of them kept their descriptor (no embedder run).
        self.followed_faces = 0
        self.kept_descriptors = 0
        #: Detector frames that ran the whole-frame pass without the tiles (``TILES_EVERY``).
        self.untiled_frames = 0
        #: Faces the detector found again where a face was followed, and how many of them kept its descriptor.
        self.redetected_faces = 0
        self.redetected_kept = 0
        #: The largest chip change (``chip_change``) of a face that kept its descriptor.
        self.largest_kept_change = 0.0

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
        elif self._tracks and self._tiles and self._untiled < TILES_EVERY - 1:
            faces = self._detect_whole(rgb)
            if faces is not None:
                return faces
        return self._detect(rgb)

    def _detect(self, rgb: np.ndarray) -> list[Face]:
        pipeline = self.pipeline
        detections = pipeline.detections(rgb)
        before, self._tracks = self._tracks, []
        if self.detect_every > 1 and detections:
            points = pipeline.points5(rgb, [d.box for d in detections])
            chips = pipeline.chips(rgb, detections, points)
            descriptors, described = self._describe_found(detections, chips, before)
            faces = [Face(d, v) for d, v in zip(detections, descriptors, strict=True)]
            self._tracks = [_Track(*t) for t in zip(detections, points, descriptors, described, strict=True)]
        else:
            faces = pipeline.describe(rgb, detections)
        self._followed = self._untiled = 0
        self.detector_frames += 1
        self.last_followed = False
        return faces

    def _describe_found(self, detections: list[Detection], chips: np.ndarray, before: list[_Track]) -> tuple:
        """Descriptors of the detector's faces, and the chips they came from: a face found where a face was
        followed on the frame before (boxes overlapping by ``SAME_FACE_IOU``) keeps that face's descriptor while its
        chip is within ``keep_descriptor_within`` of the chip that descriptor came from; the others are described."""
        descriptors: list = [None] * len(detections)
        described: list = list(chips)
        taken: set[int] = set()
        for i, d in enumerate(detections):
            overlaps = [(_iou(d.box, t.detection.box), j) for j, t in enumerate(before) if j not in taken]
            best, j = max(overlaps, default=(0.0, -1))
            if best <= SAME_FACE_IOU:
                continue
            self.redetected_faces += 1
            if chip_change(chips[i], before[j].chip) < self.keep_descriptor_within:
                taken.add(j)
                descriptors[i], described[i] = before[j].descriptor, before[j].chip
        self.redetected_kept += len(taken)
        again = [i for i, v in enumerate(descriptors) if v is None]
        if again:
            for i, v in zip(again, self.pipeline.descriptors(chips[again]), strict=True):
                descriptors[i] = v
        return descriptors, described

    def _follow(self, rgb: np.ndarray) -> list[Face] | None:
        """The followed faces on this frame; None when one is lost (the caller runs the detector)."""
        followed = self._follow_tracks(rgb, self._tracks)
        if followed is None:
            return None
        self._tracks = followed
        return [Face(t.detection, t.descriptor) for t in followed]

    def _follow_tracks(self, rgb: np.ndarray, tracks: list[_Track]) -> list[_Track] | None:
        """``tracks`` carried into this frame (counted as followed faces); None when one is lost."""
        points = self.pipeline.points5(rgb, [t.detection.box for t in tracks])
        moved = [_moved(t.detection, t.points, p, rgb.shape) for t, p in zip(tracks, points, strict=True)]
        if any(d is None for d in moved):
            return None
        detections = [d for d in moved if d is not None]
        chips = self.pipeline.chips(rgb, detections, points)
        change = [chip_change(c, t.chip) for c, t in zip(chips, tracks, strict=True)]
        kept = [c for c in change if c < self.keep_descriptor_within]
        again = [i for i, c in enumerate(change) if c >= self.keep_descriptor_within]
        descriptors = [t.descriptor for t in tracks]
        described = [t.chip for t in tracks]
        if again:
            fresh = self.pipeline.descriptors(chips[again])
            if (np.linalg.norm(fresh - np.stack([descriptors[i] for i in again]), axis=1) > self.lost_distance).any():
                return None
            for i, v in zip(again, fresh, strict=True):
                descriptors[i], described[i] = v, chips[i]
        self.followed_faces += len(detections)
        self.kept_descriptors += len(kept)
        self.largest_kept_change = max([self.largest_kept_change, *kept])
        return [_Track(*t) for t in zip(detections, points, descriptors, described, strict=True)]

    def _detect_whole(self, rgb: np.ndarray) -> list[Face] | None:
        """A detector frame of a tiling detector without its tiles: the whole-frame pass, and the followed faces it
        does not find again (faces only the tiles find) followed as on the frames between; None when one of them
        is lost (the caller runs the detector with its tiles)."""
        pipeline = self.pipeline
        tiling: Any = pipeline.detector  # a detector with tiles (self._tiles): its detect takes ``tiled``
        found = [d for d in tiling.detect(rgb, tiled=False) if d.score >= pipeline.min_score]
        before = self._tracks
        rest = [t for t in before if not any(_iou(d.box, t.detection.box) > ALSO_FOUND_IOU for d in found)]
        followed = self._follow_tracks(rgb, rest) if rest else []
        if followed is None:
            return None
        tracks = []
        if found:
            points = pipeline.points5(rgb, [d.box for d in found])
            chips = pipeline.chips(rgb, found, points)
            descriptors, described = self._describe_found(found, chips, before)
            tracks = [_Track(*t) for t in zip(found, points, descriptors, described, strict=True)]
        self._tracks = tracks + followed
        self._followed = 0
        self._untiled += 1
        self.detector_frames += 1
        self.untiled_frames += 1
        self.last_followed = False
        return [Face(t.detection, t.descriptor) for t in self._tracks]


def _iou(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> float:
    """Intersection over union of two (x1, y1, x2, y2) boxes (0 when either is empty)."""
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - w * h
    return w * h / union if union > 0 else 0.0


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
