"""Recognition: every face of an image, named after the nearest gallery person or reported as unknown."""

from __future__ import annotations

import numpy as np

from edge.face.types import DLIB_SAME_PERSON_THRESHOLD

#: Detections below this score are not reported (MTCNN's last stage passes some fists and ashtrays at 0.86).
DEFAULT_MIN_SCORE = 0.9


def recognize_image(
    pipeline,
    gallery,
    rgb: np.ndarray,
    threshold: float | None = None,
    min_score: float | None = None,
) -> list[dict]:
    """Every face in one image with the gallery's answer.

    Args:
        pipeline: ``edge.face.pipeline.FacePipeline`` (or anything with ``analyze``).
        gallery: ``edge.face.gallery.Gallery``.
        rgb: uint8 [H, W, 3] RGB image.
        threshold: same-person descriptor distance; None: the pipeline's ``threshold`` (from models.json:
            dlib's 0.6, or the one calibrated for a user's embedder), else ``DLIB_SAME_PERSON_THRESHOLD``.
        min_score: detections scoring lower are left out; None: only the pipeline's own cut-off applies (the one
            ``open_face_pipeline`` sets for its detector: MTCNN ``DEFAULT_MIN_SCORE``, BlazeFace its own).

    Returns:
        One dict per face: box, score, landmarks, ``name`` (None for unknown) and ``distance``.
    """
    if threshold is None:
        threshold = float(getattr(pipeline, "threshold", DLIB_SAME_PERSON_THRESHOLD))
    faces = []
    for face in pipeline.analyze(rgb):
        if min_score is not None and face.detection.score < min_score:
            continue
        match = gallery.match(face.descriptor, threshold)
        row = face.detection.to_dict()
        row.update({"name": match.name, "distance": round(float(match.distance), 4)})
        faces.append(row)
    return faces
