"""Face boxes: overlap (IoU) and one-to-one matching, shared by the agreement proof, the reference pipeline,
the quantization evaluation and the demo."""

from __future__ import annotations

from collections.abc import Sequence

#: A detection belongs to an annotated face when their boxes overlap at least this much (IoU). dlib's HOG
#: box is tighter than MTCNN's (brow to lip vs forehead to chin): their IoU on one face is about 0.5-0.7.
MIN_IOU = 0.3
#: A face box: (x1, y1, x2, y2) in pixels.
Box = tuple[float, float, float, float]


def iou(a: Sequence[float], b: Sequence[float]) -> float:
    """Intersection over union of two (x1, y1, x2, y2) boxes; 0 when either is empty."""
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def match_boxes(left: Sequence[Box], right: Sequence[Box], min_iou: float = MIN_IOU) -> list[tuple[int, int, float]]:
    """Greedy one-to-one matching by IoU, best overlaps first.

    Returns:
        (index in left, index in right, IoU) for every matched pair with IoU >= min_iou.
    """
    cands = sorted(((iou(a, b), i, j) for i, a in enumerate(left) for j, b in enumerate(right)), key=lambda t: -t[0])
    used_l: set[int] = set()
    used_r: set[int] = set()
    out = []
    for v, i, j in cands:
        if v < min_iou:
            break
        if i not in used_l and j not in used_r:
            used_l.add(i)
            used_r.add(j)
            out.append((i, j, v))
    return out
