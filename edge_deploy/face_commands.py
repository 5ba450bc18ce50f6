"""Face subcommands: ``face enroll``, ``face recognize`` (device side) and ``demo`` (host, the main job)."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

from edge.errors import InputError
from edge.face.models import Detector
from edge.face.types import DLIB_SAME_PERSON_THRESHOLD
from edge.profiles import DEFAULT_PROFILE_DIR
from edge_deploy.common import print_json


def _threads(args: argparse.Namespace) -> int:
    from edge.daemon.config import MAX_THREADS
    from edge.runtime import default_threads

    if args.threads is not None and not 1 <= args.threads <= MAX_THREADS:
        raise InputError(f"--threads {args.threads}; expected a whole number in 1..{MAX_THREADS}")
    return args.threads or default_threads()


def _max_pixels() -> int:
    """This board's image limit (its profile's memory), or the default off a known board."""
    from edge.board import detect_board
    from edge.imageio import DEFAULT_MAX_PIXELS

    profile = detect_board().profile
    return profile.memory.max_image_pixels if profile else DEFAULT_MAX_PIXELS


def _check_output(path: Path) -> Path:
    """Refuse a gallery path that can't be written, before the work (a folder, a missing parent)."""
    if path.is_dir():
        raise InputError(f"--output {path}: is a folder; expected a gallery file to write, e.g. {path / 'gallery.npz'}")
    if not path.parent.is_dir():
        raise InputError(f"--output {path}: folder {path.parent} does not exist; create it first")
    return path


def _check_thresholds(args: argparse.Namespace) -> None:
    if args.threshold is not None and not (math.isfinite(args.threshold) and 0 < args.threshold <= 2):
        raise InputError(f"--threshold {args.threshold}; expected a descriptor distance in (0, 2]")
    if args.min_score is not None and not (math.isfinite(args.min_score) and 0 <= args.min_score <= 1):
        raise InputError(f"--min-score {args.min_score}; expected a detection score in [0, 1]")


def _cmd_enroll(args: argparse.Namespace) -> int:
    from edge.face.gallery import Gallery
    from edge.face.models import open_face_pipeline

    output = _check_output(Path(args.output))
    with open_face_pipeline(Path(args.models), _threads(args), detector=args.detector) as pipeline:
        gallery = Gallery(pipeline.embedder.descriptor_size)
        report = gallery.enroll_folder(Path(args.photos), pipeline, _max_pixels())
    out = gallery.save(output)
    data = {"gallery": str(out), "enrolled": report.enrolled, "skipped": report.skipped}
    if args.json:
        print_json(data)
        return 0
    for name, count in report.enrolled.items():
        print(f"enrolled {name}: {count} photo(s)")
    for path, reason in report.skipped:
        print(f"skipped {path}: {reason}")
    print(f"gallery: {out} ({len(gallery.names)} people)")
    return 0


def _recognize_all(args: argparse.Namespace) -> list[dict]:
    """One entry per image: its faces, or the error that image gave (the others are still analysed)."""
    from edge.errors import EdgeDeployError
    from edge.face.gallery import Gallery
    from edge.face.models import default_min_score, folder_detector, open_face_pipeline
    from edge.face.recognize import recognize_image
    from edge.imageio import load_image

    results: list[dict[str, Any]] = []
    limit = _max_pixels()
    min_score = args.min_score
    if min_score is None:
        detector = folder_detector(Path(args.models)) if args.detector is None else Detector(args.detector)
        min_score = default_min_score(detector)
    with open_face_pipeline(Path(args.models), _threads(args), detector=args.detector) as pipeline:
        gallery = Gallery.load(Path(args.gallery), pipeline.embedder.descriptor_size)
        for image in args.images:
            try:
                rgb = load_image(Path(image), limit)
                faces = recognize_image(pipeline, gallery, rgb, args.threshold, min_score)
            except EdgeDeployError as exc:  # one bad image does not throw away the others' results
                results.append({"image": str(image), "error": str(exc)})
                continue
            results.append({"image": str(image), "faces": faces})
    return results


def _cmd_recognize(args: argparse.Namespace) -> int:
    _check_thresholds(args)
    results = _recognize_all(args)
    if args.json:
        print_json(results)
    else:
        for r in results:
            if "error" in r:
                print(f"{r['image']}: error: {r['error']}")
                continue
            print(f"{r['image']}: {len(r['faces'])} face(s)")
            for f in r["faces"]:
                x1, y1, x2, y2 = f["box"]
                who = f["name"] or "unknown"
                print(f"  {who:20} distance {f['distance']:.3f}  box ({x1:.0f},{y1:.0f})-({x2:.0f},{y2:.0f})")
    failed = [r for r in results if "error" in r]
    if failed:
        raise InputError(f"{len(failed)} of {len(results)} images could not be analysed; first: {failed[0]['error']}")
    return 0


def add_face(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "face",
        help="enroll people and recognise faces with converted face models (device side)",
        description="Run the face pipeline (MTCNN or BlazeFace detect -> 5-point alignment -> dlib ResNet "
        "descriptor, or your own embedder's from 'convert face --embedder' -> nearest gallery entry) on images, "
        "with models written by 'edge-deploy convert face'.",
    )
    fsub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--threads", type=int, help="intra-op threads (default: all CPUs this process may use)")
    common.add_argument("--json", action="store_true", help="machine-readable output")
    common.add_argument(
        "--detector",
        choices=[d.value for d in Detector],
        help="face detector (default: the models folder's, models.json 'detector', else mtcnn); BlazeFace needs "
        "its models.json role, added on the host by 'edge-deploy convert blazeface MODELS' (--range full for "
        "blazeface-full and blazeface-full-tiled: the full-range detector on the whole frame and on overlapping "
        "tiles of a frame of 576 pixels or more; --default-detector makes it the folder's)",
    )

    e = fsub.add_parser(
        "enroll",
        parents=[common],
        help="build a gallery from a folder with one sub-folder of photos per person",
        description="Enroll every person of PHOTOS (PHOTOS/<name>/*.jpg, the largest face of each photo). "
        "Photos without a face are listed as skipped, not fatal.",
        epilog="example: edge-deploy face enroll out/face people/ -o out/gallery.npz",
    )
    e.add_argument("models", help="models folder (from: edge-deploy convert face)")
    e.add_argument("photos", help="folder with one sub-folder per person")
    e.add_argument("--output", "-o", required=True, help="gallery file to write (.npz)")
    e.set_defaults(func=_cmd_enroll)

    r = fsub.add_parser(
        "recognize",
        parents=[common],
        help="name every face in images against a gallery",
        description="Detect, align and describe every face, and name it after the nearest gallery person when "
        "the descriptor distance is below --threshold (default: the models folder's: dlib's "
        f"{DLIB_SAME_PERSON_THRESHOLD}, or the one 'convert face --embedder' calibrated); else 'unknown'.",
        epilog="example: edge-deploy face recognize out/face group.jpg --gallery out/gallery.npz --json",
    )
    r.add_argument("models", help="models folder (from: edge-deploy convert face)")
    r.add_argument("images", nargs="+", help="image files (JPEG, PNG, ...)")
    r.add_argument("--gallery", "-g", required=True, help="gallery file (from: edge-deploy face enroll)")
    r.add_argument(
        "--threshold",
        type=float,
        help=f"same-person distance (default: models.json's recognition.threshold, else dlib's "
        f"{DLIB_SAME_PERSON_THRESHOLD})",
    )
    r.add_argument(
        "--min-score",
        type=float,
        help="ignore weaker detections (default: 0.9 with MTCNN, BlazeFace's own 0.5 / 0.6 otherwise)",
    )
    r.set_defaults(func=_cmd_recognize)


def _cmd_demo(args: argparse.Namespace) -> int:
    from converters.demo.host import run_main_job
    from edge.profiles import load_profile
    from edge.progress import StepProgress
    from edge_deploy.device_commands import broker_config

    profile = load_profile(args.target, Path(args.profiles))
    progress = StepProgress(stream=None if args.json else sys.stderr)
    broker = None if args.no_broker else broker_config(args)
    result = run_main_job(
        profile,
        Path(args.output),
        Path(args.cache),
        broker=broker,
        emulate=not args.no_emulation,
        threads=args.threads,
        progress=progress,
    )
    if args.json:
        print_json(result.to_dict())
    else:
        print(result.summary())
    return 0 if result.passed else 5


def add_demo(sub: argparse._SubParsersAction) -> None:
    from edge_deploy.device_commands import add_broker_options

    p = sub.add_parser(
        "demo",
        help="the main job: build + verify the Pi bundle, recognise faces, run it on an emulated Pi, report",
        description="End to end on the real photos shipped in Python packages: build the --target face "
        "bundle (convert, check against the sources, quantize behind the accuracy gate, aarch64 wheelhouse; "
        "cached), verify it; enroll one photo per person into a gallery (one person is held out to show "
        "'unknown') and recognise every face in other views of those people (seeded pose, scale, light, blur "
        "and JPEG changes) on this host; then install the bundle's wheels into an emulated Pi (qemu-user, "
        "the profile's core), run the bundle's pipeline there, compare it with the host, and report its "
        "latency over MQTT (to --broker, default the local 127.0.0.1:1883; kept in the outbox when no broker "
        "answers). Writes everything under --output.",
    )
    p.add_argument("--target", "-t", default="rpi4", help="target profile (default rpi4)")
    p.add_argument("--output", "-o", default="out/demo", help="output folder (default out/demo)")
    p.add_argument("--cache", default=str(Path.home() / ".cache" / "edge-deploy" / "build"), help="build cache")
    p.add_argument("--threads", type=int, help="inference threads on this host (default: all CPUs)")
    p.add_argument("--no-emulation", action="store_true", help="skip the emulated-Pi run (and its telemetry)")
    p.add_argument("--no-broker", action="store_true", help="don't try a broker: telemetry stays in the outbox")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--profiles", default=str(DEFAULT_PROFILE_DIR), help=argparse.SUPPRESS)
    add_broker_options(p)
    p.set_defaults(func=_cmd_demo, broker="127.0.0.1:1883")
