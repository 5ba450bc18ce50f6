"""The face service on top of the runner: a gallery kept on disk, enrolment from folders, recognition.

Enrolment reads a folder with one sub-folder per person (named after them) holding their photos; the
gallery is saved to ``face.gallery`` (NumPy ``.npz``, written to a temporary file and renamed, so a crash
never leaves half a gallery). Recognition names every face of a frame after the nearest enrolled person
within ``threshold`` (by default the models folder's: dlib's 0.6, or a user embedder's calibrated one), or
reports it as unknown (``name`` null).
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from edge.daemon.config import FaceSettings
from edge.errors import InputError
from edge.face.folder_pipeline import open_pipeline
from edge.face.gallery import Gallery
from edge.face.models import default_min_score, read_models_folder
from edge.face.recognize import recognize_image
from edge.face.track import FaceTracker
from edge.imageio import DEFAULT_MAX_PIXELS


def save_gallery_atomic(gallery: Gallery, path: Path) -> Path:
    """Write ``gallery`` to ``path`` via a temporary file and an atomic rename (fsynced).

    Raises:
        InputError: if the file can't be written.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        gallery.save(tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        raise InputError(f"{path}: cannot write the gallery ({exc.strerror})") from exc
    return path


class FaceService:
    """Face pipeline + gallery for the daemon. Close it (or use ``with``).

    Args:
        settings: the ``[face]`` table.
        threads: onnxruntime threads per model (``face.threads``, or the profile's when that is 0).
        max_pixels: enrolment photos larger than this are skipped without being decoded.

    Raises:
        InputError: if the models folder or the gallery file is invalid, or enrolment finds no face.
        InferenceError: if a model does not load.
    """

    def __init__(self, settings: FaceSettings, threads: int, max_pixels: int = DEFAULT_MAX_PIXELS) -> None:
        self.settings = settings
        self.threads = threads
        self.max_pixels = max_pixels
        self.pipeline, self.detector, self.min_score = self._open_pipeline()
        try:
            self.tracker = FaceTracker(
                self.pipeline, settings.detect_every, keep_descriptor_within=settings.keep_descriptor_within
            )
            self.gallery, self.gallery_origin = self._initial_gallery()
        except BaseException:
            self.pipeline.close()
            raise

    def _open_pipeline(self):
        """The pipeline with ``face.detector`` (else the models folder's), that detector, and the score cut-off the
        daemon applies (``face.min_score``, else that detector's default). The pipeline itself keeps every
        detection (``min_score=0``): the daemon's cut-off alone decides what is reported."""
        face = read_models_folder(self.settings.models)
        detector = self.settings.detector or face.detector
        pipeline = open_pipeline(face, self.threads, min_score=0.0, detector=detector)
        min_score = default_min_score(detector) if self.settings.min_score is None else self.settings.min_score
        return pipeline, detector, min_score

    @property
    def _descriptor_size(self) -> int:
        """The length of the running embedder's descriptors (dlib's 128, or a user embedder's)."""
        return int(self.pipeline.embedder.descriptor_size)

    def _initial_gallery(self) -> tuple[Gallery, str]:
        path = self.settings.gallery
        if path.is_file():
            return Gallery.load(path, self._descriptor_size), f"loaded from {path}"
        if self.settings.enroll_dir is not None:
            report = self.enroll()
            return self.gallery, f"enrolled {sum(report['enrolled'].values())} photos from {self.settings.enroll_dir}"
        empty = "empty (no gallery file, no face.enroll_dir): every face is reported unknown"
        return Gallery(self._descriptor_size), empty

    def recognize(self, rgb: np.ndarray, follow: bool = False) -> list[dict[str, Any]]:
        """Every face of a frame: box, score, landmarks, ``name`` (None = unknown) and ``distance``.

        ``follow``: the frame comes right after the one before in a video, so the faces of that frame may be
        followed into this one (``face.detect_every``, ``edge.face.track``); False forgets them first.
        """
        if not follow:
            self.tracker.reset()
        faces = recognize_image(self.tracker, self.gallery, rgb, self.settings.threshold, self.min_score)
        if self.tracker.detect_every > 1:
            for face in faces:  # found by the detector on this frame, or followed from the frame before
                face["followed"] = self.tracker.last_followed
        for face in faces:  # inf (empty gallery) is not JSON
            if not np.isfinite(face["distance"]):
                face["distance"] = None
        return faces

    def enroll(self, folder: Path | None = None) -> dict[str, Any]:
        """Build a new gallery from ``folder`` (default ``face.enroll_dir``), save it, and use it.

        Returns:
            ``{"enrolled": {name: photos}, "skipped": [[file, reason], ...], "gallery": path, "seconds": s}``.

        Raises:
            InputError: if no folder is configured, it has no per-person sub-folders, or no photo has a face.
        """
        folder = folder or self.settings.enroll_dir
        if folder is None:
            raise InputError(
                "enroll: face.enroll_dir is not set in the config; expected a folder of per-person folders"
            )
        start = time.perf_counter()
        gallery = Gallery(self._descriptor_size)
        report = gallery.enroll_folder(folder, self.pipeline, self.max_pixels)
        save_gallery_atomic(gallery, self.settings.gallery)
        self.gallery = gallery
        return {
            "enrolled": dict(report.enrolled),
            "skipped": [list(s) for s in report.skipped],
            "gallery": str(self.settings.gallery),
            "seconds": round(time.perf_counter() - start, 3),
        }

    def reload(self) -> dict[str, Any]:
        """Re-open the models and re-read the gallery file (after an update on disk).

        The new pipeline and gallery replace the old ones only when both loaded.

        Returns:
            ``{"people": n, "gallery": origin}``.
        """
        pipeline, detector, min_score = self._open_pipeline()
        try:
            tracker = FaceTracker(
                pipeline, self.settings.detect_every, keep_descriptor_within=self.settings.keep_descriptor_within
            )
            path = self.settings.gallery
            size = pipeline.embedder.descriptor_size
            gallery = Gallery.load(path, size) if path.is_file() else self.gallery
        except BaseException:
            pipeline.close()
            raise
        old, self.pipeline, self.gallery, self.tracker = self.pipeline, pipeline, gallery, tracker
        self.detector, self.min_score = detector, min_score
        old.close()
        return {"people": len(gallery), "gallery": str(path) if path.is_file() else "kept (no gallery file)"}

    def use_models(self, models: Path) -> dict[str, Any]:
        """Run the models of another folder from now on (an update's slot); the old ones stay if they fail.

        Raises:
            InputError / InferenceError: the folder's models do not load.
        """
        old = self.settings
        self.settings = dataclasses.replace(old, models=Path(models))
        try:
            return self.reload()
        except BaseException:
            self.settings = old
            raise

    def close(self) -> None:
        """Release the models."""
        self.pipeline.close()

    def __enter__(self) -> FaceService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
