"""Whole frames: detect, align, embed and match a gallery of 100 — ours against face_recognition's pipeline.

A user runs frames, not an embedder (issue #13). Every contender takes the same RGB photo and returns its
faces, each matched against the same gallery of 100 descriptors:

* **face_recognition** (1.3's pipeline through dlib, ``converters.face.reference.ReferencePipeline``): HOG with
  one upsample, the 5-point model, the ResNet descriptor, ``compare_faces``-style nearest match;
* **ours**: the device pipeline of a converted face folder (``edge.face.models.open_face_pipeline``: MTCNN,
  dlib's 5-point model in numpy and OpenCV, the ONNX ResNet), fp32 and the profile's INT8, at 1 and 2 threads. Its
  frame is timed per stage (detect / align / embed / match), which is exactly what ``analyze`` does;
* **each profile's default** (``--defaults``, every 64-bit ARM profile unless told): the folder ``edge-deploy
  convert face --target NAME`` ships with no options (``benchmarks.harness.profile_defaults``), run with its own
  detector, 1 thread: the rows the issue #46 goal (>= 10x face_recognition, no more faces missed) is judged on.

Speed: the original evaluation photos (converters.face.facedata.EVAL_PHOTOS), interleaved rounds (each round
runs every contender over every photo, starting one contender later than the round before); the median of
the rounds per photo; a contender's frame time over the photos is the sum of its per-photo medians. Quality:
on the whole evaluation set (originals + seeded augmentations), ``converters.face.agreement.compare_pipelines``
(faces missed, extra detections, same/different decisions against face_recognition's on the evaluation
pairs; goal >= 99 %). dlib runs single-threaded (its HOG detector and ResNet use one core).

    .venv/bin/python -m benchmarks run frame_speed            # full run: docs/benchmarks.md + docs/img/frame_speed.png
    .venv/bin/python -m benchmarks run frame_speed --quick    # 1 round, no quality pass; prints, writes no docs

BlazeFace rows run its ONNX translation on onnxruntime, and, in the ``LiteRT`` rows, the ``.tflite`` original
on LiteRT (XNNPACK); the embedder is the folder's on onnxruntime everywhere. A 640x480 video through ``serve``:
``benchmarks/serve_fps.py``; the frame on emulated Cortex-A72/A76: ``benchmarks/arm_frame.py``. Host side:
imports converters; nothing here runs on the device.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from benchmarks.harness.face_frames import GALLERY_SIZE, make_gallery
from benchmarks.harness.face_speed_models import (
    BLAZEFACE_FULL_TFLITE,
    CACHE,
    CALIBRATION,
    build_fp32,
    build_int8,
    with_blazeface,
)
from benchmarks.harness.rounds import interleaved
from edge.face.tiles import DEFAULT_TILING
from edge.face.types import DLIB_SAME_PERSON_THRESHOLD
from edge.profiles import load_profile

NAME = "frame_speed"
SUMMARY = "Whole frames (detect, align, embed, match) against face_recognition"
#: the docs/benchmarks.md sections it writes
SECTIONS = ("frame-speed",)

STAGES = ("detect", "align", "embed", "match")


@dataclass
class Contender:
    """One pipeline at one thread count: ``frame(rgb)`` returns (faces, {stage: seconds})."""

    name: str
    threads: int
    frame: Callable[[np.ndarray], tuple[int, dict[str, float]]]
    close: Callable[[], None]
    # per photo: the wall seconds of each round, and the stage seconds of each round
    times: dict[str, list[float]] = field(default_factory=dict)
    stages: dict[str, list[dict[str, float]]] = field(default_factory=dict)
    faces: dict[str, int] = field(default_factory=dict)


#: How one of our pipelines is opened: (models folder, MTCNN's smallest face or None, detector name or None for
#: the folder's own, the BlazeFace file to run or None for the file models.json names).
Setup = tuple[Path, int | None, str | None, Path | None]
#: The label of a profile default's row starts with this.
DEFAULT_ROW = "default of "


def ours(name: str, setup: Setup, threads: int, gallery) -> Contender:
    """Our device pipeline over ``folder``, its frame split into stages exactly as ``FacePipeline.analyze``."""
    from edge.face.models import open_face_pipeline

    folder, min_face, detector, detector_model = setup
    pipeline = open_face_pipeline(
        folder, threads=threads, min_face_size=min_face, detector=detector, detector_model=detector_model
    )

    def frame(rgb: np.ndarray) -> tuple[int, dict[str, float]]:
        t0 = time.perf_counter()
        found = [d for d in pipeline.detector.detect(rgb) if d.score >= pipeline.min_score]
        t1 = time.perf_counter()
        chips = pipeline.chips(rgb, found)
        t2 = time.perf_counter()
        descriptors = pipeline.embedder.embed(chips) if found else np.zeros((0, 128), np.float32)
        t3 = time.perf_counter()
        for d in descriptors:
            gallery.match(d)
        t4 = time.perf_counter()
        return len(found), {"detect": t1 - t0, "align": t2 - t1, "embed": t3 - t2, "match": t4 - t3}

    return Contender(name, threads, frame, pipeline.close)


def face_recognition(gallery) -> Contender:
    """face_recognition 1.3's pipeline through dlib, plus the same gallery match."""
    from converters.face.reference import ReferencePipeline

    reference = ReferencePipeline()

    def frame(rgb: np.ndarray) -> tuple[int, dict[str, float]]:
        t0 = time.perf_counter()
        faces = reference.analyze(rgb)  # detect + landmarks + descriptor: dlib does not split them
        t1 = time.perf_counter()
        for f in faces:
            gallery.match(f.descriptor.astype(np.float32))
        t2 = time.perf_counter()
        return len(faces), {"detect+align+embed": t1 - t0, "match": t2 - t1}

    return Contender("face_recognition (dlib)", 1, frame, lambda: None)


def race(contenders: list[Contender], photos: list[tuple[str, np.ndarray]], rounds: int, progress) -> None:
    """Warm every contender on every photo once, then ``rounds`` interleaved rounds."""
    for c in contenders:
        for name, rgb in photos:
            c.faces[name] = c.frame(rgb)[0]
    for r, order in interleaved(contenders, rounds):
        for c in order:
            for name, rgb in photos:
                start = time.perf_counter()
                _, stages = c.frame(rgb)
                c.times.setdefault(name, []).append(time.perf_counter() - start)
                c.stages.setdefault(name, []).append(stages)
        progress(f"round {r + 1}/{rounds}")


def speed_rows(contenders: list[Contender], photos: list[tuple[str, np.ndarray]]) -> list[dict]:
    """Per contender and photo: median ms, faces, and median ms per stage; plus the total over photos."""
    rows = []
    for c in contenders:
        per_photo = {}
        for name, rgb in photos:
            stage_ms = {
                s: 1e3 * statistics.median(r[s] for r in c.stages[name]) for s in c.stages[name][0]
            }  # fmt: skip
            per_photo[name] = {
                "ms": 1e3 * statistics.median(c.times[name]),
                "faces": c.faces[name],
                "size": f"{rgb.shape[1]}x{rgb.shape[0]}",
                "stages_ms": stage_ms,
            }
        rows.append(
            {
                "contender": c.name,
                "threads": c.threads,
                "photos": per_photo,
                "total_ms": sum(p["ms"] for p in per_photo.values()),
                "faces": sum(p["faces"] for p in per_photo.values()),
            }
        )
    return rows


def quality(folders: dict[str, Setup]) -> dict[str, dict]:
    """compare_pipelines of each of our folders against face_recognition on the evaluation set (dlib runs once)."""
    from converters.face.agreement import compare_pipelines
    from converters.face.facedata import make_eval_set
    from converters.face.reference import ReferencePipeline
    from edge.face.models import open_face_pipeline

    eval_set = make_eval_set(0)
    reference = _Memo(ReferencePipeline())
    out = {}
    for name, (folder, min_face, detector, model) in folders.items():
        with open_face_pipeline(
            folder, threads=2, min_face_size=min_face, detector=detector, detector_model=model
        ) as pipeline:
            summary = compare_pipelines(eval_set, pipeline, reference, DLIB_SAME_PERSON_THRESHOLD).summary()
        out[name] = summary
    return out


class _Memo:
    """face_recognition's answer per image, computed once for every pipeline it is compared with."""

    def __init__(self, reference) -> None:
        self._reference = reference
        self._seen: dict[int, list] = {}

    def analyze(self, rgb: np.ndarray) -> list:
        key = hash(rgb.tobytes())
        if key not in self._seen:
            self._seen[key] = self._reference.analyze(rgb)
        return self._seen[key]


def run(
    target: str,
    rounds: int,
    threads: tuple[int, ...],
    with_quality: bool,
    calibration: int,
    min_faces: tuple[int, ...],
    blazeface: bool,
    progress,
    defaults: tuple[str, ...] = (),
) -> dict:
    """Build or reuse the face folders, race, and (optionally) compare decisions; everything as a dict."""
    from converters.face.facedata import EVAL_PHOTOS

    profile = load_profile(target)
    CACHE.mkdir(parents=True, exist_ok=True)
    fp32_dir = build_fp32(CACHE, progress)
    int8_dir, _ = build_int8(fp32_dir, profile, CACHE, calibration, progress)
    folders: dict[str, Setup] = {
        "ours fp32": (fp32_dir, None, "mtcnn", None),
        f"ours INT8 ({target})": (int8_dir, None, "mtcnn", None),
    }
    photos = [(p.name, p.load()) for p in EVAL_PHOTOS]
    gallery = make_gallery()
    contenders = [face_recognition(gallery)]
    contenders += [ours(name, setup, t, gallery) for name, setup in folders.items() for t in threads]
    extra: dict[str, Setup] = {}
    for m in min_faces:  # the detector's smallest face: MTCNN's pyramid starts at 12 / m (1 thread, fp32 and INT8)
        extra[f"ours fp32, min face {m}"] = (fp32_dir, m, "mtcnn", None)
        extra[f"ours INT8 ({target}), min face {m}"] = (int8_dir, m, "mtcnn", None)
    if blazeface:  # the whole-frame pass, then the same detector on tiles too (edge.face.tiles.DEFAULT_TILING)
        for precision, folder in (("fp32", fp32_dir), (f"INT8 ({target})", int8_dir)):
            with_full = with_blazeface(folder, progress)
            original = with_full / BLAZEFACE_FULL_TFLITE  # the .tflite convert blazeface keeps, on LiteRT
            for detector, label in (("blazeface-full", "BlazeFace full range"),
                                    ("blazeface-full-tiled", "BlazeFace full range tiled")):  # fmt: skip
                extra[f"ours {precision}, {label}"] = (with_full, None, detector, None)
                extra[f"ours {precision}, {label}, LiteRT"] = (with_full, None, detector, original)
    extra.update(default_setups(defaults, progress))
    folders.update(extra)
    contenders += [ours(name, setup, 1, gallery) for name, setup in extra.items()]
    try:
        progress(f"{len(contenders)} contenders, {len(photos)} photos; {rounds} rounds")
        race(contenders, photos, rounds, progress)
    finally:
        for c in contenders:
            c.close()
    result = {
        "params": {
            "rounds": rounds,
            "threads": list(threads),
            "target": target,
            "calibration": calibration,
            "gallery": GALLERY_SIZE,
            "min_faces": list(min_faces),
            "blazeface": blazeface,
            "defaults": list(defaults),
            "load": os.getloadavg()[0],
            "cores": len(os.sched_getaffinity(0)),
        },
        "speed": speed_rows(contenders, photos),
    }
    if with_quality:
        progress("quality: both pipelines on the evaluation set")
        result["quality"] = quality(folders)
    return result


def default_setups(names: tuple[str, ...], progress) -> dict[str, Setup]:
    """A row per profile in ``names``: its default folder, run with the folder's own detector."""
    from benchmarks.harness.profile_defaults import default_folder, describe

    return {
        f"{DEFAULT_ROW}{name} ({describe(load_profile(name))})": (default_folder(name, progress), None, None, None)
        for name in names
    }


def quality_lines(quality: dict[str, dict]) -> list[str]:
    """The quality table: faces found and missed, extra detections, decisions agreed, per pipeline of ours."""
    lines: list[str] = []
    lines += [
        "",
        "Quality on the whole evaluation set (originals + seeded augmentations; `compare_pipelines`):",
        "",
        "| ours | faces found by ours / by face_recognition (annotated) | missed by ours / by face_recognition | "
        "extra detections ours / face_recognition | decisions agree (pairs both found) | goal ≥ 99 % |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for name, q in quality.items():
        n, agree = q["faces_annotated"], q["decision_agreement"]
        agree_text = "-" if agree is None else f"{agree:.4f} ({q['pairs_decided_by_both']} pairs)"
        lines.append(
            f"| {name} | {n - q['faces_missed_by_ours']} / {n - q['faces_missed_by_reference']} ({n}) | "
            f"{q['faces_missed_by_ours']} / {q['faces_missed_by_reference']} | "
            f"{q['extra_detections']['ours']} / {q['extra_detections']['reference']} | {agree_text} | "
            f"{'met' if q['goal_met'] else '**not met**'} |"
        )
    return lines


def goal_lines(rows: list[dict], ref: dict, quality: dict[str, dict] | None) -> list[str]:
    """The speed goal, judged on the fastest 1-thread pipeline of ours, and on the fastest that also keeps the
    quality goal (decisions agree >= 99 %, no more faces missed than face_recognition misses)."""
    ones = [r for r in rows if r is not ref and r["threads"] == 1]

    def verdict(r: dict) -> str:
        ratio = ref["total_ms"] / r["total_ms"]
        met = "met" if ratio >= 10 else f"**not met** ({10 / ratio:.1f}× short)"
        return f"{r['contender']}: {ratio:.2f}× — {met}"

    fastest = min(ones, key=lambda r: r["total_ms"])
    lines = [f"Goal (issue #13): whole frame, 1 thread, ≥ 10× face_recognition. Fastest: {verdict(fastest)}."]
    lines += default_goal_lines(ones, ref, quality)
    if quality is not None:
        keeps = [
            r
            for r in ones
            if r["contender"] in quality
            and quality[r["contender"]]["goal_met"]
            and quality[r["contender"]]["faces_missed_by_ours"] <= quality[r["contender"]]["faces_missed_by_reference"]
        ]
        if keeps:
            best = min(keeps, key=lambda r: r["total_ms"])
            lines.append(
                f"Fastest that also misses no more faces than face_recognition and agrees ≥ 99 %: {verdict(best)}."
            )
        else:
            lines.append("No pipeline of ours both agrees ≥ 99 % and misses no more faces than face_recognition.")
    return lines


def default_goal_lines(ones: list[dict], ref: dict, quality: dict[str, dict] | None) -> list[str]:
    """Issue #46's goal on each profile default's row: ≥ 10× face_recognition, and (with the quality pass) no
    more evaluation faces missed than face_recognition misses."""
    lines = []
    for r in (r for r in ones if r["contender"].startswith(DEFAULT_ROW)):
        ratio = ref["total_ms"] / r["total_ms"]
        text = f"{ratio:.2f}× face_recognition ({'met' if ratio >= 10 else '**not met**'})"
        q = (quality or {}).get(r["contender"])
        if q is not None:
            ours, theirs = q["faces_missed_by_ours"], q["faces_missed_by_reference"]
            text += f", evaluation faces missed {ours} vs face_recognition's {theirs} "
            text += "(met)" if ours <= theirs else "(**not met**)"
        lines.append(f"Goal (issue #46), the {r['contender']}: {text}.")
    return lines


def markdown(result: dict, command: str, machine: str) -> str:
    """The docs/benchmarks.md section."""
    rows = result["speed"]
    ref = next(r for r in rows if r["contender"].startswith("face_recognition"))
    photos = list(ref["photos"])
    sizes = {p: [int(v) for v in ref["photos"][p]["size"].split("x")] for p in photos}
    tiled = ", ".join(p for p in photos if max(sizes[p]) >= DEFAULT_TILING.min_side) or "none"
    lines = [
        "## Whole frames: ours vs face_recognition (detect, align, embed, match a gallery of 100)",
        "",
        f"`{command}` — {machine}",
        "",
        "Each contender takes the same RGB photo and returns its faces, each matched against the same gallery of "
        f"{GALLERY_SIZE}. face_recognition = 1.3's pipeline through dlib (HOG, one upsample; 5-point model; "
        "ResNet), one thread. Ours = the device pipeline of the converted face folder (MTCNN, the 5-point model "
        "in numpy and OpenCV, the ONNX ResNet; one thread, OpenCV's too), MTCNN's smallest face 20 px unless the "
        "row says `min face N` (its image pyramid then starts at 12/N instead of 12/20); `BlazeFace full range` "
        "rows detect with MediaPipe's 192×192 "
        "detector instead (`edge-deploy convert blazeface --range full`; its ONNX translation on onnxruntime, or, "
        "in the `LiteRT` rows, the `.tflite` original that command keeps beside it, on LiteRT with XNNPACK; the "
        "embedder is the folder's ONNX/ORT file on onnxruntime in every row), `tiled` "
        f"on the whole photo and, when its long side is ≥ {DEFAULT_TILING.min_side} px (here: {tiled}), on "
        f"{DEFAULT_TILING.per_side} overlapping tiles across the long side too, and a second look at each weak "
        "candidate (`--detector blazeface-full-tiled`, `edge.face.tiles`). `default of NAME` rows: the folder "
        "`edge-deploy convert face --target NAME` ships with no options (the profile's precision, its "
        "`face_detector` on its `face_detector_runtime`, its embedder format), run with its own detector. Median of "
        f"{result['params']['rounds']} interleaved rounds per photo; the frame total is the sum over the photos. "
        "Ratios are what holds on a shared machine; the absolute times do not.",
        "",
        "| contender | threads | "
        + " | ".join(f"{p} ms (faces)" for p in photos)
        + " | total ms | vs face_recognition |",
        "|---|---:|" + "---:|" * len(photos) + "---:|---:|",
    ]
    for r in rows:
        cells = " | ".join(f"{r['photos'][p]['ms']:.0f} ({r['photos'][p]['faces']})" for p in photos)
        lines.append(
            f"| {r['contender']} | {r['threads']} | {cells} | {r['total_ms']:.0f} | "
            f"{ref['total_ms'] / r['total_ms']:.2f}× |"
        )
    lines += ["", "Where our frame goes (1 thread, median ms summed over the photos):", ""]
    lines += ["| contender | " + " | ".join(STAGES) + " | detect share |", "|---|" + "---:|" * (len(STAGES) + 1)]
    for r in rows:
        if r["threads"] != 1 or r is ref:
            continue
        sums = {s: sum(p["stages_ms"][s] for p in r["photos"].values()) for s in STAGES}
        share = sums["detect"] / sum(sums.values())
        lines.append(f"| {r['contender']} | " + " | ".join(f"{sums[s]:.1f}" for s in STAGES) + f" | {share:.0%} |")
    lines += ["", *goal_lines(rows, ref, result.get("quality"))]
    if "quality" in result:
        lines += quality_lines(result["quality"])
    lines += [
        "",
        "Not measured here: a LiteRT embedder (the pipeline runs the folder's embedder on onnxruntime). A 640×480 "
        "video through `serve`: section `serve-fps` "
        "(`benchmarks/serve_fps.py`); the frame on emulated Cortex-A72/A76: section `arm-frame`.",
    ]
    return "\n".join(lines) + "\n"


def plot(result: dict, png: Path) -> None:
    """Stacked bars: ms per stage over the photos, 1 thread, each contender."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in result["speed"] if r["threads"] == 1]
    fig, ax = plt.subplots(figsize=(8, 3.2))
    for i, r in enumerate(rows):
        left = 0.0
        stage_names = list(next(iter(r["photos"].values()))["stages_ms"])
        for s in stage_names:
            width = sum(p["stages_ms"][s] for p in r["photos"].values())
            ax.barh(i, width, left=left, label=s if i == len(rows) - 1 or s.startswith("detect+") else None)
            left += width
    ax.set_yticks(range(len(rows)), [r["contender"] for r in rows])
    ax.set_xlabel("ms for the evaluation photos, 1 thread (median of rounds)")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    from benchmarks.harness.profile_defaults import pi_profiles
    from benchmarks.harness.report import machine_line, publish

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument("--target", default="rpi4", help="profile of the INT8 build (default rpi4)")
    parser.add_argument("--calibration", type=int, default=CALIBRATION, help="calibration images of the INT8 build")
    parser.add_argument("--min-face", default="40", help="extra contenders: MTCNN's smallest face, pixels, comma-"
                        "separated (default 40; the pipeline's default is 20; '' for none)")  # fmt: skip
    parser.add_argument(
        "--no-blazeface", action="store_true", help="leave out the BlazeFace full-range contenders (plain and tiled)"
    )
    parser.add_argument("--defaults", default=None, help="profiles whose default folder races, comma-separated "
                        "(default: every 64-bit ARM profile; '' for none)")  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="1 round, 1 thread, no quality pass; writes no docs")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")
    start = time.perf_counter()

    def progress(msg: str) -> None:
        print(f"[{time.perf_counter() - start:6.1f} s] {msg}", file=sys.stderr, flush=True)

    rounds, threads = (1, (1,)) if args.quick else (args.rounds, (1, 2))
    min_faces = tuple(int(v) for v in args.min_face.split(",") if v.strip())
    blaze = not args.no_blazeface
    defaults = tuple(pi_profiles() if args.defaults is None else (v for v in args.defaults.split(",") if v.strip()))
    result = run(args.target, rounds, threads, not args.quick, args.calibration, min_faces, blaze, progress, defaults)
    command = f".venv/bin/python -m benchmarks run frame_speed --rounds {rounds} --min-face '{args.min_face}'"
    command += "" if blaze else " --no-blazeface"
    command += "" if args.defaults is None else f" --defaults '{args.defaults}'"
    if args.target != "rpi4" or args.calibration != 200:
        command += f" --target {args.target} --calibration {args.calibration}"
    md = markdown(result, command, machine_line())
    publish("frame_speed", md, result, CACHE, None if args.quick else lambda png: plot(result, png))
    return 0
