"""BlazeFace face detection on the device: one network run (a few more on a tiled frame), SSD anchor decoding and
weighted NMS in numpy.

The networks are MediaPipe's face detectors from the mediapipe 0.10.21 wheel (Apache-2.0), fetched on the
host by ``converters.face.blazeface``: short range (128x128, faces within ~2 m of a phone camera) and full
range (192x192, smaller faces). The ``.tflite`` runs on LiteRT, its ONNX translation on onnxruntime, both
through ``edge.runtime``; which one is read from the file's bytes.

The steps follow MediaPipe's graph (``mediapipe/modules/face_detection/face_detection.pbtxt`` and the
``face_detection_{short,full}_range.pbtxt`` options):

1. the image is scaled to fit the input square keeping its aspect ratio, centred, the border black
   (``ImageToTensorCalculator``, ``keep_aspect_ratio``, ``BORDER_ZERO``), pixels mapped to [-1, 1]. We scale
   by area averaging (``detect_mtcnn.area_resize``) where MediaPipe samples bilinearly: a 1280-pixel photo
   brought to 128 pixels would otherwise alias (on the 21 evaluation images full range found 44 of 54 faces
   this way, 40 with OpenCV's bilinear resize; measured once by hand, not by a benchmark script);
2. anchors as ``SsdAnchorsCalculator`` with ``fixed_anchor_size`` (every anchor 1x1, only centres matter);
3. ``TensorsToDetectionsCalculator``: per anchor 16 values, box centre and size then 6 keypoints, in (x, y)
   order (``reverse_output_order``), divided by the input size and added to the anchor centre; score =
   sigmoid of the logit clipped to +-100; kept at ``score >= min_score`` (0.5 short range, 0.6 full range);
4. ``NonMaxSuppressionCalculator``, weighted, IoU > 0.3: each cluster becomes the score-weighted mean of its
   boxes and keypoints, with the best member's score;
5. the letterbox is undone to image pixels (we undo it before NMS, which is the same up to float rounding:
   IoU and weighted means do not change under a uniform scale and shift).

With ``tiling`` (``edge.face.tiles``, not MediaPipe's), steps 1-3 also run on overlapping square tiles of a
large frame, each tile's detections mapped to frame pixels; those crossing a tile edge inside the frame are
dropped, and step 4 merges all passes together. Then the second look: the passes' candidates down to
``Tiling.look_score``, merged by step 4, that score under the cut and overlap no detection each get steps 1-4
once more on a window around them (``edge.face.tiles.look_window``); what that finds at the cut and overlapping
the candidate joins the detections (step 4 once more over them all).

BlazeFace's six keypoints are both eyes, the nose tip, the mouth centre and both ear tragions. The pipeline's
``Detection`` carries five points in ``LANDMARK_NAMES`` order: eyes and nose are BlazeFace's; BlazeFace has
no mouth corners, so they are *estimated* from the mouth centre, half a mouth width along the eye line
(the mouth width / eye distance ratio of dlib's mean face). The default pipeline aligns from the box with
dlib's 5-point model and does not read these points.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edge.errors import InferenceError, InputError
from edge.face.align import template_points
from edge.face.detect_mtcnn import area_resize, area_resize_window, check_image, integral_image
from edge.face.models import open_net
from edge.face.shape5 import BLAZEFACE_FULL_TO_HOG_BOX, BLAZEFACE_SHORT_TO_HOG_BOX
from edge.face.tiles import Tiling, inside_tile, look_window, tile_grid
from edge.face.types import Detection
from edge.runtime import LoadOptions, Model, Optimization

#: MediaPipe's keypoint order in the model's output (the subject's right eye is image-left in a frontal photo).
KEYPOINT_NAMES = ("right_eye", "left_eye", "nose_tip", "mouth_center", "right_ear_tragion", "left_ear_tragion")
_NUM_COORDS = 16
_NUM_KEYPOINTS = 6
_SCORE_CLIP = 100.0
_TEMPLATE = template_points(1, 0.0)
#: Mouth width / distance between the eyes in the template the aligner uses (dlib's mean face).
_MOUTH_TO_EYES = float(np.linalg.norm(_TEMPLATE[4] - _TEMPLATE[3]) / np.linalg.norm(_TEMPLATE[1] - _TEMPLATE[0]))
#: NonMaxSuppressionCalculator's min_suppression_threshold in MediaPipe's face detection graph.
NMS_IOU = 0.3


@dataclass(frozen=True)
class BlazeFaceSpec:
    """One BlazeFace variant: its input side and MediaPipe's anchor and score options for it."""

    name: str
    size: int
    strides: tuple[int, ...]
    interpolated_scale_aspect_ratio: float
    min_score: float
    num_boxes: int
    #: where dlib's HOG box sits on this variant's box (``edge.face.shape5.hog_like_rect``)
    hog_box_map: tuple[float, float, float]


SHORT_RANGE = BlazeFaceSpec("short_range", 128, (8, 16, 16, 16), 1.0, 0.5, 896, BLAZEFACE_SHORT_TO_HOG_BOX)
FULL_RANGE = BlazeFaceSpec("full_range", 192, (4,), 0.0, 0.6, 2304, BLAZEFACE_FULL_TO_HOG_BOX)
#: The variants by input side (what the model file says about itself).
SPECS = {spec.size: spec for spec in (SHORT_RANGE, FULL_RANGE)}


def ssd_anchors(spec: BlazeFaceSpec) -> np.ndarray:
    """Anchor centres of ``SsdAnchorsCalculator`` with fixed 1x1 anchors, in MediaPipe's order.

    Consecutive layers with the same stride share one feature map; each layer adds one anchor per cell
    (aspect ratio 1), plus one more when ``interpolated_scale_aspect_ratio > 0``. Order: feature map, row,
    column, anchor.

    Returns:
        float32 [num_boxes, 2] of (x, y) centres in [0, 1] of the input square.
    """
    out = []
    layer = 0
    strides = spec.strides
    while layer < len(strides):
        last = layer
        per_cell = 0
        while last < len(strides) and strides[last] == strides[layer]:
            per_cell += 1 + (spec.interpolated_scale_aspect_ratio > 0)
            last += 1
        cells = -(-spec.size // strides[layer])  # ceil
        centres = (np.arange(cells, dtype=np.float32) + np.float32(0.5)) / np.float32(cells)
        ys, xs = np.meshgrid(centres, centres, indexing="ij")
        grid = np.stack([xs, ys], axis=-1).reshape(-1, 1, 2)
        out.append(np.repeat(grid, per_cell, axis=1).reshape(-1, 2))
        layer = last
    return np.concatenate(out, axis=0)


def decode(raw_boxes: np.ndarray, raw_scores: np.ndarray, anchors: np.ndarray, size: int) -> tuple:
    """Decode the network's outputs for every anchor (``TensorsToDetectionsCalculator``).

    Args:
        raw_boxes: [n, 16] regressors: x, y, w, h of the box centre and size, then 6 (x, y) keypoints.
        raw_scores: [n] logits.
        anchors: [n, 2] anchor centres (``ssd_anchors``).
        size: the input side the values are scaled by.

    Returns:
        (boxes [n, 4] as (x1, y1, x2, y2), keypoints [n, 6, 2], scores [n]), all float32 in [0, 1] units of
        the input square (boxes and points may leave it).
    """
    raw = raw_boxes.astype(np.float32) / np.float32(size)
    centre = raw[:, 0:2] + anchors
    half = raw[:, 2:4] * np.float32(0.5)
    boxes = np.concatenate([centre - half, centre + half], axis=1)
    keypoints = raw[:, 4:].reshape(-1, _NUM_KEYPOINTS, 2) + anchors[:, None, :]
    return boxes, keypoints, sigmoid_scores(raw_scores)


def sigmoid_scores(raw_scores: np.ndarray) -> np.ndarray:
    """MediaPipe's scores: the sigmoid of the logits clipped to +-100, float32 [n]."""
    logits = np.clip(raw_scores.astype(np.float64), -_SCORE_CLIP, _SCORE_CLIP)  # exp(100) overflows float32
    return (1.0 / (1.0 + np.exp(-logits))).astype(np.float32)


def _iou_one(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """IoU of one (x1, y1, x2, y2) box with each of ``boxes`` (MediaPipe's: 0 when either is empty)."""
    w = np.maximum(0.0, np.minimum(box[2], boxes[:, 2]) - np.maximum(box[0], boxes[:, 0]))
    h = np.maximum(0.0, np.minimum(box[3], boxes[:, 3]) - np.maximum(box[1], boxes[:, 1]))
    inter = w * h
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    union = (box[2] - box[0]) * (box[3] - box[1]) + areas - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1.0), 0.0)


def weighted_nms(boxes: np.ndarray, keypoints: np.ndarray, scores: np.ndarray, threshold: float = NMS_IOU) -> tuple:
    """MediaPipe's weighted non-maximum suppression.

    The best remaining box and every remaining box overlapping it by IoU > ``threshold`` form a cluster;
    the cluster is replaced by the score-weighted mean of its boxes and keypoints and keeps the best score.

    Args:
        boxes: [n, 4]; keypoints: [n, k, 2]; scores: [n].
        threshold: IoU above which a box joins the cluster.

    Returns:
        (boxes [m, 4], keypoints [m, k, 2], scores [m]), best score first.
    """
    order = np.argsort(-scores, kind="stable")
    out_boxes, out_points, out_scores = [], [], []
    while order.size:
        best = order[0]
        member = _iou_one(boxes[best], boxes[order]) > threshold
        member[0] = True
        cluster = order[member]
        weights = scores[cluster].astype(np.float64)
        total = weights.sum()
        out_boxes.append((boxes[cluster] * weights[:, None]).sum(axis=0) / total)
        out_points.append((keypoints[cluster] * weights[:, None, None]).sum(axis=0) / total)
        out_scores.append(scores[best])
        order = order[~member]
    if not out_scores:
        return np.zeros((0, 4), np.float32), np.zeros((0,) + keypoints.shape[1:], np.float32), np.zeros(0, np.float32)
    return (
        np.asarray(out_boxes, np.float32),
        np.asarray(out_points, np.float32),
        np.asarray(out_scores, np.float32),
    )


@dataclass(frozen=True)
class Letterbox:
    """Where the image sits in the input square: ``input = image * scale + (pad_x, pad_y)``, in pixels."""

    scale: float
    pad_x: float
    pad_y: float


def letterbox(rgb: np.ndarray, size: int) -> tuple[np.ndarray, Letterbox]:
    """Fit an RGB image into a ``size`` square keeping its aspect ratio, centred on black, values in [-1, 1].

    Returns:
        (float32 [1, size, size, 3], the placement).
    """
    h, w = rgb.shape[:2]
    new_h, new_w, _, _ = letterbox_fit(h, w, size)
    return _square(area_resize(rgb, new_h, new_w), w, size)


def letterbox_fit(h: int, w: int, size: int) -> tuple[int, int, int, int]:
    """(new_h, new_w, top, left): an ``h`` x ``w`` image scaled to fit a ``size`` square, aspect kept, centred."""
    scale = size / max(h, w)
    new_h, new_w = max(1, round(h * scale)), max(1, round(w * scale))
    return new_h, new_w, (size - new_h) // 2, (size - new_w) // 2


def letterbox_window(
    integral: np.ndarray, window: tuple[int, int, int, int], size: int
) -> tuple[np.ndarray, Letterbox]:
    """``letterbox`` of rows ``r0:r1``, columns ``c0:c1`` of an image, from its ``integral_image`` (computed once
    for the whole frame and every tile of it).

    Returns:
        (float32 [1, size, size, 3], the placement of the window, relative to its top-left corner).
    """
    r0, r1, c0, c1 = window
    new_h, new_w, _, _ = letterbox_fit(r1 - r0, c1 - c0, size)
    return _square(area_resize_window(integral, window, new_h, new_w), c1 - c0, size)


def _square(means: np.ndarray, w: int, size: int) -> tuple[np.ndarray, Letterbox]:
    """The area-resized image (float32 means [new_h, new_w, 3] of an image ``w`` wide) centred in the square,
    mapped to [-1, 1], and its placement."""
    new_h, new_w = means.shape[:2]
    top, left = (size - new_h) // 2, (size - new_w) // 2
    square = np.empty((size, size, 3), np.float32)
    for border in (square[:top], square[top + new_h :], square[:, :left], square[:, left + new_w :]):
        border.fill(-1.0)
    inner = square[top : top + new_h, left : left + new_w]  # mapped to [-1, 1] in place
    np.multiply(means, np.float32(2.0 / 255.0), out=inner)
    inner -= np.float32(1.0)
    return square[None], Letterbox(new_w / w, float(left), float(top))


def five_points(keypoints: np.ndarray) -> np.ndarray:
    """BlazeFace's six keypoints [k, 6, 2] -> the pipeline's five [k, 5, 2] in ``LANDMARK_NAMES`` order.

    Eyes are ordered by x (image-left first), the nose is BlazeFace's nose tip, and the mouth corners are
    estimated: the mouth centre +- half a mouth width along the eye line (see the module docstring).
    """
    a, b = keypoints[:, 0], keypoints[:, 1]
    swap = (a[:, 0] > b[:, 0])[:, None]
    left, right = np.where(swap, b, a), np.where(swap, a, b)
    half_mouth = (right - left) * np.float32(_MOUTH_TO_EYES / 2.0)
    mouth = keypoints[:, 3]
    return np.stack([left, right, keypoints[:, 2], mouth - half_mouth, mouth + half_mouth], axis=1).astype(np.float32)


def _check_settings(threads: int, min_score: float | None, nms_iou: float) -> None:
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        raise InputError(f"BlazeFaceDetector threads = {threads!r}; expected an integer >= 1")
    if min_score is not None and not (isinstance(min_score, int | float) and 0.0 <= min_score <= 1.0):
        raise InputError(f"BlazeFaceDetector min_score = {min_score!r}; expected a number in [0, 1] or None")
    if not (isinstance(nms_iou, int | float) and 0.0 < nms_iou < 1.0):
        raise InputError(f"BlazeFaceDetector nms_iou = {nms_iou!r}; expected a number in (0, 1)")


def _output_roles(model: Model, spec: BlazeFaceSpec) -> tuple[str, str]:
    """Names of the (regressors, classificators) outputs, told apart by shape, not by name."""
    by_shape = {tuple(o.shape): o.name for o in model.outputs}
    boxes = by_shape.get((1, spec.num_boxes, _NUM_COORDS))
    scores = by_shape.get((1, spec.num_boxes, 1))
    if boxes is None or scores is None or len(model.outputs) != 2:
        got = ", ".join(f"{o.name} {o.shape_text()}" for o in model.outputs)
        raise InferenceError(
            f"{model.path}: outputs {got}; expected BlazeFace's (1, {spec.num_boxes}, {_NUM_COORDS}) regressors "
            f"and (1, {spec.num_boxes}, 1) scores"
        )
    return boxes, scores


class BlazeFaceDetector:
    """MediaPipe's BlazeFace (short or full range, told by the model's input side) on LiteRT or onnxruntime.

    Use as a context manager or call ``close()``.
    """

    def __init__(
        self,
        model_path: Path,
        threads: int = 1,
        min_score: float | None = None,
        nms_iou: float = NMS_IOU,
        backend: str | None = None,
        tiling: Tiling | None = None,
        optimization: Optimization = Optimization.ALL,
    ) -> None:
        """Load the network.

        Args:
            model_path: ``face_detection_short_range.tflite``, ``face_detection_full_range.tflite`` or their
                ONNX translations (``converters.face.blazeface``); the format is read from the bytes.
            threads: the runtime's intra-op threads.
            min_score: keep detections scoring at least this; None: MediaPipe's (0.5 short, 0.6 full range).
            nms_iou: IoU above which boxes are merged.
            backend: force ``"litert"`` or ``"onnxruntime"``; None: the one for the file's format.
            tiling: also run the network on overlapping tiles of frames large enough (``edge.face.tiles``;
                ``DEFAULT_TILING`` is what ``detector="blazeface-full-tiled"`` runs), merging every pass's
                detections with the same weighted NMS; None: the whole frame only.
            optimization: onnxruntime's graph optimisation (``Optimization.NONE`` runs a QDQ model unfused, as
                the accuracy gates do); a ``.tflite`` on LiteRT takes only the default.

        Raises:
            InputError: a setting is out of range, or a forced backend cannot read the file.
            InferenceError: the file is missing, no model, or not BlazeFace (input or outputs of other shapes).
            MissingDependencyError: the runtime is not installed.
        """
        _check_settings(threads, min_score, nms_iou)
        if tiling is not None and not isinstance(tiling, Tiling):
            raise InputError(f"BlazeFaceDetector tiling = {tiling!r:.80}; expected an edge.face.tiles.Tiling or None")
        path = Path(model_path)
        if not path.is_file():
            raise InferenceError(f"{path}: BlazeFace model file not found; fetch it with converters.face.blazeface")
        options = LoadOptions(optimization, True, what="this BlazeFace model", purpose="BlazeFace face detection")
        self._model: Model | None = open_net(path, threads, options, backend)
        try:
            self.spec, self._input = self._check_model(self._model)
            self._outputs = _output_roles(self._model, self.spec)
        except BaseException:
            self.close()
            raise
        self.min_score = self.spec.min_score if min_score is None else float(min_score)
        self.nms_iou = float(nms_iou)
        self.anchors = ssd_anchors(self.spec)
        self.hog_box_map = self.spec.hog_box_map
        self.tiling = tiling

    @staticmethod
    def _check_model(model: Model) -> tuple[BlazeFaceSpec, str]:
        shapes = [tuple(i.shape) for i in model.inputs]
        side = shapes[0][1] if len(shapes) == 1 and len(shapes[0]) == 4 else None
        spec = SPECS.get(side) if isinstance(side, int) else None
        if spec is None or shapes[0] != (1, spec.size, spec.size, 3):
            sides = " or ".join(f"(1, {s}, {s}, 3)" for s in SPECS)
            raise InferenceError(f"{model.path}: inputs {shapes}; expected one BlazeFace input {sides}")
        return spec, model.inputs[0].name

    @property
    def backend(self) -> str:
        """The runtime that runs the network (``"litert"`` or ``"onnxruntime"``)."""
        if self._model is None:
            raise InferenceError("BlazeFaceDetector is closed")
        return self._model.backend

    def close(self) -> None:
        """Release the runtime's model. Safe to call twice."""
        if self._model is not None:
            self._model.close()
        self._model = None

    def __enter__(self) -> BlazeFaceDetector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run_raw(self, tensor: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The network's raw outputs for one input tensor: (regressors [n, 16], logits [n])."""
        if self._model is None:
            raise InferenceError("BlazeFaceDetector is closed; create a new one to detect faces")
        try:
            out = self._model.run({self._input: tensor})
        except (InferenceError, InputError) as exc:
            raise InferenceError(f"BlazeFace failed on input {tensor.shape}: {exc}") from exc
        return out[self._outputs[0]][0], out[self._outputs[1]][0, :, 0]

    def detect(self, rgb: np.ndarray, tiled: bool = True) -> list[Detection]:
        """Find faces in one RGB image (and its tiles, with ``tiling``).

        Args:
            rgb: uint8 [H, W, 3] RGB image.
            tiled: False runs the whole-frame pass alone, even with ``tiling`` (``edge.face.track`` on the
                detector frames where it follows the faces only the tiles find).

        Returns:
            Detections, best score first; boxes (not clipped) and five landmarks in image pixels.

        Raises:
            InputError: ``rgb`` is not a non-empty uint8 [H, W, 3] array.
            InferenceError: the detector is closed or the runtime fails.
        """
        image = check_image(rgb, "BlazeFace")
        if self._model is None:
            raise InferenceError("BlazeFaceDetector is closed; create a new one to detect faces")
        height, width = image.shape[:2]
        tiling = self.tiling
        floor = min(self.min_score, tiling.look_score) if tiling is not None else self.min_score
        integral, (boxes, keypoints, scores) = self._first_passes(image, floor, tiled)
        cut = scores >= self.min_score
        found = weighted_nms(boxes[cut], keypoints[cut], scores[cut], self.nms_iou)
        if tiling is not None and floor < self.min_score:
            weak = self._weak(weighted_nms(boxes, keypoints, scores, self.nms_iou), found[0], tiling.max_looks)
            if len(weak):
                integral = integral_image(image) if integral is None else integral
                windows = [look_window(box, tiling.look_zoom, width, height) for box in weak]
                found = self._second_looks(integral, weak, windows, found)
        boxes, keypoints, scores = found
        points = five_points(keypoints)
        return [
            Detection(box=(float(b[0]), float(b[1]), float(b[2]), float(b[3])), score=float(s), landmarks=p)
            for b, s, p in zip(boxes, scores, points, strict=True)
        ]

    def _first_passes(self, image: np.ndarray, floor: float, tiled: bool = True) -> tuple:
        """The whole frame's pass and, with a tiling and ``tiled``, its tiles' (dropping detections crossing an inner
        tile edge: a face the tile cuts is whole elsewhere), candidates down to ``floor`` concatenated before NMS.

        Returns:
            (the frame's integral image, or None when the frame alone ran; (boxes, keypoints, scores)).
        """
        height, width = image.shape[:2]
        tiling = self.tiling
        tiles = tile_grid(width, height, self.spec.size, tiling) if tiling is not None and tiled else []
        frame = (0, height, 0, width)
        if tiling is None or not tiles or tiling.cued:
            # the frame alone, resized without an integral image: cheaper, the same input
            first = self.decode_window(*letterbox(image, self.spec.size), frame, floor)
            if tiling is None or not tiles or not self._cues_tiles(first, max(width, height), tiling.net_face):
                return None, first
            integral = integral_image(image)  # one for every tile
        else:
            integral = integral_image(image)  # one for the frame and every tile
            first = self._candidates(integral, frame, floor)
        parts = [first]
        for tile in tiles:
            boxes, keypoints, scores = self._candidates(integral, (tile.y0, tile.y1, tile.x0, tile.x1), floor)
            whole = inside_tile(boxes, tile, width, height)
            parts.append((boxes[whole], keypoints[whole], scores[whole]))
        return integral, tuple(np.concatenate(p) for p in zip(*parts, strict=True))

    def _cues_tiles(self, first: tuple, long_side: int, net_face: float) -> bool:
        """Whether a ``Tiling.cued`` frame gets its tiles, from the whole-frame pass's candidates ``first``: when
        none reaches the cut, or one that does is narrower than ``net_face`` pixels at the network's input."""
        boxes = first[0][first[2] >= self.min_score]
        if len(boxes) == 0:
            return True
        sides = np.minimum(boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]) * (self.spec.size / long_side)
        return bool(sides.min() < net_face)

    def _weak(self, merged: tuple, found: np.ndarray, max_looks: int) -> np.ndarray:
        """The boxes of ``merged`` (every pass's candidates, NMS-merged, best first) that score under the cut and
        overlap none of ``found``: at most ``max_looks``, best first."""
        boxes, _, scores = merged
        weak = [
            box
            for box, score in zip(boxes, scores, strict=True)
            if score < self.min_score and (len(found) == 0 or _iou_one(box, found).max() <= self.nms_iou)
        ]
        return np.asarray(weak[:max_looks], np.float32).reshape(-1, 4)

    def _second_looks(self, integral: np.ndarray, weak: np.ndarray, windows: list, found: tuple) -> tuple:
        """``found`` with what one pass on each weak candidate's window (``look_window``; None: none) finds at the
        cut overlapping it, merged by NMS."""
        parts = [found]
        for box, window in zip(weak, windows, strict=True):
            if window is None:
                continue
            boxes, keypoints, scores = self._candidates(integral, window)
            boxes, keypoints, scores = weighted_nms(boxes, keypoints, scores, self.nms_iou)
            near = _iou_one(box, boxes) > self.nms_iou if len(boxes) else np.zeros(0, bool)
            parts.append((boxes[near], keypoints[near], scores[near]))
        if len(parts) == 1:
            return found
        boxes, keypoints, scores = (np.concatenate(p) for p in zip(*parts, strict=True))
        return weighted_nms(boxes, keypoints, scores, self.nms_iou)

    def _candidates(
        self, integral: np.ndarray, window: tuple[int, int, int, int], min_score: float | None = None
    ) -> tuple:
        """One network pass over rows ``r0:r1``, columns ``c0:c1`` of the image: its decoded anchors scoring at
        least ``min_score`` (None: the detector's) before NMS, boxes [n, 4] and keypoints [n, 6, 2] in image
        pixels, scores [n]."""
        tensor, place = letterbox_window(integral, window, self.spec.size)
        return self.decode_window(tensor, place, window, min_score)

    def decode_window(
        self, tensor: np.ndarray, place: Letterbox, window: tuple[int, int, int, int], min_score: float | None = None
    ) -> tuple:
        """``_candidates`` from the letterboxed input ``tensor`` of rows ``r0:r1``, columns ``c0:c1`` (placed in the
        square as ``place`` says): one network pass, its anchors scoring at least ``min_score`` (None: the
        detector's) decoded to image pixels (before NMS)."""
        raw_boxes, logits = self.run_raw(tensor)
        cut = self.min_score if min_score is None else min_score
        keep = np.flatnonzero(sigmoid_scores(logits) >= cut)  # decode only these (row-wise: the same)
        boxes, keypoints, scores = decode(raw_boxes[keep], logits[keep], self.anchors[keep], self.spec.size)
        size, inv = np.float32(self.spec.size), np.float32(1.0 / place.scale)
        shift = np.array([place.pad_x, place.pad_y], np.float32)
        origin = np.array([window[2], window[0]], np.float32)
        boxes = ((boxes.reshape(-1, 2, 2) * size - shift) * inv + origin).reshape(-1, 4)
        return boxes, (keypoints * size - shift) * inv + origin, scores
