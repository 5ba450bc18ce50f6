"""Recognition results drawn on the image: boxes, the five landmarks, names and distances (OpenCV only)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import cv2
import numpy as np

from edge.errors import InputError

#: RGB colours: a face named after a gallery person, and a face left unknown.
KNOWN = (46, 160, 67)
UNKNOWN = (230, 120, 20)
LANDMARK = (255, 40, 200)
TEXT = (255, 255, 255)
_FONT = cv2.FONT_HERSHEY_SIMPLEX


def face_label(face: Mapping) -> str:
    """The text drawn above a face: its name (or 'unknown') and the distance to the nearest gallery person (none
    when there is no distance, or an infinite one: an empty gallery)."""
    name = face.get("name") or "unknown"
    distance = face.get("distance")
    return name if distance is None or not math.isfinite(distance) else f"{name} {float(distance):.3f}"


def annotate(rgb: np.ndarray, faces: Sequence[Mapping]) -> np.ndarray:
    """A copy of ``rgb`` with each face's box, landmarks and label drawn on it.

    Args:
        rgb: uint8 [H, W, 3] RGB image, left unchanged.
        faces: what ``edge.face.recognize.recognize_image`` returns (or its JSON): per face ``box`` (x1, y1, x2,
            y2), ``landmarks`` ([5, 2], optional), ``name`` (None: unknown) and ``distance`` (optional).

    Returns:
        uint8 [H, W, 3] RGB: known faces boxed in ``KNOWN``, unknown ones in ``UNKNOWN``, labelled with
        ``face_label`` on a filled band above the box (inside it at the top edge), landmarks as dots.

    Raises:
        InputError: the image is not uint8 [H, W, 3], or a face has no 4-number box.
    """
    if rgb.dtype != np.uint8 or rgb.ndim != 3 or rgb.shape[2] != 3 or rgb.size == 0:
        raise InputError(f"image to annotate is {rgb.dtype} {rgb.shape}; expected uint8 [H, W, 3]")
    out = np.ascontiguousarray(rgb).copy()
    h, w = out.shape[:2]
    thick = max(2, round(min(h, w) / 300))
    scale = max(0.5, min(h, w) / 800)
    for i, face in enumerate(faces):
        box = face.get("box")
        if box is None or len(box) != 4:
            raise InputError(f"face {i}: box is {box!r}; expected [x1, y1, x2, y2]")
        x1, y1, x2, y2 = (round(float(v)) for v in box)
        colour = KNOWN if face.get("name") else UNKNOWN
        cv2.rectangle(out, (x1, y1), (x2, y2), colour, thick)
        for x, y in face.get("landmarks") or ():
            cv2.circle(out, (round(float(x)), round(float(y))), thick + 1, LANDMARK, -1, cv2.LINE_AA)
        _label(out, face_label(face), (x1, y1), colour, scale, thick)
    return out


def _label(img: np.ndarray, text: str, corner: tuple[int, int], colour, scale: float, thick: int) -> None:
    """``text`` on a ``colour`` band whose lower-left is ``corner`` (moved inside the image where it must be)."""
    (tw, th), base = cv2.getTextSize(text, _FONT, scale, thick)
    pad = max(2, thick * 2)
    x = min(max(0, corner[0]), max(0, img.shape[1] - tw - 2 * pad))
    top = corner[1] - th - base - 2 * pad
    if top < 0:  # no room above the box: inside it, at its top
        top = max(0, corner[1])
    bottom = top + th + base + 2 * pad
    cv2.rectangle(img, (x, top), (x + tw + 2 * pad, bottom), colour, -1)
    cv2.putText(img, text, (x + pad, bottom - base - pad), _FONT, scale, TEXT, thick, cv2.LINE_AA)
