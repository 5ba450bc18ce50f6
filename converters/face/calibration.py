"""Calibration inputs for static INT8 of the face nets, taken from what the fp32 pipeline really feeds them.

Every net is calibrated on the inputs it sees in use, never on the evaluation images
(``converters.face.facedata.calibration_images``: scikit-image's LFW crops, scenes and mask textures under
other augmentations than the evaluation's):

* PNet: 12x12 windows (its receptive field: each output cell sees exactly one) at its stride-2 cell
  positions on every pyramid level of every calibration image, drawn in proportion to the level's cells.
  Windows rather than whole levels because ONNX Runtime's histogram calibrators (Entropy, Percentile)
  stack all calibration outputs and so need one input shape; MinMax on whole levels gave the same ranges;
* RNet / ONet: the 24x24 / 48x48 crops the fp32 cascade cuts from those images (faces and non-faces,
  exactly the mix the net must separate);
* embedder: the aligned 150x150 chips of the faces the fp32 detector finds in them, cut as the device
  cuts them (with the folder's 5-point landmark model when it has one, ``chip_landmarks``).

Crops are sub-sampled (seeded) to bound calibration time; the counts are reported.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from converters.face.facedata import calibration_images
from edge.errors import ConversionError, InputError
from edge.face import models as face_models
from edge.face.align import DLIB_CHIP_SIZE
from edge.face.detect_mtcnn import MtcnnDetector
from edge.face.embed import INPUT_NAME as EMBEDDER_INPUT
from edge.face.models import DETECTOR_NETS, FACE_NETS, FaceModel
from edge.face.pipeline import FacePipeline
from edge.face.shape5 import ShapePredictor
from edge.progress import ProgressFn, silent, tracked

MTCNN_INPUT = "input"
#: At most this many samples per net go into calibration (seeded sub-sample; more only costs time).
MAX_SAMPLES = {FaceModel.PNET: 8192, FaceModel.RNET: 2048, FaceModel.ONET: 1024, FaceModel.EMBEDDER: 256}
#: Samples per calibration feed.
FEED_BATCH = {FaceModel.PNET: 256, FaceModel.RNET: 64, FaceModel.ONET: 32, FaceModel.EMBEDDER: 8}
_PNET_WINDOW, _PNET_STRIDE = 12, 2


def chip_landmarks(fp32: face_models.ModelsFolder) -> ShapePredictor | None:
    """The folder's 5-point landmark model (``landmarks.shape5``) when it has one, as the device uses it.

    Without one, chips are placed by MTCNN's own five landmarks.
    """
    if FaceModel.SHAPE5.role not in fp32.entries:
        return None
    return ShapePredictor(fp32.model_path(FaceModel.SHAPE5.role))


class _NoEmbedder:
    """The embedder of a pipeline used only to cut chips: being called is a bug."""

    def embed(self, chips: np.ndarray) -> np.ndarray:
        raise ConversionError("calibration: the chip-cutting pipeline has no embedder")


class _RecordingDetector(MtcnnDetector):
    """The fp32 MTCNN cascade, keeping a copy of every batch it feeds each net."""

    def __init__(self, nets: dict[FaceModel, Path], threads: int) -> None:
        super().__init__(nets, threads=threads)
        self.seen: dict[FaceModel, list[np.ndarray]] = {net: [] for net in DETECTOR_NETS}

    def _run(self, name: FaceModel, x: np.ndarray) -> list[np.ndarray]:
        self.seen[name].append(np.array(x, copy=True))
        return super()._run(name, x)


@dataclass
class CalibrationSet:
    """Calibration feeds per net (``{"input": ...}`` / ``{"chip": ...}`` dicts) and where they came from."""

    feeds: dict[FaceModel, list[dict[str, np.ndarray]]]
    images: int
    seed: int
    samples: dict[FaceModel, int] = field(default_factory=dict)
    available: dict[FaceModel, int] = field(default_factory=dict)
    sources: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "images": self.images,
            "seed": self.seed,
            "source": "converters.face.facedata.calibration_images (LFW crops from scikit-image, scenes, mask "
            "textures; CALIB_AUGMENT; disjoint from the evaluation set)",
            "image_sources": self.sources,
            "samples_used": self.samples,
            "samples_available": self.available,
        }


def _subsample(items: list[np.ndarray], cap: int, rng: np.random.Generator) -> list[np.ndarray]:
    if len(items) <= cap:
        return items
    pick = np.sort(rng.choice(len(items), size=cap, replace=False))
    return [items[i] for i in pick]


def _feeds(samples: list[np.ndarray], batch: int, name: str) -> list[dict[str, np.ndarray]]:
    """Equal batches: ONNX Runtime's histogram calibrators stack all outputs, so a short last batch is dropped."""
    batch = max(1, min(batch, len(samples)))
    usable = len(samples) - len(samples) % batch
    return [{name: np.stack(samples[i : i + batch])} for i in range(0, usable, batch)]


def pnet_windows(levels: list[np.ndarray], cap: int, rng: np.random.Generator) -> tuple[list[np.ndarray], int]:
    """About ``cap`` 12x12 PNet input windows at cell positions, drawn from pyramid levels by their cell count.

    Args:
        levels: PNet inputs [3, H, W] as the cascade ran them.
        cap: how many windows to keep at most.
        rng: random draws.

    Returns:
        (windows [3, 12, 12] float32, number of cells there were in all).
    """
    views = []
    for level in levels:
        v = np.lib.stride_tricks.sliding_window_view(level, (_PNET_WINDOW, _PNET_WINDOW), axis=(1, 2))
        views.append(v[:, ::_PNET_STRIDE, ::_PNET_STRIDE])  # [3, ny, nx, 12, 12]
    total = sum(v.shape[1] * v.shape[2] for v in views)
    share = min(1.0, cap / max(total, 1))
    out: list[np.ndarray] = []
    for v in views:
        cells = v.shape[1] * v.shape[2]
        pick = rng.choice(cells, size=min(cells, int(np.ceil(cells * share))), replace=False)
        for c in pick:
            out.append(np.ascontiguousarray(v[:, c // v.shape[2], c % v.shape[2]]))
    return _subsample(out, cap, rng), total


def collect_calibration(
    fp32_dir: Path | face_models.ModelsFolder,
    count: int,
    seed: int = 0,
    threads: int = 1,
    progress: ProgressFn = silent,
) -> CalibrationSet:
    """Run the fp32 pipeline over ``count`` calibration images and keep what each net is fed.

    Args:
        fp32_dir: folder with the fp32 models and models.json (``edge-deploy convert face``), or that folder
            already read (``edge.face.models.read_models_folder``).
        count: number of calibration images (>= 1).
        seed: seed of the images' augmentations and of the sub-sampling.
        threads: ONNX Runtime intra-op threads.
        progress: called with a line per stage.

    Returns:
        CalibrationSet with feeds for every net of ``FACE_NETS`` (MTCNN's three and the embedder).

    Raises:
        InputError: ``count`` < 1, a missing models folder, or no face found in the calibration images.
    """
    if count < 1:
        raise InputError(f"calibration count = {count}; expected at least 1 image")
    fp32 = fp32_dir if isinstance(fp32_dir, face_models.ModelsFolder) else face_models.read_models_folder(fp32_dir)
    paths = fp32.model_paths(FACE_NETS)
    images = calibration_images(count, seed)
    progress(f"calibration: running the fp32 cascade on {len(images)} calibration images")
    samples: dict[FaceModel, list[np.ndarray]] = {net: [] for net in FACE_NETS}
    sources: dict[str, int] = {}
    recognition = fp32.recognition or {}  # a user embedder's chip; else dlib's
    chip_size = int(recognition.get("chip_size", DLIB_CHIP_SIZE))
    nchw = recognition.get("layout", "nchw") == "nchw"
    with _RecordingDetector({k: paths[k] for k in DETECTOR_NETS}, threads) as detector:
        # Only the pipeline's chip cutting is used.
        pipeline = FacePipeline(detector, _NoEmbedder(), shape_predictor=chip_landmarks(fp32), chip_size=chip_size)
        for name, rgb in tracked(progress, images, "calibration images"):
            kind = name.split("/")[0]
            sources[kind] = sources.get(kind, 0) + 1
            dets = detector.detect(rgb)
            if dets:
                chips = pipeline.chips(rgb, dets)
                samples[FaceModel.EMBEDDER] += list((chips.transpose(0, 3, 1, 2) if nchw else chips).astype(np.float32))
        for net in DETECTOR_NETS:
            for batch in detector.seen[net]:
                samples[net] += list(batch)
    if not samples[FaceModel.EMBEDDER]:
        raise InputError(
            f"calibration: the fp32 detector found no face in {count} calibration images; expected faces "
            "to calibrate the embedder on (use more images)"
        )
    rng = np.random.default_rng([seed, 7])
    calib = CalibrationSet({}, len(images), seed, sources=sources)
    for net, items in samples.items():
        calib.available[net] = len(items)
        if net is FaceModel.PNET:
            kept, calib.available[net] = pnet_windows(items, MAX_SAMPLES[net], rng)
        else:
            kept = _subsample(items, MAX_SAMPLES[net], rng)
        feed_batch = 1 if net is FaceModel.EMBEDDER and recognition.get("batch") == 1 else FEED_BATCH[net]
        calib.feeds[net] = _feeds(kept, feed_batch, EMBEDDER_INPUT if net is FaceModel.EMBEDDER else MTCNN_INPUT)
        calib.samples[net] = sum(len(next(iter(f.values()))) for f in calib.feeds[net])
    progress("calibration samples: " + ", ".join(f"{n} {calib.samples[n]} of {calib.available[n]}" for n in FACE_NETS))
    return calib


def constant_calibration(calib: CalibrationSet, value: float) -> CalibrationSet:
    """The same feeds with every value replaced by ``value`` (a deliberately useless calibration).

    Used to show that the accuracy gate catches a broken quantization: a net calibrated on flat grey
    inputs gets activation ranges that clip real images.
    """
    feeds = {net: [{k: np.full_like(v, value) for k, v in f.items()} for f in fs] for net, fs in calib.feeds.items()}
    out = CalibrationSet(feeds, calib.images, calib.seed, dict(calib.samples), dict(calib.available))
    out.sources = {f"constant {value:g}": calib.images}
    return out
