"""Small records shared by the face pipeline's stages."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Order of the five landmarks every detector returns (image-left / image-right, as seen in the picture).
LANDMARK_NAMES = ("left_eye", "right_eye", "nose", "mouth_left", "mouth_right")

#: dlib's threshold on the Euclidean distance between two 128-d descriptors: below it, the same person.
DLIB_SAME_PERSON_THRESHOLD = 0.6
#: Length of dlib's descriptors (a user's embedder says its own: ``FaceEmbedder.descriptor_size``).
DLIB_DESCRIPTOR_SIZE = 128


@dataclass(frozen=True)
class Detection:
    """One face found in an image.

    Attributes:
        box: (x1, y1, x2, y2) in pixels of the input image, float.
        score: detector confidence in [0, 1].
        landmarks: float32 array [5, 2] of (x, y) in pixels, in ``LANDMARK_NAMES`` order.
    """

    box: tuple[float, float, float, float]
    score: float
    landmarks: np.ndarray

    def to_dict(self) -> dict:
        return {
            "box": [round(float(v), 2) for v in self.box],
            "score": round(float(self.score), 4),
            "landmarks": [[round(float(x), 2), round(float(y), 2)] for x, y in self.landmarks],
        }
