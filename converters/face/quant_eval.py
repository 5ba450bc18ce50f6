"""How far quantized face nets are from fp32, measured on the evaluation set (never on calibration data).

* Embedder: the same aligned chips (cut by the fp32 cascade) go through the fp32 and the quantized
  embedder: cosine per face; and for every evaluation pair of two found faces, whether the quantized
  descriptors decide same/different (distance <= 0.6, or a user embedder's calibrated threshold) as the fp32
  ones do.
* Detector: the fp32 and the quantized cascade run on every evaluation image; every annotated face the
  fp32 cascade finds must have a quantized twin (IoU >= ``TWIN_MIN_IOU``), and the twins' IoU is reported.
* End to end (reported, not gated): the quantized detector + embedder against the fp32 pipeline.

The fp32 side is computed once (``fp32_reference``) so that many candidates can be compared cheaply.

The build's gate passes ``Optimization.NONE`` with the quantized QDQ ``.onnx`` files: every
QuantizeLinear/DequantizeLinear runs as such around a float op, which is what the target's exact integer
kernels compute up to float rounding, on any build host. Fused, the host's own INT8 kernels would decide the
verdict (an AVX2-only host's u8s8 kernels saturate; docs/quantization.md, "What the gate measures").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from converters.face.boxes import MIN_IOU, iou, match_boxes
from converters.face.facedata import EvalSet
from edge.cosine import row_cosines
from edge.errors import ConversionError
from edge.face.detect_mtcnn import MtcnnDetector
from edge.face.embed import FaceEmbedder
from edge.face.models import DETECTOR_NETS, FaceModel
from edge.face.pipeline import FacePipeline
from edge.face.shape5 import ShapePredictor
from edge.face.types import DLIB_SAME_PERSON_THRESHOLD, Detection
from edge.progress import ProgressFn, silent, tracked
from edge.runtime.ort_session import Optimization

#: How the gate runs the candidate nets (quant_report "evaluated_as"): their .onnx, unfused.
EVALUATED_AS = (
    "the quantized .onnx files with onnxruntime's graph optimisations off (ORT_DISABLE_ALL): QDQ runs as "
    "dequantize -> float op -> quantize, the target's integer arithmetic up to float rounding, whatever INT8 "
    "kernels the build host has; the shipped .ort files are the same graphs fused for the target and are "
    "checked against this on emulated Cortex-A72/A76 (tests/integration/test_arm.py)"
)

#: A quantized detection is the twin of an fp32 one when their boxes overlap at least this much.
TWIN_MIN_IOU = 0.5

Key = tuple[int, int]  # (image index, annotated face index)


class _NoDetector:
    """The detector of a pipeline given its detections: being called is a bug."""

    def detect(self, rgb: np.ndarray) -> list[Detection]:
        raise ConversionError("quantization gate: the embedding pipeline is given its detections; it has no detector")


@dataclass
class Fp32Reference:
    """The fp32 cascade's detections and descriptors on the evaluation set."""

    eval_set: EvalSet
    detections: list[list[Detection]]
    face_det: dict[Key, int]  # annotated face -> index of its fp32 detection
    chips: np.ndarray  # uint8 [F, S, S, 3] (dlib: S 150), one per found annotated face, in ``keys`` order
    keys: list[Key]
    descriptors: np.ndarray  # float32 [F, D] (dlib: D 128)
    shape_predictor: ShapePredictor | None = None  # places the chips, as on the device
    threshold: float = DLIB_SAME_PERSON_THRESHOLD  # the embedder's same-person distance (decisions)

    @property
    def faces_found(self) -> int:
        return len(self.keys)


def _faces_of(eval_set: EvalSet, k: int, dets: list[Detection]) -> dict[int, int]:
    annotated = [f.box for f in eval_set.images[k].faces]
    return {i: j for i, j, _ in match_boxes(annotated, [d.box for d in dets], MIN_IOU)}


def fp32_reference(
    eval_set: EvalSet,
    nets: Mapping[FaceModel, Path],
    threads: int = 1,
    shape_predictor: ShapePredictor | None = None,
    threshold: float = DLIB_SAME_PERSON_THRESHOLD,
    progress: ProgressFn = silent,
) -> Fp32Reference:
    """Run the fp32 pipeline once over the evaluation set.

    Args:
        eval_set: ``converters.face.facedata.make_eval_set(...)``.
        nets: fp32 model paths by net (every one of ``FACE_NETS``).
        threads: ONNX Runtime intra-op threads.
        shape_predictor: the 5-point landmark model that places chips (``calibration.chip_landmarks``).
        threshold: the same-person distance the decisions are taken at (``edge.face.models.ModelsFolder.threshold``).
        progress: counts the images done (a bar on a terminal).

    Returns:
        Fp32Reference.
    """
    detector = MtcnnDetector({k: nets[k] for k in DETECTOR_NETS}, threads=threads)
    embedder = FaceEmbedder(nets[FaceModel.EMBEDDER], threads=threads)
    with FacePipeline(detector, embedder, shape_predictor, chip_size=embedder.chip_size) as pipeline:
        all_dets, face_det, chips, keys = [], {}, [], []
        for k, image in enumerate(tracked(progress, eval_set.images, "images, fp32")):
            dets = detector.detect(image.rgb)
            all_dets.append(dets)
            for i, j in sorted(_faces_of(eval_set, k, dets).items()):
                face_det[(k, i)] = j
                keys.append((k, i))
                chips.append(pipeline.chip(image.rgb, dets[j]))
        chips_arr = np.stack(chips)
        descriptors = pipeline.embedder.embed(chips_arr)
    return Fp32Reference(eval_set, all_dets, face_det, chips_arr, keys, descriptors, shape_predictor, threshold)


def pair_distances(ref: Fp32Reference, descriptors: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(distance, same) of every evaluation pair whose two faces the fp32 cascade found, in pair order.

    Args:
        descriptors: float [F, D] in ``ref.keys`` order; None: ``ref.descriptors``.
    """
    vectors = ref.descriptors if descriptors is None else descriptors
    found = dict(zip(ref.keys, np.asarray(vectors, np.float64), strict=True))
    dist, same = [], []
    for p in ref.eval_set.pairs:
        a, b = (p.a.image, p.a.face), (p.b.image, p.b.face)
        if a in found and b in found:
            dist.append(float(np.linalg.norm(found[a] - found[b])))
            same.append(bool(p.same))
    return np.asarray(dist, np.float64), np.asarray(same, bool)


@dataclass
class DecisionStats:
    """Same/different decisions of a candidate vs fp32 on the evaluation pairs."""

    pairs: int
    agree: int
    disagreements: list[dict] = field(default_factory=list)
    threshold: float = DLIB_SAME_PERSON_THRESHOLD  # same person when the distance is <= this

    @property
    def agreement(self) -> float:
        return self.agree / self.pairs if self.pairs else 0.0

    def to_dict(self) -> dict:
        return {
            "pairs": self.pairs,
            "agree": self.agree,
            "agreement": self.agreement,
            "threshold": self.threshold,
            "disagreements": self.disagreements[:20],
        }


def compare_decisions(
    ref: Fp32Reference, vectors: dict[Key, np.ndarray], threshold: float | None = None
) -> DecisionStats:
    """Decide every evaluation pair with fp32 descriptors and with ``vectors``; count agreements.

    ``threshold`` None: the reference's (dlib's 0.6, or a user embedder's calibrated one).

    Pairs with a face that either side did not find are left out (the detector gate counts lost faces).
    """
    threshold = ref.threshold if threshold is None else threshold
    fp32 = dict(zip(ref.keys, ref.descriptors.astype(np.float64), strict=True))
    stats = DecisionStats(0, 0, threshold=threshold)
    for p in ref.eval_set.pairs:
        a, b = (p.a.image, p.a.face), (p.b.image, p.b.face)
        if a not in fp32 or b not in fp32 or a not in vectors or b not in vectors:
            continue
        d32 = float(np.linalg.norm(fp32[a] - fp32[b]))
        dq = float(np.linalg.norm(vectors[a].astype(np.float64) - vectors[b].astype(np.float64)))
        stats.pairs += 1
        if (d32 <= threshold) == (dq <= threshold):
            stats.agree += 1
        else:
            names = [ref.eval_set.images[k].name for k in (a[0], b[0])]
            stats.disagreements.append({"a": names[0], "b": names[1], "same": p.same, "fp32": d32, "quant": dq})
    return stats


@dataclass
class EmbedderStats:
    """Quantized embedder vs fp32 on the same chips."""

    cosines: np.ndarray
    decisions: DecisionStats
    max_abs_diff: float

    def to_dict(self) -> dict:
        c = self.cosines
        return {
            "faces": len(c),
            "cosine_mean": float(c.mean()),
            "cosine_min": float(c.min()),
            "cosine_p05": float(np.percentile(c, 5)),
            "max_abs_diff": self.max_abs_diff,
            "decisions": self.decisions.to_dict(),
            "cosines": [round(float(v), 6) for v in c],
        }


def evaluate_embedder(
    ref: Fp32Reference, model: Path, threads: int = 1, optimization: Optimization = Optimization.ALL
) -> EmbedderStats:
    """Embed the fp32 reference chips with ``model`` and compare with the fp32 descriptors."""
    with FaceEmbedder(model, threads=threads, optimization=optimization) as embedder:
        quant = embedder.embed(ref.chips)
    cos = row_cosines(ref.descriptors, quant)
    decisions = compare_decisions(ref, dict(zip(ref.keys, quant, strict=True)))
    return EmbedderStats(cos, decisions, float(np.max(np.abs(quant - ref.descriptors))))


@dataclass
class DetectorStats:
    """Quantized cascade vs fp32 on the annotated faces the fp32 cascade finds."""

    ious: list[float]
    lost: list[str]
    fp32_detections: int
    quant_detections: int

    def to_dict(self) -> dict:
        arr = np.asarray(self.ious) if self.ious else np.zeros(1)
        return {
            "faces": len(self.ious) + len(self.lost),
            "iou_min": float(arr.min()),
            "iou_mean": float(arr.mean()),
            "lost": len(self.lost),
            "lost_faces": self.lost,
            "fp32_detections": self.fp32_detections,
            "quant_detections": self.quant_detections,
        }


def evaluate_detector(
    ref: Fp32Reference,
    nets: Mapping[FaceModel, Path],
    threads: int = 1,
    optimization: Optimization = Optimization.ALL,
    progress: ProgressFn = silent,
) -> tuple[DetectorStats, list]:
    """Run the cascade made of ``nets`` on the evaluation images and compare with fp32 (``progress`` counts
    the images).

    Returns:
        (DetectorStats, the candidate's detections per image).
    """
    stats = DetectorStats([], [], 0, 0)
    found: list[list[Detection]] = []
    with MtcnnDetector({k: nets[k] for k in DETECTOR_NETS}, threads=threads, optimization=optimization) as detector:
        for k, image in enumerate(tracked(progress, ref.eval_set.images, "images, candidate detector")):
            dets = detector.detect(image.rgb)
            found.append(dets)
            stats.fp32_detections += len(ref.detections[k])
            stats.quant_detections += len(dets)
            for (kk, i), j in ref.face_det.items():
                if kk != k:
                    continue
                box = ref.detections[k][j].box
                best = max((iou(box, d.box) for d in dets), default=0.0)
                if best >= TWIN_MIN_IOU:
                    stats.ious.append(best)
                else:
                    stats.lost.append(f"{image.name} {image.faces[i].identity} (best IoU {best:.2f})")
    return stats, found


def evaluate_end_to_end(
    ref: Fp32Reference,
    nets: Mapping[FaceModel, Path],
    found: list,
    threads: int = 1,
    optimization: Optimization = Optimization.ALL,
) -> dict:
    """The quantized detector's chips through the quantized embedder vs the fp32 pipeline (not gated)."""
    keys, chips = [], []
    # The candidate's detections are given: the pipeline only cuts chips and embeds them.
    embedder = FaceEmbedder(nets[FaceModel.EMBEDDER], threads=threads, optimization=optimization)
    with FacePipeline(
        _NoDetector(), embedder, shape_predictor=ref.shape_predictor, chip_size=embedder.chip_size
    ) as pipe:
        for k, image in enumerate(ref.eval_set.images):
            for i, j in sorted(_faces_of(ref.eval_set, k, found[k]).items()):
                keys.append((k, i))
                chips.append(pipe.chip(image.rgb, found[k][j]))
        quant = pipe.embedder.embed(np.stack(chips)) if chips else np.zeros((0, ref.descriptors.shape[1]), np.float32)
    vectors = dict(zip(keys, quant, strict=True))
    fp32 = dict(zip(ref.keys, ref.descriptors, strict=True))
    common = [key for key in keys if key in fp32]
    cos = row_cosines(np.stack([fp32[c] for c in common]), np.stack([vectors[c] for c in common])) if common else None
    decisions = compare_decisions(ref, vectors)
    return {
        "faces": len(common),
        "cosine_mean": float(cos.mean()) if cos is not None else None,
        "cosine_min": float(cos.min()) if cos is not None else None,
        "decisions": decisions.to_dict(),
    }
