"""The main job's recognition check with each face detector: faces found and named in the demo's 18 views.

`edge-deploy demo` enrolls one photo per person and names every face in 18 seeded views of the shipped photos
(``converters.demo.host.run_face_demo``) with the detector the profile names (``runtime.face_detector``). This
runs that check on the rpi4 INT8 face folder (the one arm_frame counts, from the benchmark cache, BlazeFace
added) once per detector, on this host, and counts what face_recognition's own detector (dlib's HOG, one
upsample) finds in the same views: the numbers a profile's choice of detector rests on. Its cost on the Pi's
cores is section ``arm-frame``.

    .venv/bin/python -m benchmarks run demo_detectors [--write]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from benchmarks.harness.report import machine_line, say, write_section

NAME = "demo_detectors"
SUMMARY = "The demo's recognition check with each face detector"
#: the docs/benchmarks.md sections it writes
SECTIONS = ("demo-detectors",)

DETECTORS = ("mtcnn", "blazeface-full", "blazeface-full-tiled")
PROFILE = "rpi4"


def ours(folder: Path, detector: str, work: Path) -> dict:
    """The demo's counts with ``detector`` (``DemoResult.counts``)."""
    from converters.demo.host import run_face_demo

    return run_face_demo(folder, work / detector, threads=1, detector=detector).counts


def hog_counts() -> dict | None:
    """dlib's HOG (face_recognition's detector) on the demo's views: annotated faces it boxes, and the rest."""
    from benchmarks.harness.detectors import hog_contender
    from converters.demo.host import DEMO_SEED
    from converters.face.boxes import match_boxes
    from converters.face.facedata import make_eval_images

    hog = hog_contender()
    if hog is None:
        return None
    views = [im for im in make_eval_images(seed=DEMO_SEED) if not im.name.endswith("/original")]
    annotated = found = extra = 0
    for image in views:
        boxes = hog.detect(image.rgb)
        matched = len(match_boxes([f.box for f in image.faces], boxes))
        annotated, found, extra = annotated + len(image.faces), found + matched, extra + len(boxes) - matched
    return {"images": len(views), "annotated_faces": annotated, "found": found, "extra_detections": extra}


def measure() -> dict:
    from benchmarks.harness.arm_frames import folders

    folder = folders(PROFILE, say)["int8"]
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for detector in DETECTORS:
            say(f"the demo's check with {detector}")
            rows[detector] = ours(folder, detector, Path(tmp))
    say("dlib's HOG on the same views")
    return {"machine": machine_line(), "folder": folder.name, "ours": rows, "hog": hog_counts()}


def markdown(result: dict) -> str:
    lines = [
        "## The demo's check with each face detector",
        "",
        "`.venv/bin/python -m benchmarks run demo_detectors` — `edge-deploy demo`'s recognition check "
        "(`converters.demo.host.run_face_demo`: a gallery of one crop per person, one person held out, then "
        "every face of 18 seeded views of the shipped photos named) run with each detector on the "
        f"{PROFILE} INT8 face folder, one thread, on this host. found = a detection overlapping an annotated "
        "face (IoU >= 0.3), extra = one overlapping none; each detector at its own cut-off (MTCNN 0.9, "
        f"BlazeFace MediaPipe's 0.6). Machine: {result['machine']}.",
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
    if hog is not None:
        lines.append(
            f"| dlib HOG, upsample 1 (face_recognition's; not named here) | {hog['annotated_faces']} "
            f"| {hog['found']} | | | {hog['extra_detections']} |"
        )
    mtcnn = result["ours"]["mtcnn"]
    best = max((c for name, c in result["ours"].items() if name != "mtcnn"), key=lambda c: c["found"])
    if best["found"] < mtcnn["found"]:
        lines += [
            "",
            f"Every BlazeFace variant finds fewer of the demo's faces than MTCNN ({best['found']} at best, MTCNN "
            f"{mtcnn['found']} of {mtcnn['annotated_faces']}), so the Pi profiles name `mtcnn` "
            "(`runtime.face_detector`); a BlazeFace one is one line of the profile away, and costs a fraction "
            "of MTCNN's instructions a frame on the Pi's cores (section `arm-frame`).",
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
