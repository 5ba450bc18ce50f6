"""Face detectors side by side on the evaluation photos: faces found, missed and false, and ms per photo.

    .venv/bin/python -m benchmarks run detector_quality            # writes the ``detector-quality`` section
    .venv/bin/python -m benchmarks run detector_quality --quick    # 1 timed round, prints only

The photos are the evaluation set's (``converters.face.facedata.make_eval_images``, seed 0): the originals of
skimage's astronaut, insightface's t1.jpg (6 people) and Tom Hanks (padded), and 6 seeded augmentations of
each (pose, scale, light, blur, JPEG), with their annotated faces (dlib HOG boxes checked by eye, warped with
the photo). A detection is a found face when it overlaps an annotated face by IoU >= 0.3
(``converters.face.boxes.match_boxes``, one to one); an annotated face nobody matched is missed, a detection
that matched nothing is false. Face size is the annotated box's side in pixels.

Contenders, interleaved photo by photo in every round, 1 thread, CPU time (``time.process_time``):

* MTCNN (our ONNX export of facenet-pytorch's nets, onnxruntime), detections scoring >= 0.9 as the pipeline
  reports them (``edge.face.recognize.DEFAULT_MIN_SCORE``);
* BlazeFace short range and full range (mediapipe 0.10.21), each as the TFLite file on LiteRT and as our ONNX
  translation on onnxruntime, at MediaPipe's thresholds (0.5 / 0.6);
* BlazeFace full range tiled (``edge.face.tiles.DEFAULT_TILING``: the whole frame and, on frames of 576 pixels
  or more where that pass finds no face or a small one, a grid of overlapping tiles, merged by the same weighted
  NMS), on both runtimes; then, not timed, on every photo letterboxed to 640x480 (and the demo's views), cued
  and with tiles on every frame, against dlib's HOG;
* dlib's HOG detector with one upsample (what face_recognition runs), when dlib is installed.

The time is the whole ``detect`` call (resizing, network, decoding, NMS) on the full photo.

Then the whole pipeline (``open_face_pipeline``: detector, dlib's 5 points on the box, chip, ResNet) with each
detector against face_recognition's (dlib HOG, 5 points, ResNet) on the evaluation pairs
(``converters.face.agreement.compare_pipelines``): faces each misses, and how often the two same/different
decisions agree where both decided. Needs dlib (the ``reference`` extra).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import asdict, replace
from typing import Any

import numpy as np

from benchmarks.harness.detectors import Box, Contender, hog_contender
from benchmarks.harness.report import REPO, machine_line, write_section
from converters.face.blazeface import FULL_RANGE, SHORT_RANGE, export_blazeface_onnx
from converters.face.boxes import match_boxes
from converters.face.facedata import make_eval_images
from converters.face.mtcnn import export_mtcnn
from edge.face.detect_blazeface import BlazeFaceDetector
from edge.face.detect_mtcnn import MtcnnDetector
from edge.face.recognize import DEFAULT_MIN_SCORE
from edge.face.tiles import DEFAULT_TILING, tile_grid

NAME = "detector_quality"
SUMMARY = "Face detectors on the evaluation photos: found, missed, false, ms per photo"
#: the docs/benchmarks.md sections it writes
SECTIONS = ("detector-quality",)

CACHE = REPO / ".cache" / "bench"
#: Face size buckets (annotated box side, pixels): [low, high).
SIZES = ((0, 80), (80, 120), (120, 10_000))


def _ours(name: str, detector) -> Contender:
    def detect(rgb: np.ndarray) -> list[Box]:
        return [d.box for d in detector.detect(rgb) if d.score >= min_score]

    min_score = DEFAULT_MIN_SCORE if isinstance(detector, MtcnnDetector) else 0.0
    return Contender(name, detect, detector.close)


def open_contenders() -> list[Contender]:
    """Every detector, models exported into ``.cache/bench`` once."""
    mtcnn_dir = CACHE / "mtcnn"
    if not (mtcnn_dir / "mtcnn_onet.onnx").is_file():
        export_mtcnn(mtcnn_dir)
    contenders = [_ours("MTCNN (onnxruntime)", MtcnnDetector(mtcnn_dir, threads=1))]
    for variant, label in ((SHORT_RANGE, "short"), (FULL_RANGE, "full")):
        export = export_blazeface_onnx(CACHE / "blazeface", variant)
        contenders.append(_ours(f"BlazeFace {label} (LiteRT)", BlazeFaceDetector(export.tflite, threads=1)))
        contenders.append(_ours(f"BlazeFace {label} (onnxruntime)", BlazeFaceDetector(export.onnx, threads=1)))
    export = export_blazeface_onnx(CACHE / "blazeface", FULL_RANGE)
    for runtime, path in (("LiteRT", export.tflite), ("onnxruntime", export.onnx)):
        tiled = BlazeFaceDetector(path, threads=1, tiling=DEFAULT_TILING)
        contenders.append(_ours(f"BlazeFace full tiled ({runtime})", tiled))
    hog = hog_contender()
    if hog is not None:
        contenders.append(hog)
    return contenders


def _bucket(box: Box) -> int:
    side = ((box[2] - box[0]) + (box[3] - box[1])) / 2
    return next(i for i, (lo, hi) in enumerate(SIZES) if lo <= side < hi)


def measure(rounds: int) -> dict:
    """Detect with every contender on every evaluation image; count once, time ``rounds`` times."""
    images = make_eval_images(0)
    contenders = open_contenders()
    try:
        counts = {c.name: {"found": [0] * len(SIZES), "missed": [0] * len(SIZES), "false": 0} for c in contenders}
        # largest box difference, LiteRT vs onnxruntime (inf: other faces)
        twins = {"short": 0.0, "full": 0.0, "full tiled": 0.0}
        for image in images:
            truth = [f.box for f in image.faces]
            seen = {}
            for c in contenders:
                boxes = c.detect(image.rgb)
                seen[c.name] = np.asarray(boxes, np.float64).reshape(-1, 4)
                matched = match_boxes(truth, boxes)
                hit = {i for i, _, _ in matched}
                for i, box in enumerate(truth):
                    counts[c.name]["found" if i in hit else "missed"][_bucket(box)] += 1
                counts[c.name]["false"] += len(boxes) - len(matched)
            for label in twins:
                a, b = seen[f"BlazeFace {label} (LiteRT)"], seen[f"BlazeFace {label} (onnxruntime)"]
                diff = float(np.abs(a - b).max(initial=0.0)) if a.shape == b.shape else float("inf")
                twins[label] = max(twins[label], diff)
        times: dict[str, dict[str, list[float]]] = {c.name: {} for c in contenders}
        for _ in range(rounds):
            for image in images:
                for c in contenders:
                    t0 = time.process_time()
                    c.detect(image.rgb)
                    times[c.name].setdefault(image.source, []).append(time.process_time() - t0)
    finally:
        for c in contenders:
            c.close()
    annotated = [0] * len(SIZES)
    for image in images:
        for f in image.faces:
            annotated[_bucket(f.box)] += 1
    return {
        "machine": machine_line(),
        "rounds": rounds,
        "tiling": tiling_sensitivity(images),
        "vga": vga_check(),
        "images": len(images),
        "annotated": annotated,
        "twins_px": twins,
        "counts": counts,
        "ms": {c: {src: statistics.median(v) * 1e3 for src, v in per.items()} for c, per in times.items()},
    }


#: net_face values the tiling is also counted at (not timed): how much the default's result hangs on it.
SENSITIVITY_NET_FACES = (16, 20, 24, 28, 32)
#: The second look's settings it is also counted at (not timed), everything else as ``DEFAULT_TILING``.
SENSITIVITY_LOOKS: dict[str, dict[str, Any]] = {
    "no second look": {"look_score": 1.0},
    "looks from 0.4": {"look_score": 0.4},
    "looks from 0.5": {"look_score": 0.5},
    "looks at 1.5× the box": {"look_zoom": 1.5},
    "looks at 3× the box": {"look_zoom": 3.0},
    "tiles on every frame of 576 px or more (not cued)": {"cued": False},
}
#: The frame size of the 640x480 check (a Pi camera's default video mode): each photo letterboxed to it.
VGA = (640, 480)


def _count(detector: BlazeFaceDetector, images: list) -> dict:
    """Annotated faces found and false detections of ``detector`` on ``images``."""
    found = false = 0
    for image in images:
        boxes = [d.box for d in detector.detect(image.rgb)]
        matched = match_boxes([f.box for f in image.faces], boxes)
        found, false = found + len(matched), false + len(boxes) - len(matched)
    return {"found": found, "false": false}


def tiling_sensitivity(images: list) -> dict:
    """Faces found and false detections of the tiled full-range detector (onnxruntime) at other ``net_face``
    values (the overlap, hence the tile side, follows it) and other second-look settings
    (``SENSITIVITY_LOOKS``), everything else as ``DEFAULT_TILING``."""
    export = export_blazeface_onnx(CACHE / "blazeface", FULL_RANGE)
    rows, looks = {}, {}
    with BlazeFaceDetector(export.onnx, threads=1) as detector:
        for net_face in SENSITIVITY_NET_FACES:
            detector.tiling = replace(DEFAULT_TILING, net_face=float(net_face))
            side = tile_grid(1280, 886, detector.spec.size, detector.tiling)[0].x1
            rows[net_face] = {**_count(detector, images), "t1_tile_side": side}
        for label, change in SENSITIVITY_LOOKS.items():
            detector.tiling = replace(DEFAULT_TILING, **change)
            looks[label] = _count(detector, images)
    return {"default": asdict(DEFAULT_TILING), "net_face": rows, "looks": looks}


def _letterboxed(image) -> tuple[np.ndarray, list[Box]]:
    """``image`` letterboxed to ``VGA`` on black (INTER_AREA) and its annotated boxes moved with it."""
    from benchmarks.harness.arm_frames import letterbox

    h, w = image.rgb.shape[:2]
    scale = min(VGA[0] / w, VGA[1] / h)
    x, y = (VGA[0] - round(w * scale)) // 2, (VGA[1] - round(h * scale)) // 2
    moved = [
        (x1 * scale + x, y1 * scale + y, x2 * scale + x, y2 * scale + y)
        for x1, y1, x2, y2 in (f.box for f in image.faces)
    ]
    return letterbox(image.rgb, VGA), moved


def vga_check() -> dict:
    """The evaluation images and the demo's views (``converters.demo.host.demo_views``) letterboxed to 640x480:
    faces found, false detections and network passes of the tiled detector (LiteRT), cued (``DEFAULT_TILING``)
    and with tiles on every frame, and dlib HOG's found and false."""
    from converters.demo.host import demo_views

    export = export_blazeface_onnx(CACHE / "blazeface", FULL_RANGE)
    hog = hog_contender()
    out: dict = {}
    for source, images in (("evaluation images", make_eval_images(0)), ("demo views", demo_views())):
        frames = [_letterboxed(im) for im in images]
        row = out[source] = {"images": len(frames), "annotated": sum(len(t) for _, t in frames)}
        for label, tiling in (("cued", DEFAULT_TILING), ("blind", replace(DEFAULT_TILING, cued=False))):
            detector = _Counted(export.tflite, threads=1, tiling=tiling)
            try:
                row[label] = {**_found(frames, detector.boxes), "passes": detector.passes}
            finally:
                detector.close()
        if hog is not None:
            row["hog"] = _found(frames, hog.detect)
    return out


class _Counted(BlazeFaceDetector):
    """A BlazeFace detector that counts its network runs in ``passes``."""

    passes = 0

    def run_raw(self, tensor: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        self.passes += 1
        return super().run_raw(tensor)

    def boxes(self, rgb: np.ndarray) -> list[Box]:
        return [d.box for d in self.detect(rgb)]


def _found(frames: list, detect) -> dict:
    found = false = 0
    for rgb, truth in frames:
        boxes = detect(rgb)
        matched = match_boxes(truth, boxes)
        found, false = found + len(matched), false + len(boxes) - len(matched)
    return {"found": found, "false": false}


def vga_lines(check: dict) -> list[str]:
    """The 640x480 check as a paragraph and a table."""
    lines = [
        "",
        "The same photos letterboxed to 640×480 (a Pi camera's video frame, long side ≥ `min_side`): the tiled",
        "detector cued (`Tiling.cued`, the default: the tiles only when the whole-frame pass finds no face or one",
        "narrower than `net_face` at its input) against tiles on every such frame, LiteRT, and dlib HOG; passes =",
        "network runs, all images.",
        "",
        "| photos | annotated | cued: found / false / passes | every frame tiled: found / false / passes "
        "| dlib HOG: found / false |",
        "|---|---:|---:|---:|---:|",
    ]
    for source, r in check.items():
        hog = f"{r['hog']['found']} / {r['hog']['false']}" if "hog" in r else "not run"
        lines.append(
            f"| {source} ({r['images']}) | {r['annotated']} | {r['cued']['found']} / {r['cued']['false']} / "
            f"{r['cued']['passes']} | {r['blind']['found']} / {r['blind']['false']} / {r['blind']['passes']} | {hog} |"
        )
    return lines


class _MemoReference:
    """face_recognition's pipeline, run once per image for all our pipelines."""

    def __init__(self) -> None:
        from converters.face.reference import ReferencePipeline

        self.inner = ReferencePipeline()
        self.memo: dict[bytes, list] = {}

    def analyze(self, rgb: np.ndarray) -> list:
        key = rgb.tobytes()
        if key not in self.memo:
            self.memo[key] = self.inner.analyze(rgb)
        return self.memo[key]


def measure_agreement() -> dict | None:
    """Decision agreement with face_recognition per detector; None without dlib."""
    try:
        import dlib  # noqa: F401
    except ImportError:
        return None
    from converters.face.agreement import compare_pipelines
    from converters.face.blazeface import add_blazeface
    from converters.face.build import export_face_models
    from converters.face.facedata import make_eval_set
    from edge.face.models import BLAZEFACE_ROLES, Detector, open_face_pipeline, read_models_folder

    folder = CACHE / "face-fp32"
    if not (folder / "models.json").is_file():
        export_face_models(folder, "rpi4")
    roles = read_models_folder(folder).entries
    for detector, variant in ((Detector.BLAZEFACE, SHORT_RANGE), (Detector.BLAZEFACE_FULL, FULL_RANGE)):
        if BLAZEFACE_ROLES[detector] not in roles:
            add_blazeface(folder, variant)
    eval_set, reference = make_eval_set(0), _MemoReference()
    rows = {}
    for detector in Detector:
        with open_face_pipeline(folder, threads=1, detector=detector) as pipeline:
            rows[detector.value] = compare_pipelines(eval_set, pipeline, reference).summary()
    return rows


def agreement_markdown(rows: dict) -> list[str]:
    """The pipeline table."""
    out = [
        "",
        "Whole pipeline with each detector vs face_recognition 1.3 (HOG, 5 points, the same ResNet) on the",
        "evaluation pairs (`converters.face.agreement.compare_pipelines`; docs/evaluation.md): a pair is",
        "decided by a pipeline when it found both faces; agreement = same/different decisions equal, over the",
        "pairs both decided. Short range's disagreements came, checked by hand, from faces of t1.jpg's",
        "augmentations it boxed loosely (IoU 0.35–0.46 with HOG's box; about 10 pixels wide at its 128-pixel",
        "input, outside its range), which gave poor chips.",
        "",
        "| detector | faces missed: ours | face_recognition | pairs decided by both | undecided by ours |"
        " decisions agree |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, r in rows.items():
        agree = r["decision_agreement"]
        out.append(
            f"| {name} | {r['faces_missed_by_ours']} | {r['faces_missed_by_reference']} | "
            f"{r['pairs_decided_by_both']} / {r['pairs']} | {r['pairs_undecided_by_ours']} | "
            f"{'—' if agree is None else f'{agree:.2%}'} |"
        )
    return out


def tiling_lines(tiling: dict, twins_px: float) -> list[str]:
    """What the tiled rows are, and their counts at other ``net_face`` values."""
    d = tiling["default"]
    counts = ", ".join(
        f"{nf} → {r['found']} found, {r['false']} false (t1 tiles {r['t1_tile_side']} px)"
        for nf, r in tiling["net_face"].items()
    )
    return [
        "`full tiled` (`detector='blazeface-full-tiled'`, `edge.face.tiles`): the full-range pass on the whole",
        f"photo, and on photos whose long side is ≥ {d['min_side']} px where that pass finds no face or one narrower",
        f"than net_face at its input also on {d['per_side']} overlapping square",
        "tiles across the long side (as many as needed down the short side; t1.jpg: 2×2 — astronaut and",
        "Tom Hanks are smaller and run the whole-frame pass only), overlapping by `net_face` × long side / 192",
        f"(net_face {d['net_face']:g}: the face the whole-frame pass may miss); tile detections crossing an",
        "inner tile edge are dropped, the rest merged with the whole frame's by the same weighted NMS. Its",
        f"LiteRT and onnxruntime twins' boxes were at most {twins_px:.2g} px apart. Counted (not timed) at",
        f"other net_face values, onnxruntime: {counts}. A face scoring near MediaPipe's 0.6 cut in its tiles",
        "is found or not as the tile edges move a few pixels (checked by hand for the face net_face 20 misses).",
        f"Then a second look: a candidate of those passes scoring from {d['look_score']:g} to the cut, overlapping",
        f"no detection, gets one more pass on a square {d['look_zoom']:g}× its box around it, and is kept when",
        f"that pass finds it at the cut (at most {d['max_looks']} a frame). Counted (not timed) with other",
        "settings, onnxruntime: "
        + ", ".join(f"{k} → {r['found']} found, {r['false']} false" for k, r in tiling.get("looks", {}).items())
        + ".",
    ]


def markdown(result: dict) -> str:
    """The ``detector-quality`` section."""
    sources = list(next(iter(result["ms"].values())))
    size_heads = [f"found {lo}–{hi} px" if hi < 10_000 else f"found ≥ {lo} px" for lo, hi in SIZES]
    annotated = result["annotated"]
    head = ["detector", "found", "missed", "false", *size_heads, *(f"ms {s}" for s in sources)]
    rows = []
    mtcnn_ms = result["ms"]["MTCNN (onnxruntime)"]
    for name, c in result["counts"].items():
        ms = result["ms"][name]
        size_cells = [f"{f}/{n}" for f, n in zip(c["found"], annotated, strict=True)]
        time_cells = [f"{ms[s]:.1f} ({mtcnn_ms[s] / ms[s]:.1f}×)" for s in sources]
        rows.append(
            f"| {name} | {sum(c['found'])} | {sum(c['missed'])} | {c['false']} | "
            + " | ".join(size_cells + time_cells)
            + " |"
        )
    return "\n".join(
        [
            "## Face detectors: faces found, missed and false; ms per photo",
            "",
            "`.venv/bin/python -m benchmarks run detector_quality` — the evaluation set's "
            f"{result['images']} images (3 photos, each original",
            f"+ 6 seeded augmentations) and their {sum(annotated)} annotated faces; found = a detection overlapping",
            "an annotated face by IoU ≥ 0.3 (one to one), false = a detection matching none; face size = the",
            "annotated box's side. MTCNN counted at score ≥ 0.9 (what the pipeline reports), BlazeFace at",
            "MediaPipe's own thresholds (0.5 short, 0.6 full range). ms = the whole `detect` call (resize,",
            "network, decoding, NMS) on the full photo, 1 thread, CPU time, median over the photo's 7 images",
            f"× {result['rounds']} interleaved rounds; in brackets, MTCNN's time ÷ this one.",
            "",
            f"Machine: {result['machine']}",
            "",
            "| " + " | ".join(head) + " |",
            "|---|" + "---:|" * (len(head) - 1),
            *rows,
            "",
            "BlazeFace's ONNX translation (raw outputs within 1e-3 of the TFLite file's,",
            "`converters.face.blazeface.export_blazeface_onnx`) gave the same detections on every image: boxes",
            f"at most {result['twins_px']['short']:.2g} px (short) and {result['twins_px']['full']:.2g} px (full "
            "range) apart. Short range is made for faces filling much of",
            "the frame (selfies): shrunk to 128 pixels, t1.jpg's faces are about 10 pixels wide and it misses",
            "them. The 64-bit ARM profiles run `blazeface-full-tiled` (`runtime.face_detector`); MTCNN is",
            '`face_detector = "mtcnn"` away.',
            "",
            *tiling_lines(result["tiling"], result["twins_px"]["full tiled"]),
            *(vga_lines(result["vga"]) if result.get("vga") else []),
            *(agreement_markdown(result["agreement"]) if result.get("agreement") else []),
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="1 round, print only")
    args = parser.parse_args(argv)
    CACHE.mkdir(parents=True, exist_ok=True)
    result = measure(1 if args.quick else args.rounds)
    result["agreement"] = measure_agreement()
    md = markdown(result)
    print(md)
    if not args.quick:
        print(f"wrote {write_section('detector-quality', md)}", file=sys.stderr)
    return 0
