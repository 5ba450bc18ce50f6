"""BlazeFace's letterbox (the frame scaled into the network's input square) by several resamplers, each marked.

    python3 scripts/arm/run_letterbox.py --frame frame.npy --size 192 --frames N [--mark]

Regions (summed over the N frames, after one unmarked warm-up call of each): 0 empty (the marks' own cost),
then one per entry of ``RESAMPLERS`` in order, from 1: the whole letterbox, uint8 frame in, float32
[1, S, S, 3] in [-1, 1] out (with its placement, as edge/face's ``letterbox`` returns it). ``area`` is what
``edge.face.detect_blazeface`` runs on a whole frame (adaptive average pooling, rows then columns summed in
uint16); the others are alternatives measured by ``benchmarks/arm_frame_levers.py``, which also counts the faces each
finds on the evaluation photos (importing ``RESAMPLERS`` from here). Device code only (edge.*, numpy, cv2).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import numpy as np

from edge.face.detect_blazeface import Letterbox, letterbox, letterbox_fit


def _place(resized: np.ndarray, rgb_shape: tuple[int, ...], size: int) -> tuple[np.ndarray, Letterbox]:
    """The uint8 ``resized`` image centred on black in the square, mapped to [-1, 1] in place, and its placement."""
    new_h, new_w, top, left = letterbox_fit(*rgb_shape[:2], size)
    square = np.full((size, size, 3), -1.0, np.float32)
    inner = square[top : top + new_h, left : left + new_w]
    np.multiply(resized, np.float32(2.0 / 255.0), out=inner)
    inner -= np.float32(1.0)
    return square[None], Letterbox(new_w / rgb_shape[1], float(left), float(top))


def area(rgb: np.ndarray, size: int) -> tuple[np.ndarray, Letterbox]:
    """edge/face today: adaptive average pooling (window sums of rows, then of columns), float32 means."""
    return letterbox(rgb, size)


def halve_bilinear(rgb: np.ndarray, size: int) -> tuple[np.ndarray, Letterbox]:
    """Halved by OpenCV's 2x2 area averaging (uint8, its integer fast path) while the frame is at least twice
    the target, then OpenCV's bilinear resize: an image pyramid's anti-aliasing at a fraction of the cost."""
    import cv2

    new_h, new_w, _, _ = letterbox_fit(*rgb.shape[:2], size)
    img = rgb
    while img.shape[0] >= 2 * new_h and img.shape[1] >= 2 * new_w:
        h, w = img.shape[0] // 2, img.shape[1] // 2
        img = cv2.resize(img[: 2 * h, : 2 * w], (w, h), interpolation=cv2.INTER_AREA)
    if img.shape[:2] != (new_h, new_w):
        img = cv2.resize(img, (new_w, new_h), interpolation=cv2.INTER_LINEAR)
    return _place(img, rgb.shape, size)


def bilinear(rgb: np.ndarray, size: int) -> tuple[np.ndarray, Letterbox]:
    """OpenCV's bilinear resize of the whole frame, as MediaPipe's ImageToTensorCalculator samples."""
    import cv2

    new_h, new_w, _, _ = letterbox_fit(*rgb.shape[:2], size)
    return _place(cv2.resize(rgb, (new_w, new_h), interpolation=cv2.INTER_LINEAR), rgb.shape, size)


def opencv_area(rgb: np.ndarray, size: int) -> tuple[np.ndarray, Letterbox]:
    """OpenCV's own INTER_AREA resize (fractional pixel weights; uint8 out)."""
    import cv2

    new_h, new_w, _, _ = letterbox_fit(*rgb.shape[:2], size)
    return _place(cv2.resize(rgb, (new_w, new_h), interpolation=cv2.INTER_AREA), rgb.shape, size)


#: name -> letterbox function (uint8 [H, W, 3], size) -> (float32 [1, size, size, 3], placement), as
#: edge/face's ``letterbox``; region k + 1 is entry k.
RESAMPLERS: dict[str, Callable[[np.ndarray, int], tuple[np.ndarray, Letterbox]]] = {
    "area (edge/face today)": area,
    "halve + bilinear": halve_bilinear,
    "bilinear (MediaPipe's sampling)": bilinear,
    "OpenCV INTER_AREA": opencv_area,
}


def main(argv: list[str] | None = None) -> int:
    from marks import marker  # scripts/arm/marks.py: this script's folder is on sys.path

    parser = argparse.ArgumentParser(description="BlazeFace's letterbox by several resamplers, marked.")
    parser.add_argument("--frame", required=True, help="uint8 RGB frame [H, W, 3] as .npy")
    parser.add_argument("--size", type=int, default=192)
    parser.add_argument("--frames", type=int, required=True)
    parser.add_argument("--mark", action="store_true")
    args = parser.parse_args(argv)
    import cv2

    cv2.setNumThreads(1)  # one thread, as the pipeline on the Pi
    mark = marker(args.mark)
    rgb = np.load(args.frame)
    mark(0, 0)
    mark(0, 1)
    for region, resample in enumerate(RESAMPLERS.values(), start=1):
        resample(rgb, args.size)
        mark(region, 0)
        for _ in range(args.frames):
            resample(rgb, args.size)
        mark(region, 1)
    print(len(RESAMPLERS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
