"""What the whole-frame face benchmarks share: a gallery of 100 to match against, and the evaluation photos as
camera-like clips with their annotated faces."""

from __future__ import annotations

import numpy as np

GALLERY_SIZE = 100


def make_gallery(seed: int = 0):
    """100 named entries of 128-d descriptors with the spread of real dlib descriptors (norm ~0.9...1.0).

    Matching is a nearest-neighbour search over the gallery: its cost depends on the size, not on who is in
    it; random directions keep every face unmatched, which is the most expensive case (no early answer).
    """
    from edge.face.gallery import Gallery

    rng = np.random.default_rng(seed)
    gallery = Gallery()
    for i in range(GALLERY_SIZE):
        v = rng.normal(size=128)
        gallery.add(f"person-{i:03d}", (v / np.linalg.norm(v) * rng.uniform(0.9, 1.0))[None].astype(np.float32))
    return gallery


def clips(frames: int) -> list[tuple[str, np.ndarray, list]]:
    """Every evaluation photo as a camera-like clip of ``frames`` frames, one after the other: (photo, frame,
    the annotated face boxes in that frame)."""
    from converters.face.facedata import EVAL_PHOTOS, camera_clip, camera_clip_faces

    out = []
    for p in EVAL_PHOTOS:
        for rgb, faces in zip(camera_clip(p.load(), frames), camera_clip_faces(p, frames), strict=True):
            out.append((p.name, rgb, [f.box for f in faces]))
    return out


def against_truth(reported: list[list], truth: list[list]) -> dict:
    """Face boxes reported on each frame against the annotated faces of each frame (``match_boxes``, one to one,
    IoU >= 0.3, as ``benchmarks/detector_quality.py``): found, missed, false."""
    from converters.face.boxes import match_boxes

    found = missed = false = 0
    for boxes, annotated in zip(reported, truth, strict=True):
        pairs = len(match_boxes(annotated, boxes))
        found, missed, false = found + pairs, missed + len(annotated) - pairs, false + len(boxes) - pairs
    return {"found": found, "missed_truth": missed, "false": false, "annotated": sum(len(b) for b in truth)}
