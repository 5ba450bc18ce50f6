"""The frame on ARM: executed instructions per 640x480 one-face frame, whole pipeline, emulated Pi 4 / Pi 5 cores.

Issue #13's budget: detect, align, embed and match a gallery of 100, Python included, on emulated Cortex-A72
(the rpi4 build) and Cortex-A76 (the rpi5 build): <= 150 M instructions a frame on the A72, <= 60 M on the
A76. The frame is matplotlib's grace_hopper.jpg (512x600, one face) letterboxed to 640x480 (scaled by 0.8
with INTER_AREA to 410x480, black bars left and right). Each contender is the device pipeline
(``open_face_pipeline`` over a converted face folder, ``scripts/arm/run_frame.py``, one thread) counted by
the TCG plugin (``converters.arm.frame``): per frame = (run of N+1 frames - run of 1 frame) / N, so process
start-up and model loading stay out; the four stages are marked regions, counted the same way.

Contenders: MTCNN (its default smallest face, 20 px, and 40 px), BlazeFace full range on the whole frame and
on tiles too (``blazeface-full-tiled``), as ONNX on onnxruntime and as the ``.tflite`` on LiteRT, and BlazeFace
short range (128x128, made for near faces: counted, but not taken as the answer to the goal), each with the
fp32 folder and the profile's INT8 folder (the face nets static INT8 QDQ in ORT format; BlazeFace stays fp32 in
both: ``benchmarks/blazeface_int8.py``), and BlazeFace full range on LiteRT on a still video with the detector
on one frame in 4 (``face.detect_every = 4``), the followed face keeping its descriptor or described again on
every frame. Each core's cheapest frame also has its two networks counted alone: the floor of the frame.
Folders come from the benchmark caches
(``benchmarks.harness.face_speed_models.build_fp32`` / ``build_int8`` with the default 200 calibration images;
BlazeFace added as ``edge-deploy convert blazeface MODELS --range full`` does, ``with_blazeface`` of that module).

    .venv/bin/python -m benchmarks run arm_frame [--cpus cortex-a72,cortex-a76] [--contenders mtcnn,blazeface-full]
        [--frames 2] [--fresh] [--write]

Resumable: every counted row is kept in ``.cache/bench/arm_frame.json`` and not counted again unless
``--fresh``. Instruction counts, not times: they do not depend on the host's load. A row (four guest runs:
a warm-up, the 1-frame run twice, the N+1-frame run) took 15-60 s of emulation on 2 shared cores; all 54 rows
and the 6 network counts about 30 min at load ~1 (2026-12-06), after the folders are built.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from benchmarks.harness.arm_frames import (
    LITERT_EMBEDDER,
    clip_file,
    folders,
    frame_files,
)
from benchmarks.harness.face_speed_models import CACHE
from benchmarks.harness.report import say
from converters.arm.frame import FrameCost, FrameSetup
from converters.face.blazeface import FULL_RANGE, SHORT_RANGE
from edge.face.track import TILES_EVERY, VIDEO_DETECT_EVERY

NAME = "arm_frame"
SUMMARY = "Instructions per 640x480 one-face frame, whole pipeline, on emulated Pi 4 / Pi 5 cores"
#: the docs/benchmarks.md sections it writes
SECTIONS = ("arm-frame", "arm-frame-defaults")

#: (core, the board build it runs, instructions-a-frame goal), as issue #13 sets them.
CORES = {"cortex-a72": ("rpi4", 150e6), "cortex-a76": ("rpi5", 60e6)}
#: Issue #46's goals for the profiles' defaults on the hand-held camera clip: a frame on average, per core.
CLIP_GOALS = {"cortex-a72": 40e6, "cortex-a76": 25e6}
#: The Pi's clock and instructions per cycle the time estimate assumes (an estimate, not a measurement).
CLOCK_HZ = (1.5e9, 1.8e9)
IPC = (1.5, 2.0)
#: The issue's own count of the fp32 MTCNN frame (grace_hopper letterboxed), to compare with.
ISSUE_MTCNN_FP32 = {"cortex-a72": 931e6, "cortex-a76": 930e6}
STAGES = ("detect", "align", "embed", "match")
#: The .tflite original that ``convert blazeface`` keeps in the folder beside its ONNX translation.
FULL_RANGE_TFLITE = FULL_RANGE.name
FULL_RANGE_ONNX = str(Path(FULL_RANGE.name).with_suffix(".onnx"))
SHORT_RANGE_TFLITE = SHORT_RANGE.name


@dataclass(frozen=True)
class Contender:
    """A pipeline to count: its name, detector, MTCNN's smallest face (None: the default, 20) and the BlazeFace
    file in the folder (None: the ONNX translation models.json names, on onnxruntime)."""

    name: str
    detector: str
    min_face_size: int | None = None
    detector_model: str | None = None
    #: A detector made for near faces only (BlazeFace short range: 18 of the evaluation set's 54 faces,
    #: docs/benchmarks.md ``detector-quality``): counted, but not the answer to the frame goal.
    near_only: bool = False
    #: The detector on one frame in this many, the face followed between (``face.detect_every``,
    #: ``edge.face.track``): a video's average frame, reported beside the goal, not as a frame's answer.
    detect_every: int = 1
    #: The tracker's ``keep_descriptor_within`` (None: its default; 0: every followed face described again).
    keep_descriptor_within: float | None = None
    #: Frames of the hand-held camera clip of the frame's photo (``facedata.camera_clip``), not the still repeated.
    clip: bool = False
    #: The builds counted (None: every one of ``PRECISIONS``; ``PROFILE_BUILD``: the one the core's profile ships).
    builds: tuple[str, ...] | None = None


#: A contender's ``builds`` for "what the core's profile ships": its INT8 folder, with the embedder on LiteRT
#: when the profile's ``runtime.face_formats`` is ``tflite`` (rpi5).
PROFILE_BUILD = ("profile",)


def contender_builds(contender: Contender, profile: str) -> tuple[str, ...]:
    """The builds counted for ``contender`` on the core whose board profile is ``profile``."""
    if contender.builds != PROFILE_BUILD:
        return contender.builds or PRECISIONS
    from edge.profiles import ModelFormats, load_profile

    tflite = load_profile(profile).runtime.face_formats is ModelFormats.TFLITE
    return (LITERT_EMBEDDER,) if tflite else ("int8",)


CONTENDERS = {
    "mtcnn": Contender("MTCNN", "mtcnn"),
    "mtcnn-40": Contender("MTCNN, min face 40", "mtcnn", 40),
    "blazeface-full": Contender("BlazeFace full range", "blazeface-full"),
    "blazeface-full-tiled": Contender("BlazeFace full range tiled", "blazeface-full-tiled"),
    # the same detector's .tflite original on LiteRT (XNNPACK)
    "blazeface-full-litert": Contender("BlazeFace full range, LiteRT", "blazeface-full", None, FULL_RANGE_TFLITE),
    # 128x128, made for faces within ~2 m (selfies, a door camera): what the frame costs with it
    "blazeface-short": Contender("BlazeFace short range", "blazeface", near_only=True),
    "blazeface-short-litert": Contender(
        "BlazeFace short range, LiteRT", "blazeface", None, SHORT_RANGE_TFLITE, near_only=True
    ),
    # a video with face.detect_every = 4: the cheapest whole-frame detector on one frame in 4; on this still
    # frame a followed face's chip does not change, so it keeps its descriptor (no embedder on followed frames)
    "blazeface-full-litert-every4": Contender(
        "BlazeFace full range, LiteRT, detector 1 frame in 4",
        "blazeface-full",
        detector_model=FULL_RANGE_TFLITE,
        detect_every=4,
    ),
    # the same with every followed face described again (keep_descriptor_within = 0): a face whose chip changes
    "blazeface-full-litert-every4-described": Contender(
        "BlazeFace full range, LiteRT, detector 1 frame in 4, every followed face described",
        "blazeface-full",
        detector_model=FULL_RANGE_TFLITE,
        detect_every=4,
        keep_descriptor_within=0.0,
    ),
    # what the rpi4 and rpi5 profiles run by default (issue #46): BlazeFace full range tiled on LiteRT, the
    # profile's INT8 embedder (rpi5: its twin on LiteRT); on a still frame, and on the hand-held clip with
    # face.detect_every's video default
    "defaults": Contender(
        "defaults: BlazeFace full range tiled, LiteRT",
        "blazeface-full-tiled",
        detector_model=FULL_RANGE_TFLITE,
        builds=PROFILE_BUILD,
    ),
    "defaults-clip": Contender(
        f"defaults on the hand-held clip: BlazeFace full range tiled, LiteRT, detector 1 frame in {VIDEO_DETECT_EVERY}",
        "blazeface-full-tiled",
        detector_model=FULL_RANGE_TFLITE,
        detect_every=VIDEO_DETECT_EVERY,
        clip=True,
        builds=PROFILE_BUILD,
    ),
}
#: Each contender by its name (the rows carry names).
BY_NAME = {c.name: c for c in CONTENDERS.values()}
#: Names of the contenders whose detector is for near faces only (left out of the goal verdicts).
NEAR_ONLY = frozenset(c.name for c in CONTENDERS.values() if c.near_only)
#: Names of the contenders counted on the hand-held clip (their goal: ``CLIP_GOALS``).
ON_CLIP = frozenset(c.name for c in CONTENDERS.values() if c.clip)
#: Names of the contenders that follow faces between detector frames, and the contender each is without it.
FOLLOWED = {
    c.name: next(o.name for o in CONTENDERS.values() if o.detect_every == 1 and o.detector_model == c.detector_model
                 and o.detector == c.detector and o.min_face_size == c.min_face_size)
    for c in CONTENDERS.values()
    if c.detect_every > 1
}  # fmt: skip
PRECISIONS = ("fp32", "int8", LITERT_EMBEDDER)


def build_label(profile: str, precision: str) -> str:
    """A row's build as the table names it: ``fp32``, ``rpi4 int8``, ``rpi5 int8, embedder on LiteRT``."""
    if precision == "fp32":
        return "fp32"
    return f"{profile} int8, embedder on LiteRT" if precision == LITERT_EMBEDDER else f"{profile} {precision}"


def precisions(folder: Path) -> str:
    """What a face folder's models.json says each role runs at, grouped: ``"embedder int8; ... fp32"``."""
    from edge.face.models import read_models_folder

    by: dict[str, list[str]] = {}
    for role, entry in read_models_folder(folder).entries.items():
        by.setdefault(entry.precision, []).append(role)
    return "; ".join(f"{', '.join(roles)} {precision}" for precision, roles in sorted(by.items(), reverse=True))


def clip_frames() -> int:
    """N of the clip rows: one whole cycle of the tracker's detector frames, one in ``TILES_EVERY`` of them with
    the tiles (``edge.face.track``)."""
    return TILES_EVERY * VIDEO_DETECT_EVERY


def row_key(cpu: str, contender: str, precision: str) -> str:
    return f"{cpu}/{contender}/{precision}"


def load_rows(path: Path) -> dict[str, FrameCost]:
    """Rows counted by an earlier run (a row is counted once unless ``--fresh``)."""
    if not path.is_file():
        return {}
    return {k: FrameCost.from_dict(v) for k, v in json.loads(path.read_text(encoding="utf-8")).items()}


def save_rows(path: Path, rows: dict[str, FrameCost]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({k: v.to_dict() for k, v in rows.items()}, indent=2) + "\n", encoding="utf-8")


def estimate_ms(instructions: float) -> tuple[float, float]:
    """(fastest, slowest) milliseconds at the Pi's clock and IPC ranges: an estimate, not a measurement."""
    return instructions / (CLOCK_HZ[1] * IPC[1]) * 1e3, instructions / (CLOCK_HZ[0] * IPC[0]) * 1e3


def _m(n: float) -> str:
    return f"{n / 1e6:.1f}"


def table(rows: list[tuple[str, str, FrameCost]]) -> str:
    """One row per (contender, precision, core): per-frame count, its split, NEON share, SDOT, time estimate."""
    lines = [
        "| contender | build | core | faces | M instr. / frame | detect | align | embed | match | other "
        "| NEON % | SDOT+UDOT / frame | est. ms on the Pi | goal |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, precision, c in rows:
        profile, goal = CORES[c.cpu]
        goal = CLIP_GOALS[c.cpu] if name in ON_CLIP else goal
        total = c.per_frame.total
        other = total - sum(c.stages[s].total for s in STAGES)
        fast, slow = estimate_ms(total)
        verdict = "met" if total <= goal else f"**missed** by {_m(total - goal)} M ({total / goal:.1f}x)"
        if name in NEAR_ONLY:
            verdict += " (near faces only)"
        if name in ON_CLIP:
            verdict += f" (the clip's average frame; goal <= {_m(goal)} M)"
        elif name in FOLLOWED:
            verdict += " (a video's average frame)"
        build = build_label(profile, precision)
        split = " | ".join(_m(c.stages[s].total) for s in STAGES)
        lines.append(
            f"| {name} | {build} | {c.cpu} | {c.faces} | **{_m(total)}** | {split} | {_m(other)} | "
            f"{100 * c.per_frame.simd_share:.1f} | {c.per_frame.sdot + c.per_frame.udot:,} | "
            f"{fast:.0f}-{slow:.0f} | {verdict} |"
        )
    return "\n".join(lines)


def cheapest(rows: list[tuple[str, str, FrameCost]], cpu: str) -> tuple[float, str, str, FrameCost]:
    """(instructions a frame, contender, build, cost) of the cheapest row on ``cpu`` that answers the frame goal:
    neither a near-faces-only detector nor a followed video's average (unless only such rows were counted)."""
    mine = [(c.per_frame.total, name, precision, c) for name, precision, c in rows if c.cpu == cpu]
    frame = [m for m in mine if m[1] not in NEAR_ONLY and m[1] not in FOLLOWED] or mine
    return min(frame, key=lambda m: m[0])


def detector_network(contender_name: str) -> str | None:
    """The file of a BlazeFace contender's network as the folder holds it (None for MTCNN's three nets)."""
    contender = BY_NAME[contender_name]
    if contender.detector_model:
        return contender.detector_model
    if contender.detector.startswith("blazeface"):
        spec = FULL_RANGE if contender.detector.startswith("blazeface-full") else SHORT_RANGE
        return str(Path(spec.name).with_suffix(".onnx"))
    return None


def goal_lines(rows: list[tuple[str, str, FrameCost]]) -> list[str]:
    """Per core: the cheapest contender against the goal (met, or missed by how much and where it goes), and
    MTCNN fp32 against the count the issue started from."""
    lines = []
    for cpu, (profile, goal) in CORES.items():
        mine = [(c.per_frame.total, name, precision, c) for name, precision, c in rows if c.cpu == cpu]
        if not mine:
            continue
        close = [m for m in mine if m[1] in NEAR_ONLY]
        video = [m for m in mine if m[1] in FOLLOWED]
        best, name, precision, cost = cheapest(rows, cpu)
        fast, slow = estimate_ms(best)
        if best <= goal:
            verdict = "met"
        else:
            verdict = f"**missed** by {_m(best - goal)} M instructions ({best / goal:.2f}x the budget)"
        build = build_label(profile, precision)
        lines.append(
            f"- {cpu} (goal <= {_m(goal)} M a frame): cheapest is {name}, {build}, {_m(best)} M — {verdict}; "
            f"about {fast:.0f}-{slow:.0f} ms a frame on the Pi (estimate: {CLOCK_HZ[0] / 1e9:.1f}-"
            f"{CLOCK_HZ[1] / 1e9:.1f} GHz, IPC {IPC[0]:.1f}-{IPC[1]:.1f})."
        )
        if best > goal:
            lines.append("  " + _where(cost, goal))
        if close:
            c_best, c_name, c_precision, _ = min(close, key=lambda m: m[0])
            c_build = build_label(profile, c_precision)
            c_verdict = "within" if c_best <= goal else f"{c_best / goal:.2f}x"
            lines.append(
                f"  With a detector for near faces only ({c_name}, {c_build}; it misses most of the evaluation "
                f"set's faces, section `detector-quality`): {_m(c_best)} M, {c_verdict} the budget; not counted "
                "as the answer."
            )
        for followed in dict.fromkeys(m[1] for m in video):
            mine_video = [m for m in video if m[1] == followed]
            lines.append("  " + _video_line(min(mine_video, key=lambda m: m[0]), rows, profile, goal))
        lines += defaults_lines(rows, cpu)
        base = [c.per_frame.total for n, p, c in rows if c.cpu == cpu and n == "MTCNN" and p == "fp32"]
        if base:
            lines.append(
                f"  MTCNN fp32 here: {_m(base[0])} M (the issue counted {_m(ISSUE_MTCNN_FP32[cpu])} M, whole "
                f"process, 3 frames - 1 frame)."
            )
    return lines


def defaults_lines(rows: list[tuple[str, str, FrameCost]], cpu: str) -> list[str]:
    """The profile's defaults on ``cpu`` against issue #46's goals: a still frame (<= 150 M on the A72, reported on
    the A76) and the hand-held clip's average frame (``CLIP_GOALS``), and where a missed one's instructions go."""
    still = CONTENDERS["defaults"].name
    lines = []
    for name, precision, c in rows:
        if c.cpu != cpu or name not in (still, CONTENDERS["defaults-clip"].name):
            continue
        total = c.per_frame.total
        goal = CLIP_GOALS[cpu] if name in ON_CLIP else CORES["cortex-a72"][1] if cpu == "cortex-a72" else None
        what = "a still frame" if name == still else "the hand-held clip, a frame on average"
        build = build_label(CORES[cpu][0], precision)
        if goal is None:
            lines.append(f"  The profile's defaults ({name}, {build}), {what}: {_m(total)} M (reported).")
            continue
        verdict = "met" if total <= goal else f"**missed** by {_m(total - goal)} M ({total / goal:.2f}x)"
        lines.append(
            f"  The profile's defaults ({name}, {build}), {what}: {_m(total)} M against issue #46's <= {_m(goal)} M: "
            f"{verdict}."
        )
        if total > goal:
            lines.append("  " + _where(c, goal))
    return lines


def _video_line(best: tuple, rows: list[tuple[str, str, FrameCost]], profile: str, goal: float) -> str:
    """The cheapest row that follows faces: a video's average frame against the budget, and what its two kinds
    of frame cost (the detector's frame from the same contender's row without following)."""
    total, name, precision, cost = best
    contender = BY_NAME[name]
    every = contender.detect_every
    goal = CLIP_GOALS[cost.cpu] if contender.clip else goal
    verdict = "within the budget" if total <= goal else f"{total / goal:.2f}x the budget"
    if contender.keep_descriptor_within == 0:
        keeps = "every followed face described again by the embedder, as a face whose chip changes is"
    elif contender.clip:
        keeps = "a face keeping its descriptor while its chip holds, on the hand-held clip of the same photo"
    else:
        keeps = "a followed face keeping its descriptor while its chip holds, as on this still frame it does"
    line = (
        f"On a video with `face.detect_every = {every}` (the detector on one frame in {every}, the face followed "
        f"by the shape predictor between, {keeps}: section `face-track`): {name}, {build_label(profile, precision)}, "
        f"{_m(total)} M a frame on average, {verdict}"
    )
    # on the clip the detector's frames keep descriptors too: no still row says what they cost there
    detected = [
        c.per_frame.total
        for n, p, c in rows
        if not contender.clip and c.cpu == cost.cpu and n == FOLLOWED[name] and p == precision
    ]
    if detected:
        followed = (every * total - detected[0]) / (every - 1)
        line += (
            f"; the detector's frame is still {_m(detected[0])} M (row {FOLLOWED[name]}), a followed frame about "
            f"{_m(followed)} M (({every} x {_m(total)} - {_m(detected[0])}) / {every - 1})"
        )
    if detected and detected[0] > goal:
        return line + ". Not a frame's answer: a frame the detector runs on misses the budget as above."
    return line + "."


def _where(cost: FrameCost, goal: float) -> str:
    """Why a frame misses: its stages, and what the budget leaves the detector once the rest is paid."""
    split = ", ".join(f"{s} {_m(cost.stages[s].total)} M" for s in STAGES)
    rest = sum(cost.stages[s].total for s in STAGES if s != "detect")
    if rest >= goal:
        left = f"already {_m(rest - goal)} M over the budget before any detection"
    else:
        detect = _m(cost.stages["detect"].total)
        left = f"which leaves the detector {_m(goal - rest)} M of the budget (it takes {detect} M)"
    return f"Where it goes: {split}; align + embed + match alone are {_m(rest)} M, {left}."


def embedder_key(cpu: str, precision: str, file: str) -> str:
    """Where ``nets`` keeps the embedder network of a build on a core (builds share file names)."""
    return f"{cpu}/{precision}/{file}"


def network_lines(nets: dict[str, dict], rows: list[tuple[str, str, FrameCost]]) -> list[str]:
    """The networks alone per core and backend: BlazeFace full range (how much of the detect stage it is), and
    the two networks of each core's cheapest frame (what the frame costs before any Python runs)."""
    if not nets:
        return []
    lines = [
        "",
        "The networks alone (`scripts/arm/run_model.py`, steady state, seeded random input of the network's "
        "shape and type, no pre- or post-processing): BlazeFace full range, and the embedder each core's "
        "cheapest frame runs:",
        "",
        "| file | build | backend | core | M instr. | NEON % | SDOT+UDOT |",
        "|---|---|---|---|---:|---:|---:|",
    ]
    for n in nets.values():
        total, simd = n["steady"]["total"], n["steady"]["simd"]
        build = build_label(CORES[n["cpu"]][0], n["build"]) if "build" in n else "fp32"
        lines.append(
            f"| `{n['model']}` | {build} | {n['backend']} | {n['cpu']} | {_m(total)} | {100 * simd / total:.1f} | "
            f"{_dots(n):,} |"
        )
    lines.append("")
    for name, precision, c in rows:
        net = nets.get(f"{c.cpu}/{FULL_RANGE_ONNX}")
        if name == CONTENDERS["blazeface-full"].name and precision == "fp32" and net:
            detect, inner = c.stages["detect"].total, net["steady"]["total"]
            lines.append(
                f"- {c.cpu}: BlazeFace full range's detect stage is {_m(detect)} M, the ONNX network "
                f"{_m(inner)} M of it; the other {_m(detect - inner)} M is the Python and numpy around it "
                "(letterbox, anchor decoding, weighted NMS)."
            )
    lines += floor_lines(nets, rows)
    return lines


def _dots(net: dict) -> int:
    """The dot-product instructions (SDOT + UDOT) of one inference of a network counted alone."""
    return int(net["steady"].get("sdot", 0) + net["steady"].get("udot", 0))


def floor_lines(nets: dict[str, dict], rows: list[tuple[str, str, FrameCost]]) -> list[str]:
    """Per core, the cheapest frame's detector and embedder networks alone against the budget: the floor that
    no work on the Python around them can go below."""
    lines = []
    for cpu, (profile, goal) in CORES.items():
        if not any(c.cpu == cpu for _, _, c in rows):
            continue
        total, name, precision, _ = cheapest(rows, cpu)
        detector = detector_network(name)
        det = nets.get(f"{cpu}/{detector}") if detector else None
        emb = next((n for k, n in nets.items() if k.startswith(f"{cpu}/{precision}/")), None)
        if det is None or emb is None:
            continue
        a, b = det["steady"]["total"], emb["steady"]["total"]
        if a + b > goal:
            verdict = f"over the {_m(goal)} M budget by {_m(a + b - goal)} M before any Python or numpy runs"
        else:
            verdict = f"within the {_m(goal)} M budget, leaving {_m(goal - a - b)} M for the rest of the frame"
        lines.append(
            f"- {cpu}: the cheapest frame ({name}, {build_label(profile, precision)}, {_m(total)} M) runs two "
            f"networks; alone they are {_m(a + b)} M (the detector `{det['model']}` {_m(a)} M + the embedder "
            f"`{emb['model']}` {_m(b)} M): {verdict}; the Python and numpy around them (letterbox, decoding, "
            f"alignment, matching, the loop) are the other {_m(total - a - b)} M."
        )
        if dots := _dots(emb):
            lines.append(
                f"  Of the embedder's {_m(b)} M, {_m(dots)} M are SDOT/UDOT, each 16 int8 multiply-adds, the most one "
                f"instruction does on {cpu} (Armv8.2: no I8MM): that network cannot run on fewer than {_m(dots)} M "
                "instructions on this core; only a network of fewer multiply-adds could."
            )
    return lines


SECTION_HEAD = """## The frame on ARM: instructions per 640x480 one-face frame, emulated Cortex-A72 / A76 (Pi 4 / 5)

The whole device pipeline, Python included (`open_face_pipeline`, one thread, OpenCV's too: detect,
align, embed, match a gallery of 100), on matplotlib's grace_hopper letterboxed to 640x480 (one face), counted by
the TCG plugin (`scripts/arm/insncount.c`) under qemu-user: per frame = (whole run of {n1} frames - whole run of 1
frame) / {n}{cycles}, so start-up, imports and model loading stay out. The stages are marked regions counted the
same way; "other" is what the frame executes outside them (the loop and the marks' syscalls, ~{marks:.0f} k
instructions a frame{bookkeeping}). NEON % and SDOT+UDOT are of the whole frame. The INT8 build is the rpi4
profile's on the A72 and the rpi5 profile's on the A76, as `quantize_face_models` ships it (static QDQ, ORT format;
see below); the "embedder on LiteRT" rows run that folder with its embedder's full-integer TFLite twin on LiteRT
instead (models.json `embedder_runtime`, as `convert face --format tflite` ships it; the twin converted by onnx2tf
from the same fp32 ONNX, calibrated on the same images). BlazeFace runs its ONNX translation (models.json's
`detector.blazeface*`) on onnxruntime, or, in the LiteRT rows, the `.tflite` original that `convert blazeface` lists
beside it (`tflite.detector.blazeface*`), on LiteRT (XNNPACK): what a BlazeFace folder of the rpi4 and rpi5 profiles
runs (`runtime.face_detector_runtime = "litert"`, models.json `detector_runtime`), by these rows; the tiled rows
run `DEFAULT_TILING`: this 640-pixel frame reaches its `min_side` ({tile_min}), but its one face is wide enough at
the network's input that the tiles are not cued (`Tiling.cued`); the short-range rows run MediaPipe's 128x128
BlazeFace, made for faces within about 2 m of the camera (it finds this frame's face, but few of the evaluation
photos': section `detector-quality`), so the verdicts below leave them out. The rows `detector 1 frame in 4` run
the frames through `edge.face.track.FaceTracker` as `serve` runs a
video with `face.detect_every = 4` (the stages there are the pipeline's calls the tracker makes): a video's average
frame, which the verdicts report apart. On this still frame a followed face's chip does not change, so it keeps its
descriptor and the embedder runs on the detector's frames only (`face.keep_descriptor_within`); the rows `every
followed face described` run the embedder on every frame, as for a face whose chip changes (a turning head). The
rows `defaults` run what the rpi4 and rpi5 profiles ship (BlazeFace full range tiled on LiteRT, the profile's INT8
embedder: on onnxruntime for rpi4, its TFLite twin on LiteRT for rpi5), on the still frame and, `on the hand-held
clip`, on {clip_frames} frames of the same photo
filmed by a hand-held camera (`facedata.camera_clip`: it pans, zooms and turns a little each frame) with
`face.detect_every`'s video default ({every}): per frame = (run of {clip_frames} frames - run of 1) / {clip_n}, one
whole cycle of the tracker (the detector on one frame in {every}, with its tiles on one detector frame in
{tiles_every} and the whole-frame pass alone on the others, `edge.face.track.TILES_EVERY`); their goals
(issue #46): the still frame <= 150 M on the A72, the clip <= {clip72:.0f} M a frame on average on the A72 and <=
{clip76:.0f} M on the A76. The time is an estimate at the Pi's clock ({c0:.1f}-{c1:.1f} GHz) for an IPC
of {i0:.1f}-{i1:.1f}, not a measurement. Goals (issue #13): <= 150 M instructions a frame on the A72, <= 60 M on the
A76. Levers measured beyond what ships: section `arm-frame-levers` (cheaper letterbox resamplers, fp16 on the A76)
and section `blazeface-int8` (INT8 BlazeFace on onnxruntime and on LiteRT: faces kept, and instructions against the
shipped file). Machine: {machine} (instruction counts of the emulated cores: the host's CPU features do not enter
them).

{builds}
"""


DEFAULTS_HEAD = """## The profiles' defaults on ARM: instructions per 640x480 frame, emulated Cortex-A72 / A76

What `convert face --target rpi4` / `rpi5` ships with no options (BlazeFace full range tiled on LiteRT, cued:
`edge.face.tiles`; the profile's INT8 embedder: on onnxruntime for rpi4, its TFLite twin on LiteRT for rpi5), counted
as section `arm-frame` counts its rows:
the still frame (grace_hopper letterboxed to 640x480, one face), per frame = (run of {n1} frames - run of 1) / {n};
the hand-held clip (`facedata.camera_clip`, {clip_frames} frames) through `edge.face.track.FaceTracker` with
`face.detect_every`'s video default ({every}), per frame = (run of {clip_frames} frames - run of 1) / {clip_n}.
Goals (issue #46): the still frame <= 150 M on the A72 (the A76 reported), the clip <= {clip72:.0f} M a frame on
average on the A72 and <= {clip76:.0f} M on the A76; the table's goal column holds the still frame to issue #13's
budgets (150 M on the A72, 60 M on the A76). These rows only (`--write-defaults`): section `arm-frame` holds every
contender. Machine: {machine} (instruction counts of the emulated cores: the host's CPU features do not enter
them).
"""


def defaults_section(rows: list[tuple[str, str, FrameCost]], command: str) -> str:
    """The ``arm-frame-defaults`` section: the profiles' default rows, their verdicts and their table."""
    from benchmarks.harness.report import machine_line

    mine = [r for r in rows if r[0] in (CONTENDERS["defaults"].name, CONTENDERS["defaults-clip"].name)]
    still = [c.frames for n, _, c in mine if n not in ON_CLIP] or [2]
    head = DEFAULTS_HEAD.format(
        n1=still[0] + 1, n=still[0], clip_frames=clip_frames() + 1, clip_n=clip_frames(), every=VIDEO_DETECT_EVERY,
        clip72=CLIP_GOALS["cortex-a72"] / 1e6, clip76=CLIP_GOALS["cortex-a76"] / 1e6, machine=machine_line(),
    )  # fmt: skip
    cores = sorted({c.cpu for _, _, c in mine})
    verdicts = [f"- {cpu}:\n" + "\n".join(defaults_lines(mine, cpu)) for cpu in cores]
    return "\n".join([head, *verdicts, "", table(mine), "", f"`{command}`"])


def _builds(builds: dict[str, str]) -> str:
    """One line per distinct INT8 build content: which builds, and what runs at which precision."""
    same: dict[str, list[str]] = {}
    for build, what in builds.items():
        same.setdefault(what, []).append(build)
    return "\n".join(f"INT8 build ({' and '.join(b)}), as models.json records it: {w}." for w, b in same.items())


def section(rows: list[tuple[str, str, FrameCost]], nets: dict[str, dict], builds: dict[str, str], command: str) -> str:
    """The doc section: how it was counted, the goal verdicts, the table, the networks alone, the repeat noise,
    the command.

    ``nets``: ``ModelCost.to_dict()`` of the BlazeFace files by ``core/file``; ``builds``: per INT8 build
    (``"rpi4 int8"``), what runs at which precision (``precisions``).
    """
    from benchmarks.harness.report import machine_line
    from edge.face.tiles import DEFAULT_TILING

    frames = min(c.frames for _, _, c in rows)
    marks = max(8 * c.marks.total for _, _, c in rows) / 1e3
    video = sorted({c.frames for n, _, c in rows if n in FOLLOWED})
    cycles = bookkeeping = ""
    if video:
        cycles = (
            f" ({' / '.join(f'{v + 1} and {v}' for v in video)} in the rows that follow the face between detector "
            "frames: whole cycles of the detector's frame and the followed ones, the frame repeated as a still video)"
        )
        bookkeeping = "; in those rows also the tracker's own work between the pipeline's calls"
    head = SECTION_HEAD.format(
        n1=frames + 1, n=frames, marks=marks, builds=_builds(builds), tile_min=DEFAULT_TILING.min_side,
        cycles=cycles, bookkeeping=bookkeeping, every=VIDEO_DETECT_EVERY, clip_frames=clip_frames() + 1,
        clip_n=clip_frames(), tiles_every=TILES_EVERY,
        clip72=CLIP_GOALS["cortex-a72"] / 1e6, clip76=CLIP_GOALS["cortex-a76"] / 1e6,
        c0=CLOCK_HZ[0] / 1e9, c1=CLOCK_HZ[1] / 1e9, i0=IPC[0], i1=IPC[1], machine=machine_line(),
    )  # fmt: skip
    noise = [c.repeat_noise for _, _, c in rows if c.repeat_noise is not None]
    tail = [""]
    if noise:
        tail.append(
            f"Repeat noise: two identical 1-frame runs differed by at most {max(noise):,} instructions in total "
            f"(at most {max(noise) / frames:,.0f} in a per-frame figure)."
        )
    body = [head, *goal_lines(rows), "", table(rows), *network_lines(nets, rows), *tail]
    return "\n".join([*body, "", f"`{command}`"])


def count_networks(
    guest, dirs: dict[str, Path], rows: list[tuple[str, str, FrameCost]], nets: dict[str, dict], path: Path
) -> None:
    """On the guest's core, unless ``nets`` has them: the BlazeFace full-range network alone (ONNX on
    onnxruntime, the .tflite on LiteRT), and the detector and embedder networks of the core's cheapest frame
    (the embedder file its build's models.json says the device runs); kept in ``path``."""
    from converters.arm.cost import measure_model
    from edge.face.models import read_models_folder

    cpu = guest.cpu.value

    def count(key: str, model: Path, **extra: str) -> None:
        if key not in nets:
            say(f"counting the network {model.name} alone on {cpu}")
            nets[key] = {**measure_model(guest, model, k=2).to_dict(), **extra}
            path.write_text(json.dumps(nets, indent=2) + "\n", encoding="utf-8")

    for name in (FULL_RANGE_ONNX, FULL_RANGE_TFLITE):
        count(f"{cpu}/{name}", dirs["fp32"] / name)
    _, best, precision, _ = cheapest(rows, cpu)
    detector = detector_network(best)
    if detector is None:
        return
    count(f"{cpu}/{detector}", dirs["fp32"] / detector)
    face = read_models_folder(dirs[precision])
    embedder = face.model_path(face.embedder_role)
    count(embedder_key(cpu, precision, embedder.name), embedder, build=precision)


def count_core(
    cpu: str, names: list[str], args, done: dict[str, FrameCost], builds: dict[str, str]
) -> list[tuple[str, str, FrameCost]]:
    """Every contender, fp32 and INT8, on one core; rows already counted are taken from ``done``. What the
    core's INT8 build runs at which precision goes into ``builds``."""
    from converters.arm.frame import measure_frame
    from converters.arm.guest import prepare_guest

    profile = CORES[cpu][0]
    dirs = folders(profile, say, {b for n in names for b in contender_builds(CONTENDERS[n], profile)})
    builds[f"{profile} int8"] = precisions(dirs["int8"])
    frame, gallery = frame_files(CACHE / "arm-frame")
    clip = clip_file(CACHE / "arm-frame", clip_frames() + 1)
    guest = prepare_guest(cpu, args.rootfs, progress=say)
    rows = []
    for key in names:
        contender = CONTENDERS[key]
        for precision in contender_builds(contender, profile):
            k = row_key(cpu, key, precision)
            if k not in done:
                say(f"counting {contender.name} {precision} ({dirs[precision].name}) on {cpu}")
                setup = FrameSetup(
                    dirs[precision], contender.detector, contender.min_face_size, contender.detector_model,
                    contender.detect_every, contender.keep_descriptor_within,
                )  # fmt: skip
                # whole cycles of the detector's frame and the followed ones (on the clip: of the tiles too)
                frames = args.frames if contender.detect_every == 1 else 2 * contender.detect_every
                frames = clip_frames() if contender.clip else frames
                done[k] = measure_frame(guest, setup, clip if contender.clip else frame, gallery, frames)
                save_rows(args.json, done)
                say(f"  {_m(done[k].per_frame.total)} M instructions a frame, {done[k].faces} face(s)")
            rows.append((contender.name, precision, done[k]))
    if args.networks:
        count_networks(guest, dirs, rows, args.nets, nets_file(args.json))
    return rows


def nets_file(rows_file: Path) -> Path:
    """Where the networks-alone counts are kept, beside the rows."""
    return rows_file.with_name(rows_file.stem + "_nets.json")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpus", default="cortex-a72,cortex-a76")
    parser.add_argument("--contenders", default=",".join(CONTENDERS), help=f"comma list of {', '.join(CONTENDERS)}")
    parser.add_argument("--frames", type=int, default=2, help="N: per frame = (N+1 frames - 1 frame) / N")
    parser.add_argument("--json", type=Path, default=CACHE / "arm_frame.json", help="counted rows, kept")
    parser.add_argument("--rootfs", type=Path, default=None, help="arm64 rootfs (default .cache/arm/rootfs)")
    parser.add_argument("--no-networks", dest="networks", action="store_false", help="skip the networks alone")
    parser.add_argument("--fresh", action="store_true", help="count again the rows --json already has")
    parser.add_argument("--write", action="store_true", help="write the 'arm-frame' section of docs/benchmarks.md")
    parser.add_argument(
        "--write-defaults", action="store_true",
        help="write only the 'arm-frame-defaults' section (the profiles' default rows; counts only those contenders)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    from converters.arm.cost import build_plugin

    if args.write_defaults:
        args.contenders, args.networks = "defaults,defaults-clip", False
    names = [n.strip() for n in args.contenders.split(",") if n.strip()]
    unknown = [n for n in names if n not in CONTENDERS]
    if unknown:
        parser.error(f"unknown contenders {unknown}; expected some of {', '.join(CONTENDERS)}")
    build_plugin()
    done = {} if args.fresh else load_rows(args.json)
    nets = nets_file(args.json)
    args.nets = json.loads(nets.read_text(encoding="utf-8")) if nets.is_file() and not args.fresh else {}
    rows: list[tuple[str, str, FrameCost]] = []
    builds: dict[str, str] = {}
    for cpu in [c.strip() for c in args.cpus.split(",") if c.strip()]:
        rows += count_core(cpu, names, args, done, builds)
        print(table(rows), file=sys.stderr, flush=True)
    command = "python -m benchmarks run arm_frame " + " ".join(argv if argv is not None else sys.argv[1:])
    if args.write_defaults:
        from benchmarks.harness.report import write_section

        markdown = defaults_section(rows, command.strip())
        print(markdown)
        print(f"wrote {write_section('arm-frame-defaults', markdown)}", file=sys.stderr)
        return 0
    markdown = section(rows, args.nets if args.networks else {}, builds, command.strip())
    print(markdown)
    if args.write:
        from benchmarks.harness.report import write_section

        print(f"wrote {write_section('arm-frame', markdown)}", file=sys.stderr)
    return 0
