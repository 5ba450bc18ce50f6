"""MTCNN face detection on the device: the three-stage cascade in numpy around the nets, run by ``edge.runtime``.

The nets are facenet-pytorch 2.6.0's PNet/RNet/ONet exported by ``converters/face/mtcnn.py``
(``mtcnn_pnet.onnx``, ``mtcnn_rnet.onnx``, ``mtcnn_onet.onnx``). The cascade follows facenet-pytorch's
``detect_face()`` step by step so that results match it:

1. image pyramid with scales ``12 / min_face_size * factor**k``; each level resized by *area* averaging
   exactly like ``torch.nn.functional.interpolate(mode="area")`` (adaptive average pooling, not
   ``cv2.INTER_AREA``, which weights partial pixels: on a random 97x61 image resized to 48x48 the two
   differ by up to 99 grey levels);
2. PNet per scale, candidate boxes where ``prob >= t0``, NMS (IoU 0.5) per scale, NMS (0.7) across scales,
   box regression by ``(x2 - x1)``, square boxes;
3. RNet on all 24x24 crops at once, ``prob > t1``, NMS (0.7), regression by ``(x2 - x1 + 1)``, square;
4. ONet on all 48x48 crops, ``prob > t2``, five landmarks, regression, final NMS in 'Min' mode (0.7)
   with ``+1`` pixel areas, as facenet-pytorch's ``batched_nms_numpy``.

Stage 1 and 2 NMS use torchvision's convention (areas without ``+1``, IoU), stage 3 the Matlab one.
Boxes are kept in float32 throughout, as in facenet-pytorch, so rounding agrees. Two deliberate
differences: a box whose clipped crop is empty is dropped here (facenet-pytorch skips its crop but keeps
the box, which misaligns boxes and scores), and NMS breaks score ties by index (stable sort).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from enum import Enum
from pathlib import Path
from typing import NamedTuple, Self

import numpy as np

from edge.errors import InferenceError, InputError
from edge.face.models import FaceModel, open_net
from edge.face.types import Detection
from edge.runtime import LoadOptions, Model, Optimization

#: Model files the detector loads from its folder, by net.
MODEL_FILES = {FaceModel.PNET: "mtcnn_pnet.onnx", FaceModel.RNET: "mtcnn_rnet.onnx", FaceModel.ONET: "mtcnn_onet.onnx"}

_STRIDE = 2
_CELL = 12
_MAX_BATCH = 256  # RNet/ONet crops per run: bounds memory on a Pi


class Overlap(Enum):
    """How NMS measures the overlap of two boxes."""

    UNION = "union"  # intersection / union (IoU)
    MIN = "min"  # intersection / area of the smaller box


def nms(
    boxes: np.ndarray,
    scores: np.ndarray,
    threshold: float,
    overlap: Overlap = Overlap.UNION,
    plus_one: bool = False,
) -> np.ndarray:
    """Greedy non-maximum suppression.

    Args:
        boxes: [n, 4] (x1, y1, x2, y2).
        scores: [n] scores; higher wins.
        threshold: a box is dropped when its overlap with a kept, better box is > threshold.
        overlap: ``Overlap.UNION`` (IoU) or ``Overlap.MIN`` (intersection over the smaller area).
        plus_one: count widths as ``x2 - x1 + 1`` (Matlab/Caffe pixels) instead of ``x2 - x1``
            (torchvision).

    Returns:
        int64 indices of the kept boxes, best score first.
    """
    if len(boxes) == 0:
        return np.empty(0, dtype=np.int64)
    one = 1.0 if plus_one else 0.0
    x1, y1, x2, y2 = (boxes[:, k] for k in range(4))
    area = (x2 - x1 + one) * (y2 - y1 + one)
    order = np.argsort(-scores, kind="stable")
    keep = []
    while order.size > 0:
        i = order[0]
        keep.append(i)
        rest = order[1:]
        w = np.maximum(0.0, np.minimum(x2[i], x2[rest]) - np.maximum(x1[i], x1[rest]) + one)
        h = np.maximum(0.0, np.minimum(y2[i], y2[rest]) - np.maximum(y1[i], y1[rest]) + one)
        inter = w * h
        if overlap is Overlap.MIN:
            ratio = inter / np.minimum(area[i], area[rest])
        else:
            ratio = inter / (area[i] + area[rest] - inter)
        order = rest[ratio <= threshold]
    return np.asarray(keep, dtype=np.int64)


#: Smallest face side looked for, in pixels, unless told otherwise.
DEFAULT_MIN_FACE_SIZE = 20


def pyramid_scales(height: int, width: int, min_face_size: int, factor: float) -> list[float]:
    """Scales of the image pyramid: from ``12 / min_face_size`` down while the short side stays >= 12."""
    m = 12.0 / min_face_size
    minl = min(height, width) * m
    scales = []
    scale = m
    while minl >= 12:
        scales.append(scale)
        scale *= factor
        minl *= factor
    return scales


def _area_bounds(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray]:
    i = np.arange(n_out, dtype=np.int64)
    start = (i * n_in) // n_out
    end = -((-(i + 1) * n_in) // n_out)
    return start, end


#: Below this many pixels no sum of a uint8 image overflows int32 (255 * pixels < 2**31).
_INT32_PIXELS = (2**31 - 1) // 255


def integral_image(image: np.ndarray) -> np.ndarray:
    """Sums over the top-left rectangles of a uint8 [H, W, C] image: [H + 1, W + 1, C], first row and column zero.

    Computed once per image (OpenCV's ``integral``, one pass in C), it lets ``area_resize_window`` resize the
    whole image or any crop of it from four corners per output pixel. int32 while no sum can overflow it,
    else float64 (exact for integers below 2**53). It replaced numpy cumulative sums row by row, which with
    the resize to BlazeFace's input cost 2.5x the instructions on emulated Pi cores (docs/benchmarks.md,
    ``arm-detect-parts``).
    """
    import cv2

    h, w = image.shape[:2]
    depth = cv2.CV_32S if h * w <= _INT32_PIXELS else cv2.CV_64F
    out = cv2.integral(np.ascontiguousarray(image), sdepth=depth)
    return out.reshape(h + 1, w + 1, -1)  # OpenCV drops the channel axis of a 1-channel image


def area_resize_window(integral: np.ndarray, window: tuple[int, int, int, int], out_h: int, out_w: int) -> np.ndarray:
    """Resize rows ``r0:r1``, columns ``c0:c1`` of an image by adaptive average pooling.

    This is torch's ``interpolate(mode="area")``: output pixel (i, j) is the plain mean of input rows
    ``floor(i*h/out_h) .. ceil((i+1)*h/out_h)`` and the same for columns (up- and downscaling). Each sum is
    exact (integers from the integral image); the mean is the float32 nearest to sum / count. While every sum
    is below 2**24 that is one float32 division (its operands are exact, and a float32 quotient is correctly
    rounded); beyond, the sum is divided in float64 and rounded to float32, which gives the same values (a
    quotient rounded to 53 bits and then to 24 is rounded once: 53 >= 2 * 24 + 2).

    Args:
        integral: ``integral_image(image)``.
        window: (r0, r1, c0, c1) slice bounds in the image, non-empty.
        out_h: output height (>= 1).
        out_w: output width (>= 1).

    Returns:
        float32 [out_h, out_w, C].
    """
    r0, r1, c0, c1 = (int(v) for v in window)
    size = (r1 - r0, c1 - c0, out_h, out_w, integral.shape[2])
    plan = _cached_area_plan(*size) if out_h * out_w * size[4] <= _CACHED_PLAN_VALUES else _area_plan(*size)
    # whole rows first (contiguous copies), then single values of the rows flattened, and every array as large
    # as the output: numpy's loops over a broadcast channel axis of 3 cost several times the instructions
    rows = (integral[r0 + plan.row_end, c0 : c1 + 1] - integral[r0 + plan.row_start, c0 : c1 + 1]).reshape(out_h, -1)
    sums = rows[:, plan.col_end] - rows[:, plan.col_start]
    if plan.counts.dtype == np.float32:
        means = sums.astype(np.float32) / plan.counts
    else:
        means = (sums.astype(np.float64) / plan.counts).astype(np.float32)
    return means.reshape(out_h, out_w, -1)


#: Below this many pixels a window's sum of uint8 values is below 2**24, exact in float32.
_FLOAT32_EXACT_COUNT = (2**24 - 1) // 255


class _AreaPlan(NamedTuple):
    row_start: np.ndarray  # [out_h] first input row of each output row
    row_end: np.ndarray  # [out_h] one past its last
    col_start: np.ndarray  # [out_w * C] flat column-and-channel index of each output value's first column
    col_end: np.ndarray  # [out_w * C] one past its last
    counts: np.ndarray  # [out_h, out_w * C] pixels in each window: float32 when every sum fits in 24 bits


#: Plans of outputs up to this many values are kept (at most 32 of them, ~14 MB at worst): BlazeFace's input,
#: MTCNN's crops. MTCNN's larger pyramid levels are planned anew each time, as they were before plans.
_CACHED_PLAN_VALUES = 192 * 192 * 3


def _area_plan(h: int, w: int, out_h: int, out_w: int, channels: int) -> _AreaPlan:
    """What ``area_resize_window`` needs of a window's size and the output's, computed once for each."""
    rs, re = _area_bounds(h, out_h)
    cs, ce = _area_bounds(w, out_w)
    step = np.arange(channels)
    counts = np.multiply.outer(re - rs, np.repeat(ce - cs, channels))
    exact32 = int(counts.max()) <= _FLOAT32_EXACT_COUNT
    flat_cs, flat_ce = ((c[:, None] * channels + step).ravel() for c in (cs, ce))
    plan = _AreaPlan(rs, re, flat_cs, flat_ce, counts.astype(np.float32 if exact32 else np.float64))
    for array in plan:
        array.flags.writeable = False  # a cached plan is shared by every call
    return plan


_cached_area_plan = functools.lru_cache(maxsize=32)(_area_plan)


def area_resize(image: np.ndarray, out_h: int, out_w: int) -> np.ndarray:
    """Resize a whole uint8 [H, W, C] image by adaptive average pooling: the very float32 values of
    ``area_resize_window`` over its integral image, without the integral image.

    The windows' rows are summed first (each output row adds its window's input rows, taken whole, in uint16),
    then the columns of the result (transposed, so that they too are whole rows). While no window can hold
    more than 257 pixels (255 * 257 < 2**16) every sum is exact in uint16 and the mean is the same float32
    division. On BlazeFace's 640x480 -> 192x144 letterbox this cost 2.9 M instructions on emulated Cortex-A72
    against 6.4 M for the integral image and its box sums (docs/benchmarks.md, ``arm-detect-parts``). Larger
    windows (a 12-megapixel photo into 192 pixels) and images of more than 4 channels take the integral image.
    """
    h, w, channels = image.shape
    plan = _cached_pooling_plan(h, w, channels, out_h, out_w)
    if plan is None:
        return area_resize_window(integral_image(image), (0, h, 0, w), out_h, out_w)
    import cv2

    wide = np.empty((h + 1, w * channels), np.uint16)  # a last row of zeros: the tap of a shorter window
    wide[h] = 0
    wide[:h] = image.reshape(h, -1)
    rows = wide[plan.row_taps[0]]
    for taps in plan.row_taps[1:]:
        rows += wide[taps]
    cols = np.empty((w + 1, out_h * channels), np.uint16)
    cols[w] = 0
    into = cols[:w].reshape(w, out_h, channels)
    moved = cv2.transpose(rows.reshape(out_h, w, channels), into)
    if not np.may_share_memory(moved, cols):  # OpenCV writes into a matching array; copy if it ever did not
        into[...] = moved
    sums = cols[plan.col_taps[0]]
    for taps in plan.col_taps[1:]:
        sums += cols[taps]
    sums = cv2.transpose(sums.reshape(out_w, out_h, channels)).reshape(out_h, -1)
    return np.divide(sums, plan.counts, dtype=np.float32).reshape(out_h, out_w, channels)


class _PoolingPlan(NamedTuple):
    row_taps: np.ndarray  # [L, out_h] k-th input row of each output row's window, or H past its end
    col_taps: np.ndarray  # [L, out_w] k-th input column of each output column's window, or W past its end
    counts: np.ndarray  # float32 [out_h, out_w * C] pixels in each window


#: The most pixels a window may hold for its sum of uint8 values to stay below 2**16.
_UINT16_EXACT_COUNT = (2**16 - 1) // 255


def _taps(start: np.ndarray, end: np.ndarray, past: int) -> np.ndarray:
    k = np.arange(int((end - start).max()))[:, None]
    return np.where(start + k < end, start + k, past)


@functools.lru_cache(maxsize=32)
def _cached_pooling_plan(h: int, w: int, channels: int, out_h: int, out_w: int) -> _PoolingPlan | None:
    """What ``area_resize`` needs of the sizes, computed once for each; None if it must take the integral image."""
    rs, re = _area_bounds(h, out_h)
    cs, ce = _area_bounds(w, out_w)
    if int((re - rs).max()) * int((ce - cs).max()) > _UINT16_EXACT_COUNT or not 1 <= channels <= 4:
        return None
    counts = np.multiply.outer(re - rs, np.repeat(ce - cs, channels)).astype(np.float32)
    plan = _PoolingPlan(_taps(rs, re, h), _taps(cs, ce, w), counts)
    for array in plan:
        array.flags.writeable = False  # a cached plan is shared by every call
    return plan


def normalise(hwc: np.ndarray) -> np.ndarray:
    """[..., H, W, 3] RGB pixel values -> [..., 3, H, W] float32 as MTCNN expects: (x - 127.5) / 128."""
    x = (hwc.astype(np.float32) - np.float32(127.5)) * np.float32(0.0078125)
    return np.ascontiguousarray(np.moveaxis(x, -1, -3))


def generate_boxes(reg: np.ndarray, prob: np.ndarray, scale: float, threshold: float) -> np.ndarray:
    """Turn one PNet output map into candidate boxes in image pixels.

    Args:
        reg: [4, h, w] box regression of one image.
        prob: [h, w] face probability.
        scale: the pyramid scale the map was computed at.
        threshold: keep cells with ``prob >= threshold``.

    Returns:
        float32 [n, 9]: x1, y1, x2, y2, score, then the 4 regression offsets; row-major cell order.
    """
    ys, xs = np.nonzero(prob >= threshold)
    cell = np.stack([xs, ys], axis=1).astype(np.float32)
    s = np.float32(scale)
    q1 = np.floor((_STRIDE * cell + 1) / s)
    q2 = np.floor((_STRIDE * cell + _CELL) / s)
    score = prob[ys, xs][:, None]
    offsets = reg[:, ys, xs].T
    return np.concatenate([q1, q2, score, offsets], axis=1).astype(np.float32)


def regress(boxes: np.ndarray, reg: np.ndarray, plus_one: bool) -> np.ndarray:
    """Apply box regression: each side moves by ``reg * width`` (or height) of the box.

    Args:
        boxes: [n, >=4] float32; columns 0..3 are replaced in a copy.
        reg: [n, 4] offsets (dx1, dy1, dx2, dy2).
        plus_one: widths as ``x2 - x1 + 1`` (stages 2, 3) or ``x2 - x1`` (stage 1).

    Returns:
        A new array with the regressed coordinates.
    """
    out = boxes.copy()
    one = np.float32(1.0 if plus_one else 0.0)
    w = boxes[:, 2] - boxes[:, 0] + one
    h = boxes[:, 3] - boxes[:, 1] + one
    out[:, 0] = boxes[:, 0] + reg[:, 0] * w
    out[:, 1] = boxes[:, 1] + reg[:, 1] * h
    out[:, 2] = boxes[:, 2] + reg[:, 2] * w
    out[:, 3] = boxes[:, 3] + reg[:, 3] * h
    return out


def square(boxes: np.ndarray) -> np.ndarray:
    """Grow each box to a square around its centre (side = the longer side); returns a copy."""
    out = boxes.copy()
    w = boxes[:, 2] - boxes[:, 0]
    h = boxes[:, 3] - boxes[:, 1]
    side = np.maximum(w, h)
    half = np.float32(0.5)
    out[:, 0] = boxes[:, 0] + w * half - side * half
    out[:, 1] = boxes[:, 1] + h * half - side * half
    out[:, 2] = out[:, 0] + side
    out[:, 3] = out[:, 1] + side
    return out


def crop_windows(boxes: np.ndarray, width: int, height: int) -> tuple[np.ndarray, np.ndarray]:
    """Integer crop windows of boxes clipped to the image, as facenet-pytorch's ``pad()``.

    Coordinates are truncated toward zero; the window is ``rows y1-1 .. y2``, ``cols x1-1 .. x2`` after
    clipping ``x1, y1 >= 1`` and ``x2 <= width``, ``y2 <= height``.

    Args:
        boxes: [n, >=4] float boxes.
        width: image width.
        height: image height.

    Returns:
        (windows, valid): int64 [n, 4] as (row0, row1, col0, col1) slice bounds, and a bool [n] mask of
        windows that are not empty (boxes wholly outside the image are not valid).
    """
    b = np.trunc(boxes[:, :4]).astype(np.int64)
    x = np.maximum(b[:, 0], 1)
    y = np.maximum(b[:, 1], 1)
    ex = np.minimum(b[:, 2], width)
    ey = np.minimum(b[:, 3], height)
    windows = np.stack([y - 1, ey, x - 1, ex], axis=1)
    valid = (ey > y - 1) & (ex > x - 1)
    return windows, valid


def check_image(rgb: object, what: str = "MTCNN") -> np.ndarray:
    """Check that ``rgb`` is a non-empty uint8 [H, W, 3] array and return it (``what`` names the detector).

    Raises:
        InputError: naming what is wrong and what is expected.
    """
    expected = "expected an RGB image as a uint8 numpy array of shape (H, W, 3)"
    if not isinstance(rgb, np.ndarray):
        raise InputError(f"{what} input is a {type(rgb).__name__}; {expected}")
    if rgb.size == 0:
        raise InputError(f"{what} input image is empty (shape {rgb.shape}); {expected}")
    if rgb.ndim != 3 or rgb.shape[2] != 3:
        raise InputError(f"{what} input image has shape {rgb.shape}; {expected}")
    if rgb.dtype != np.uint8:
        raise InputError(f"{what} input image has dtype {rgb.dtype}; {expected}")
    return rgb


def _check_settings(threads: int, min_face_size: int, thresholds: tuple, factor: float) -> None:
    if not isinstance(threads, int) or threads < 1:
        raise InputError(f"MtcnnDetector threads = {threads!r}; expected an integer >= 1")
    if not isinstance(min_face_size, int) or min_face_size < 1:
        raise InputError(f"MtcnnDetector min_face_size = {min_face_size!r}; expected an integer >= 1 (pixels)")
    if len(thresholds) != 3 or not all(isinstance(t, int | float) and 0 <= t <= 1 for t in thresholds):
        raise InputError(
            f"MtcnnDetector thresholds = {thresholds!r}; expected three numbers in [0, 1] (PNet, RNet, ONet)"
        )
    if not isinstance(factor, int | float) or not 0 < factor < 1:
        raise InputError(f"MtcnnDetector factor = {factor!r}; expected a number in (0, 1)")


class MtcnnDetector:
    """MTCNN face detector on ONNX Runtime (CPU), matching facenet-pytorch's ``detect_face``.

    Use as a context manager or call ``close()``.
    """

    def __init__(
        self,
        model_dir: Path | Mapping[FaceModel, Path] | Mapping[str, Path],
        threads: int = 1,
        min_face_size: int = DEFAULT_MIN_FACE_SIZE,
        thresholds: tuple[float, float, float] = (0.6, 0.7, 0.7),
        factor: float = 0.709,
        optimization: Optimization = Optimization.ALL,
        *,
        precise_int8: bool = True,
    ) -> None:
        """Load the three nets.

        Args:
            model_dir: folder with ``mtcnn_pnet.onnx``, ``mtcnn_rnet.onnx``, ``mtcnn_onet.onnx``, or a
                mapping ``{FaceModel.PNET: path, ...}`` (e.g. quantized files; plain ``"pnet"`` keys work too).
            threads: intra-op threads of each ONNX Runtime session.
            min_face_size: smallest face side to find, in pixels.
            thresholds: face-probability thresholds of PNet, RNet and ONet.
            factor: scale step of the image pyramid.
            optimization: onnxruntime's graph optimisation (the accuracy gate runs QDQ nets unfused).
            precise_int8: onnxruntime's non-saturating x86 INT8 kernels (``edge.cpu``).

        Raises:
            InputError: a setting is out of range.
            InferenceError: a model file is missing, is no model, or its runtime cannot load it.
            MissingDependencyError: onnxruntime is not installed.
        """
        _check_settings(threads, min_face_size, tuple(thresholds), factor)
        self.min_face_size = min_face_size
        low, mid, high = (float(t) for t in thresholds)
        self.thresholds = (low, mid, high)
        self.factor = float(factor)
        self._sessions: dict[FaceModel, Model] | None = None
        options = LoadOptions(
            optimization, precise_int8, what="this MTCNN model", purpose="MTCNN face detection", varying_shapes=True
        )  # every pyramid level is a new input shape
        sessions: dict[FaceModel, Model] = {}
        try:
            for name, file in MODEL_FILES.items():
                path = Path(model_dir[name]) if isinstance(model_dir, Mapping) else Path(model_dir) / file
                if not path.is_file():
                    raise InferenceError(f"{path}: MTCNN model file not found; export it with converters.face.mtcnn")
                sessions[name] = open_net(path, threads, options)
        except BaseException:
            for model in sessions.values():
                model.close()
            raise
        self._sessions = sessions

    def close(self) -> None:
        """Release the nets' runtime models. Safe to call twice."""
        for model in (self._sessions or {}).values():
            model.close()
        self._sessions = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self, name: FaceModel, x: np.ndarray) -> list[np.ndarray]:
        if self._sessions is None:
            raise InferenceError("MtcnnDetector is closed; create a new one to detect faces")
        model = self._sessions[name]
        try:
            outputs = model.run({"input": x})
        except (InferenceError, InputError) as exc:
            raise InferenceError(f"MTCNN {name} failed on input {x.shape}: {exc}") from exc
        return [outputs[spec.name] for spec in model.outputs]

    def _run_batched(self, name: FaceModel, x: np.ndarray) -> list[np.ndarray]:
        parts = [self._run(name, x[i : i + _MAX_BATCH]) for i in range(0, len(x), _MAX_BATCH)]
        return [np.concatenate(out, axis=0) for out in zip(*parts, strict=True)]

    def _stage1(self, image: np.ndarray, integral: np.ndarray) -> np.ndarray:
        h, w = image.shape[:2]
        found = []
        for scale in pyramid_scales(h, w, self.min_face_size, self.factor):
            level = area_resize_window(integral, (0, h, 0, w), int(h * scale + 1), int(w * scale + 1))
            reg, prob = self._run(FaceModel.PNET, normalise(level)[None])
            boxes = generate_boxes(reg[0], prob[0, 1], scale, self.thresholds[0])
            found.append(boxes[nms(boxes[:, :4], boxes[:, 4], 0.5)])
        boxes = np.concatenate(found, axis=0) if found else np.zeros((0, 9), np.float32)
        boxes = boxes[nms(boxes[:, :4], boxes[:, 4], 0.7)]
        return square(regress(boxes[:, :5], boxes[:, 5:9], plus_one=False))

    def _crops(self, integral: np.ndarray, boxes: np.ndarray, side: int) -> tuple[np.ndarray, np.ndarray]:
        h, w = integral.shape[0] - 1, integral.shape[1] - 1
        windows, valid = crop_windows(boxes, w, h)
        crops = [area_resize_window(integral, win, side, side) for win in windows[valid]]
        return normalise(np.stack(crops)), boxes[valid]

    def _stage2(self, integral: np.ndarray, boxes: np.ndarray) -> np.ndarray:
        crops, boxes = self._crops(integral, boxes, 24)
        reg, prob = self._run_batched(FaceModel.RNET, crops)
        keep = prob[:, 1] > self.thresholds[1]
        boxes = np.concatenate([boxes[keep, :4], prob[keep, 1:2]], axis=1)
        reg = reg[keep]
        pick = nms(boxes[:, :4], boxes[:, 4], 0.7)
        return square(regress(boxes[pick], reg[pick], plus_one=True))

    def _stage3(self, integral: np.ndarray, boxes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        crops, boxes = self._crops(integral, boxes, 48)
        reg, marks, prob = self._run_batched(FaceModel.ONET, crops)
        keep = prob[:, 1] > self.thresholds[2]
        boxes = np.concatenate([boxes[keep, :4], prob[keep, 1:2]], axis=1)
        reg, marks = reg[keep], marks[keep]
        one = np.float32(1.0)
        w = (boxes[:, 2] - boxes[:, 0] + one)[:, None]
        h = (boxes[:, 3] - boxes[:, 1] + one)[:, None]
        xs = w * marks[:, :5] + boxes[:, 0:1] - one
        ys = h * marks[:, 5:10] + boxes[:, 1:2] - one
        points = np.stack([xs, ys], axis=2)
        boxes = regress(boxes, reg, plus_one=True)
        pick = nms(boxes[:, :4], boxes[:, 4], 0.7, Overlap.MIN, plus_one=True)
        return boxes[pick], points[pick]

    def detect(self, rgb: np.ndarray) -> list[Detection]:
        """Find faces in one RGB image.

        Args:
            rgb: uint8 [H, W, 3] RGB image (convert OpenCV's BGR first).

        Returns:
            Detections, best score first. Boxes are not clipped to the image (as in facenet-pytorch);
            landmarks are float32 [5, 2] in ``LANDMARK_NAMES`` order.

        Raises:
            InputError: ``rgb`` is not a non-empty uint8 [H, W, 3] array.
            InferenceError: the detector is closed or ONNX Runtime fails.
        """
        image = check_image(rgb)
        if self._sessions is None:
            raise InferenceError("MtcnnDetector is closed; create a new one to detect faces")
        h, w = image.shape[:2]
        integral = integral_image(image)
        boxes = self._stage1(image, integral)
        if not crop_windows(boxes, w, h)[1].any():
            return []
        boxes = self._stage2(integral, boxes)
        if not crop_windows(boxes, w, h)[1].any():
            return []
        boxes, points = self._stage3(integral, boxes)
        return [
            Detection(
                box=(float(b[0]), float(b[1]), float(b[2]), float(b[3])),
                score=float(b[4]),
                landmarks=p.astype(np.float32),
            )
            for b, p in zip(boxes, points, strict=True)
        ]
