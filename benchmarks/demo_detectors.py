"""The main job's recognition check with each face detector: faces found and named in the demo's 18 views.

`edge-deploy demo` enrolls one photo per person and names every face in 18 seeded views of the shipped photos
(``converters.demo.host.run_face_demo``) with the detector the profile names (``runtime.face_detector``), and
counts what face_recognition's own detector (dlib's HOG, one upsample) finds in the same views. This runs that
check on the rpi4 INT8 face folder (the one arm_frame counts, from the benchmark cache, BlazeFace added) once
per detector, on this host: the numbers a profile's choice of detector rests on. Its cost on the Pi's cores is
section ``arm-frame``.

    .venv/bin/python -m benchmarks run demo_detectors [--write]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from benchmarks.harness.report import machine_line, say, write_section
from edge.face.tiles import DEFAULT_TILING

NAME = "demo_detectors"
SUMMARY = "The demo's recognition check with each face detector"
#: the docs/benchmarks.md sections it writes
SECTIONS = ("demo-detectors",)

DETECTORS = ("mtcnn", "blazeface-full", "blazeface-full-tiled")
PROFILE = "rpi4"


def measure() -> dict:
    from benchmarks.harness.arm_frames import folders
    from converters.demo.host import demo_views, reference_counts, run_face_demo
    from edge.profiles import load_profile

    folder = folders(PROFILE, say)["int8"]
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for detector in DETECTORS:
            say(f"the demo's check with {detector}")
            rows[detector] = run_face_demo(folder, Path(tmp) / detector, threads=1, detector=detector).counts
    say("face_recognition's detector (dlib's HOG) on the same views")
    return {
        "machine": machine_line(),
        "folder": folder.name,
        "default": load_profile(PROFILE).runtime.face_detector.value,
        "ours": rows,
        "hog": reference_counts(demo_views()),
    }


def markdown(result: dict) -> str:
    lines = [
        "## The demo's check with each face detector",
        "",
        "`.venv/bin/python -m benchmarks run demo_detectors` — `edge-deploy demo`'s recognition check "
        "(`converters.demo.host.run_face_demo`: a gallery of one crop per person, one person held out, then "
        "every face of 18 seeded views of the shipped photos named) run with each detector on the "
        f"{PROFILE} INT8 face folder, one thread, on this host. found = a detection overlapping an annotated "
        "face (IoU >= 0.3), extra = one overlapping none; each detector at its own cut-off (MTCNN 0.9, "
        "BlazeFace MediaPipe's 0.6; `tiled` also takes a second look at candidates from "
        f"{DEFAULT_TILING.look_score}, `edge.face.tiles`). "
        f"Machine: {result['machine']}.",
        "",
        "| detector | annotated faces | found | named correctly | wrong name | extra detections |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, c in result["ours"].items():
        lines.append(
            f"| {name} | {c['annotated_faces']} | {c['found']} | {c['named_correctly']} | {c['wrong_name']} "
            f"| {c['extra_detections']} |"
        )
    hog = result["hog"]
    lines.append(
        f"| dlib HOG, upsample 1 (face_recognition's; not named here) | {hog['annotated_faces']} "
        f"| {hog['found']} | | | {hog['extra_detections']} |"
    )
    default = result["default"]
    if default in result["ours"]:
        c = result["ours"][default]
        met = c["found"] >= hog["found"] and c["wrong_name"] == 0
        lines += [
            "",
            f'{PROFILE}\'s default detector (`runtime.face_detector = "{default}"`) finds {c["found"]} of the '
            f"{c['annotated_faces']} faces, face_recognition's {hog['found']}, and names {c['wrong_name']} wrong: "
            f"the demo's check {'passes' if met else '**fails**'} on it (no face named wrong, no fewer found than "
            "face_recognition). Its cost a frame on the Pi's cores: section `arm-frame`.",
        ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=None, help="write the counts here too")
    parser.add_argument("--write", action="store_true", help="write the 'demo-detectors' section of docs/benchmarks.md")
    args = parser.parse_args(argv)
    result = measure()
    text = markdown(result)
    print(text)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    if args.write:
        print(f"wrote {write_section('demo-detectors', text)}", file=sys.stderr)
    return 0
