"""Does our device pipeline decide like face_recognition? The agreement proof on the evaluation pairs.

Both pipelines run on every evaluation image. Each annotated face is matched to one detection of each
pipeline by box IoU (greedy, one-to-one). For every evaluation pair, each pipeline decides "same person"
when the Euclidean distance of the two descriptors is <= the threshold (0.6, as face_recognition's
``compare_faces``); the report counts how often the two decisions agree, how far the two pipelines'
descriptors of the same face are apart, and which faces either pipeline missed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import numpy as np

from converters.face.boxes import Box, iou, match_boxes
from converters.face.facedata import EvalSet
from edge.face.types import DLIB_SAME_PERSON_THRESHOLD
from edge.progress import ProgressFn, silent, tracked

#: The goal of the proof: share of evaluation pairs on which both pipelines decide alike.
AGREEMENT_GOAL = 0.99


class _Analyzer(Protocol):
    def analyze(self, rgb: np.ndarray) -> list: ...


@dataclass(frozen=True)
class FaceRow:
    """One annotated face: found by whom, and how far the two descriptors of it are apart."""

    image: str
    identity: str
    found_by_reference: bool
    found_by_ours: bool
    box_iou: float | None  # our box vs the reference's box of this face
    descriptor_distance: float | None  # ||ours - reference||


@dataclass(frozen=True)
class PairRow:
    """One evaluation pair as both pipelines decide it (None: a face of the pair was not found)."""

    a: str
    b: str
    same: bool
    reference_distance: float | None
    ours_distance: float | None
    reference_same: bool | None
    ours_same: bool | None

    @property
    def agree(self) -> bool | None:
        """Whether both decisions agree; None when a pipeline missed a face of the pair (counted apart)."""
        if self.reference_same is None or self.ours_same is None:
            return None
        return self.reference_same == self.ours_same


def _rate(flags: list[bool]) -> float | None:
    return sum(flags) / len(flags) if flags else None


@dataclass
class AgreementReport:
    """Decision agreement between our pipeline and face_recognition's on the evaluation pairs."""

    threshold: float
    images: int
    faces: list[FaceRow] = field(default_factory=list)
    pairs: list[PairRow] = field(default_factory=list)
    extra_detections: dict[str, int] = field(default_factory=dict)  # detections matching no annotation

    def agreement(self, same: bool | None = None) -> float | None:
        """Share of pairs both pipelines decided (optionally only same- or different-person ones) where
        the decisions agree. Pairs with a face a pipeline missed are left out and counted in summary()."""
        rows = [p for p in self.pairs if p.agree is not None and (same is None or p.same == same)]
        return _rate([bool(p.agree) for p in rows])

    def accuracy(self, which: str) -> float | None:
        """Share of pairs the given pipeline ("ours" or "reference") decided correctly."""
        decided = [getattr(p, f"{which}_same") for p in self.pairs]
        return _rate([d == p.same for d, p in zip(decided, self.pairs, strict=True) if d is not None])

    def descriptor_distances(self) -> list[float]:
        """||ours - reference|| on every annotated face both pipelines found."""
        return [f.descriptor_distance for f in self.faces if f.descriptor_distance is not None]

    def summary(self) -> dict:
        """The headline numbers."""
        dists = self.descriptor_distances()
        decided = [p for p in self.pairs if p.agree is not None]
        return {
            "threshold": self.threshold,
            "images": self.images,
            "faces_annotated": len(self.faces),
            "faces_missed_by_reference": sum(not f.found_by_reference for f in self.faces),
            "faces_missed_by_ours": sum(not f.found_by_ours for f in self.faces),
            "extra_detections": dict(self.extra_detections),
            "pairs": len(self.pairs),
            "pairs_decided_by_both": len(decided),
            "pairs_undecided_by_reference": sum(p.reference_same is None for p in self.pairs),
            "pairs_undecided_by_ours": sum(p.ours_same is None for p in self.pairs),
            "pairs_disagreeing": sum(not p.agree for p in decided),
            "decision_agreement": self.agreement(),
            "agreement_same_person": self.agreement(True),
            "agreement_different_person": self.agreement(False),
            "accuracy_reference": self.accuracy("reference"),
            "accuracy_ours": self.accuracy("ours"),
            "descriptor_distance_mean": float(np.mean(dists)) if dists else None,
            "descriptor_distance_max": float(np.max(dists)) if dists else None,
            "goal": AGREEMENT_GOAL,
            "goal_met": (self.agreement() or 0.0) >= AGREEMENT_GOAL,
        }

    def to_dict(self) -> dict:
        """Everything, JSON-ready: summary, per-face rows and the per-pair table."""
        return {
            "summary": self.summary(),
            "faces": [asdict(f) for f in self.faces],
            "pairs": [asdict(p) | {"agree": p.agree} for p in self.pairs],
        }

    def to_markdown(self, max_pair_rows: int = 40) -> str:
        """A readable report: summary, faces, and the pairs that disagree or sit nearest the threshold."""
        return _markdown(self, max_pair_rows)


def _fmt(v: object) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.4f}"
    return str(v)


def _markdown(rep: AgreementReport, max_pair_rows: int) -> str:
    s = rep.summary()
    lines = ["# Face pipeline agreement with face_recognition", "", "| measure | value |", "|---|---|"]
    lines += [f"| {k} | {_fmt(v)} |" for k, v in s.items()]
    lines += ["", "## Faces", "", "| image | identity | reference | ours | box IoU | descriptor distance |"]
    lines += ["|---|---|---|---|---|---|"]
    lines += [
        f"| {f.image} | {f.identity} | {_fmt(f.found_by_reference)} | {_fmt(f.found_by_ours)} | "
        f"{_fmt(f.box_iou)} | {_fmt(f.descriptor_distance)} |"
        for f in rep.faces
    ]

    def closeness(p: PairRow) -> float:
        ds = [d for d in (p.reference_distance, p.ours_distance) if d is not None]
        return min(abs(d - rep.threshold) for d in ds) if ds else 0.0

    shown = sorted(rep.pairs, key=lambda p: (p.agree is not False, closeness(p)))[:max_pair_rows]
    lines += ["", f"## Pairs: disagreements first, then nearest the threshold ({len(shown)} of {len(rep.pairs)})"]
    lines += [
        "",
        "| a | b | same | ref dist | our dist | ref same | our same | agree |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {p.a} | {p.b} | {_fmt(p.same)} | {_fmt(p.reference_distance)} | {_fmt(p.ours_distance)} | "
        f"{_fmt(p.reference_same)} | {_fmt(p.ours_same)} | {_fmt(p.agree)} |"
        for p in shown
    ]
    return "\n".join(lines) + "\n"


def _descriptors_per_face(eval_set: EvalSet, image_index: int, found: list[tuple[Box, np.ndarray]]):
    """Map each annotated face of one image to (box, descriptor) of a detection, or None."""
    annotated = [f.box for f in eval_set.images[image_index].faces]
    matches = match_boxes(annotated, [b for b, _ in found])
    per_face: list[tuple[Box, np.ndarray] | None] = [None] * len(annotated)
    for i, j, _ in matches:
        per_face[i] = found[j]
    return per_face, len(found) - len(matches)


def compare_pipelines(
    eval_set: EvalSet,
    pipeline: _Analyzer,
    reference: _Analyzer | None = None,
    threshold: float = DLIB_SAME_PERSON_THRESHOLD,
    progress: ProgressFn = silent,
) -> AgreementReport:
    """Run our pipeline and face_recognition's on every evaluation image and compare their decisions.

    Args:
        eval_set: from ``converters.face.facedata.make_eval_set``.
        pipeline: ours, e.g. ``edge.face.pipeline.FacePipeline`` (``analyze(rgb) -> list[Face]``).
        reference: defaults to ``converters.face.reference.ReferencePipeline()`` (needs dlib).
        threshold: same-person distance threshold for both pipelines.
        progress: counts the images done (a bar on a terminal).

    Returns:
        AgreementReport.
    """
    if reference is None:
        from converters.face.reference import ReferencePipeline

        reference = ReferencePipeline()
    report = AgreementReport(threshold=threshold, images=len(eval_set.images))
    report.extra_detections = {"reference": 0, "ours": 0}
    vectors: dict[tuple[int, int], dict[str, np.ndarray]] = {}
    for k, image in enumerate(tracked(progress, eval_set.images, "images, both pipelines")):
        found: dict[str, list[tuple[Box, np.ndarray]]] = {
            "ours": [(_box(f.detection.box), f.descriptor) for f in pipeline.analyze(image.rgb)],
            "reference": [(_box(f.box), f.descriptor) for f in reference.analyze(image.rgb)],
        }
        per_face = {}
        for who, faces in found.items():
            per_face[who], extra = _descriptors_per_face(eval_set, k, faces)
            report.extra_detections[who] += extra
        for j, face in enumerate(image.faces):
            o, r = per_face["ours"][j], per_face["reference"][j]
            vectors[(k, j)] = {n: np.asarray(v[1], np.float64) for n, v in (("ours", o), ("reference", r)) if v}
            report.faces.append(_face_row(image.name, face.identity, o, r))
    report.pairs = [_pair_row(eval_set, pair, vectors, threshold) for pair in eval_set.pairs]
    return report


def _box(box: Any) -> Box:
    x0, y0, x1, y1 = (float(v) for v in box)
    return (x0, y0, x1, y1)


def _face_row(image: str, identity: str, ours: tuple | None, ref: tuple | None) -> FaceRow:
    return FaceRow(
        image=image,
        identity=identity,
        found_by_reference=ref is not None,
        found_by_ours=ours is not None,
        box_iou=iou(ours[0], ref[0]) if ours is not None and ref is not None else None,
        descriptor_distance=(
            float(np.linalg.norm(np.subtract(ours[1], ref[1], dtype=np.float64)))
            if ours is not None and ref is not None
            else None
        ),
    )


def _pair_row(eval_set: EvalSet, pair, vectors: dict, threshold: float) -> PairRow:
    va, vb = vectors[(pair.a.image, pair.a.face)], vectors[(pair.b.image, pair.b.face)]
    dist = {n: float(np.linalg.norm(va[n] - vb[n])) if n in va and n in vb else None for n in ("ours", "reference")}
    name = {r: f"{eval_set.images[r.image].name}#{eval_set.face(r).identity}" for r in (pair.a, pair.b)}
    return PairRow(
        a=name[pair.a],
        b=name[pair.b],
        same=pair.same,
        reference_distance=dist["reference"],
        ours_distance=dist["ours"],
        reference_same=None if dist["reference"] is None else dist["reference"] <= threshold,
        ours_same=None if dist["ours"] is None else dist["ours"] <= threshold,
    )
