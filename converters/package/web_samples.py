"""The browser site's sample photos and sample gallery: the page recognises a face before anyone uploads one.

The photos are real ones shipped inside installed packages (the same the evaluation set and the BlazeFace proof
use), copied as they are with their origin and licence in the manifest. Each named person's gallery entry is
enrolled from a small thumbnail cut around their face (a PNG, so browser and Python decode the same pixels)
by the site's own face models run natively (``edge.face.models.open_face_pipeline``): the page then recognises
them in the full photo at a real distance, not at zero. The page keeps the gallery in IndexedDB
(``web/gallery.js``) and seeds it with these entries once.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edge.errors import BundleError, InputError

SAMPLES_DIR = "samples"
#: The thumbnail's side in pixels, and the face box's share of it.
THUMB_SIDE = 112
THUMB_FACE_SHARE = 0.5


@dataclass(frozen=True)
class SamplePhoto:
    """A photo shipped inside a package: where it is, what it shows, its licence, and who to enrol from it."""

    file: str
    package: str
    path: tuple[str, ...]
    caption: str
    licence: str
    person: str | None = None


SAMPLE_PHOTOS = (
    SamplePhoto(
        "astronaut.png", "skimage", ("data", "astronaut.png"), "Eileen Collins (NASA portrait)",
        "public domain (NASA; scikit-image's data/astronaut.png)", "Eileen Collins",
    ),
    SamplePhoto(
        "grace_hopper.jpg", "matplotlib", ("mpl-data", "sample_data", "grace_hopper.jpg"),
        "Grace Hopper (US Navy portrait)", "public domain (US Navy; matplotlib's sample_data/grace_hopper.jpg)",
        "Grace Hopper",
    ),
    SamplePhoto(
        "t1.jpg", "insightface", ("data", "images", "t1.jpg"), "Six people nobody enrolled (insightface t1.jpg)",
        "shipped in the insightface 2.1 wheel (MIT); the photo's own licence is not stated",
    ),
)  # fmt: skip


def _photo_path(photo: SamplePhoto) -> Path:
    from converters.face.facedata import package_dir

    return package_dir(photo.package).joinpath(*photo.path)


def _thumbnail(rgb: np.ndarray, box: tuple[float, float, float, float]) -> np.ndarray:
    """A ``THUMB_SIDE`` square around ``box`` (the face ``THUMB_FACE_SHARE`` of it), area-resized; grey outside."""
    import cv2

    x1, y1, x2, y2 = box
    side = max(x2 - x1, y2 - y1) / THUMB_FACE_SHARE
    cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
    left, top, size = round(cx - side / 2), round(cy - side / 2), max(1, round(side))
    h, w = rgb.shape[:2]
    pad = max(0, -left, -top, left + size - w, top + size - h)
    padded = cv2.copyMakeBorder(rgb, pad, pad, pad, pad, cv2.BORDER_CONSTANT, value=(128, 128, 128))
    crop = padded[top + pad : top + pad + size, left + pad : left + pad + size]
    return cv2.resize(crop, (THUMB_SIDE, THUMB_SIDE), interpolation=cv2.INTER_AREA)


def _largest(faces: list) -> Any:
    def area(face) -> float:
        x1, y1, x2, y2 = face.detection.box
        return (x2 - x1) * (y2 - y1)

    return max(faces, key=area)


def copy_samples(models: Path, dest: Path) -> tuple[list[dict], dict]:
    """Copy the sample photos into ``dest/samples`` and enrol each named person from a thumbnail.

    Args:
        models: the site's face models folder (its own detector and embedder enrol the gallery).
        dest: the site folder.

    Returns:
        (manifest rows of the files, manifest ``samples``: the photos and the gallery entries).

    Raises:
        InputError: a package holding a photo is not installed.
        BundleError: the site's models find no face in a thumbnail.
    """
    import cv2

    from edge.face.models import open_face_pipeline
    from edge.imageio import load_image

    out = Path(dest) / SAMPLES_DIR
    out.mkdir(parents=True, exist_ok=True)
    rows, photos, gallery = [], [], []
    with open_face_pipeline(models, threads=1) as pipeline:
        for photo in SAMPLE_PHOTOS:
            source = _photo_path(photo)
            if not source.is_file():
                raise InputError(f"{source}: the sample photo {photo.file} is missing from package {photo.package}")
            shutil.copyfile(source, out / photo.file)
            origin = {"package": photo.package, "path": "/".join(photo.path), "licence": photo.licence}
            rows.append({"role": "sample.photo", "file": f"{SAMPLES_DIR}/{photo.file}", "source": origin})
            photos.append({"file": f"{SAMPLES_DIR}/{photo.file}", "caption": photo.caption, "licence": photo.licence})
            if photo.person is None:
                continue
            rgb = load_image(source)
            faces = pipeline.analyze(rgb)
            if not faces:
                raise BundleError(f"{source}: the site's face models find no face in the sample photo")
            thumb = _thumbnail(rgb, _largest(faces).detection.box)
            name = f"{SAMPLES_DIR}/{Path(photo.file).stem}-face.png"
            cv2.imwrite(str(Path(dest) / name), cv2.cvtColor(thumb, cv2.COLOR_RGB2BGR))
            enrolled = pipeline.analyze(thumb)
            if not enrolled:
                raise BundleError(f"{name}: the site's face models find no face in the thumbnail of {photo.file}")
            descriptor = _largest(enrolled).descriptor
            rows.append({"role": "sample.thumbnail", "file": name, "source": origin})
            gallery.append({"name": photo.person, "thumbnail": name, "from": photo.file,
                            "descriptor": [float(v) for v in np.asarray(descriptor, np.float32)]})  # fmt: skip
    return rows, {"photos": photos, "gallery": gallery}
