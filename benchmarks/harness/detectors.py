"""Face detectors as the detector benchmarks race them: a box type, a contender, and dlib's HOG as one."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

Box = tuple[float, float, float, float]


@dataclass
class Contender:
    """One detector under test: its name, ``detect(rgb) -> boxes`` and ``close()``."""

    name: str
    detect: Callable[[np.ndarray], list[Box]]
    close: Callable[[], None]


def hog_contender() -> Contender | None:
    """dlib's HOG with one upsample (face_recognition's detector), or None without dlib."""
    try:
        import dlib
    except ImportError:
        return None
    hog = dlib.get_frontal_face_detector()

    def detect(rgb: np.ndarray) -> list[Box]:
        return [(r.left(), r.top(), r.right() + 1, r.bottom() + 1) for r in hog(rgb, 1)]

    return Contender("dlib HOG (upsample 1)", detect, lambda: None)
