"""Run BlazeFace's detect stage on one frame N times, split into its parts, each marked for the counting plugin.

    python3 scripts/arm/run_detect_parts.py --model F.tflite --frame frame.npy --frames N [--code C] [--mark]

Regions (summed over the N frames; ``benchmarks/arm_detect_parts.py`` turns two runs into per-frame counts):
0 empty (the marks' own cost), 1 the integral image, 2 the letterbox (area resize to the input square),
3 the network, 4 scores and box decoding, 5 weighted NMS and the five points, 6 the parts together,
7 ``BlazeFaceDetector.detect`` itself (the code the pipeline runs). ``--code`` picks parts 1, 2 and 4:
``now`` (default) is edge/face's whole-frame path (no integral image: ``letterbox`` sums rows, then columns,
in uint16); ``integral`` is OpenCV's integral image and its box sums (``letterbox_window``), what a tiled
frame still runs and a whole frame ran before; ``before`` is the code before commit 'BlazeFace detect:
integral image by OpenCV...' (kept below, verbatim in substance: row-by-row numpy cumulative sums, a float64
column cumsum, every anchor decoded before the score cut). Region 7 is always the current code. Device code
only (edge.*, numpy, cv2).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
from marks import marker  # scripts/arm/marks.py: this script's folder is on sys.path


def _baseline_integral(image: np.ndarray) -> np.ndarray:
    out = np.empty((image.shape[0] + 1,) + image.shape[1:], dtype=np.int32)
    out[0] = 0
    rows, flat = image.reshape(image.shape[0], -1), out.reshape(out.shape[0], -1)
    for i in range(rows.shape[0]):
        np.add(flat[i], rows[i], out=flat[i + 1])
    return out


def _baseline_resize(integral: np.ndarray, window: tuple[int, int, int, int], out_h: int, out_w: int) -> np.ndarray:
    from edge.face.detect_mtcnn import _area_bounds

    r0, r1, c0, c1 = window
    rs, re = _area_bounds(r1 - r0, out_h)
    rows = (integral[r0 + re, c0:c1] - integral[r0 + rs, c0:c1]) / (re - rs)[:, None, None]
    cols = np.zeros((out_h, c1 - c0 + 1) + integral.shape[2:], dtype=np.float64)
    np.cumsum(rows, axis=1, out=cols[:, 1:])
    cs, ce = _area_bounds(c1 - c0, out_w)
    return ((cols[:, ce] - cols[:, cs]) / (ce - cs)[None, :, None]).astype(np.float32)


def _baseline_letterbox(integral: np.ndarray, shape: tuple[int, int], size: int) -> np.ndarray:
    h, w = shape
    scale = size / max(h, w)
    new_h, new_w = max(1, round(h * scale)), max(1, round(w * scale))
    top, left = (size - new_h) // 2, (size - new_w) // 2
    square = np.full((size, size, 3), -1.0, np.float32)
    resized = _baseline_resize(integral, (0, h, 0, w), new_h, new_w)
    square[top : top + new_h, left : left + new_w] = resized * np.float32(2.0 / 255.0) - np.float32(1.0)
    return square[None]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="BlazeFace's detect stage in parts, marked.")
    parser.add_argument("--model", required=True, help="BlazeFace .tflite or .onnx")
    parser.add_argument("--frame", required=True, help="uint8 RGB frame [H, W, 3] as .npy")
    parser.add_argument("--frames", type=int, required=True)
    parser.add_argument("--code", choices=("now", "integral", "before"), default="now", help="parts 1, 2 and 4")
    parser.add_argument("--mark", action="store_true")
    args = parser.parse_args(argv)
    mark = marker(args.mark)
    from edge.face.detect_blazeface import (
        BlazeFaceDetector,
        decode,
        five_points,
        letterbox,
        letterbox_window,
        sigmoid_scores,
        weighted_nms,
    )
    from edge.face.detect_mtcnn import integral_image

    rgb = np.load(args.frame)
    h, w = rgb.shape[:2]
    with BlazeFaceDetector(args.model) as det:
        size, found = det.spec.size, det.detect(rgb)
        mark(0, 0)
        mark(0, 1)
        for _ in range(args.frames):
            mark(6, 0)
            mark(1, 0)
            if args.code != "now":  # the whole-frame path needs no integral image
                integral = _baseline_integral(rgb) if args.code == "before" else integral_image(rgb)
            mark(1, 1)
            mark(2, 0)
            if args.code == "now":
                tensor = letterbox(rgb, size)[0]
            elif args.code == "integral":
                tensor = letterbox_window(integral, (0, h, 0, w), size)[0]
            else:
                tensor = _baseline_letterbox(integral, (h, w), size)
            mark(2, 1)
            mark(3, 0)
            raw, logits = det.run_raw(tensor)
            mark(3, 1)
            mark(4, 0)
            if args.code == "before":
                boxes, points, scores = decode(raw, logits, det.anchors, size)
                keep = scores >= det.min_score
                boxes, points, scores = boxes[keep], points[keep], scores[keep]
            else:
                keep = np.flatnonzero(sigmoid_scores(logits) >= det.min_score)
                boxes, points, scores = decode(raw[keep], logits[keep], det.anchors[keep], size)
            mark(4, 1)
            mark(5, 0)
            five_points(weighted_nms(boxes, points, scores)[1])
            mark(5, 1)
            mark(6, 1)
            mark(7, 0)
            found = det.detect(rgb)
            mark(7, 1)
    print(len(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
