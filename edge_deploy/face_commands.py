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
from edge_deploy.common import add_commands, command_parser, output_folder, print_json


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
    """Refuse a gallery path that is a folder, before the work (a missing parent folder is created)."""
    if path.is_dir():
        raise InputError(f"--output {path}: is a folder; expected a gallery file to write, e.g. {path / 'gallery.npz'}")
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
    threads = _threads(args)
    with (
        output_folder(output.parent, f"--output {output}", create=True),
        open_face_pipeline(Path(args.models), threads, detector=args.detector) as pipeline,
    ):
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


def _check_writable(folder: Path, given_as: str) -> Path:
    """Prove ``folder`` (made by ``output_folder``) takes a file, before any model loads."""
    import tempfile

    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise InputError(f"{given_as}: cannot write into the folder {folder} ({exc.strerror or exc})") from None
    return folder


class _AnnotatedWriter:
    """Writes each image's annotated copy as FOLDER/<stem>.png, never over an input or an earlier output."""

    def __init__(self, folder: Path, inputs: list[Path]) -> None:
        self.folder = folder
        self.taken = {p.absolute() for p in inputs}

    def write(self, image: Path, rgb, faces: list[dict]) -> str:
        from edge.face.annotate import annotate
        from edge.imageio import save_image

        path, n = self.folder / f"{image.stem}.png", 1
        while path.absolute() in self.taken:
            n += 1
            path = self.folder / f"{image.stem}-{n}.png"
        self.taken.add(path.absolute())
        try:
            return str(save_image(path, annotate(rgb, faces)))
        except OSError as exc:
            raise InputError(f"{path}: cannot write the annotated image ({exc.strerror or exc})") from None


def _recognize_all(args: argparse.Namespace, images: list[Path], annotated: Path | None) -> list[dict]:
    """One entry per image: its faces (and annotated copy), or the error that image gave (the others go on)."""
    from edge.errors import EdgeDeployError
    from edge.face.folder_pipeline import open_pipeline
    from edge.face.gallery import Gallery
    from edge.face.models import default_min_score, read_models_folder
    from edge.face.recognize import recognize_image
    from edge.imageio import load_image

    results: list[dict[str, Any]] = []
    limit = _max_pixels()
    min_score = args.min_score
    face = read_models_folder(Path(args.models))
    if min_score is None:
        min_score = default_min_score(face.detector if args.detector is None else Detector(args.detector))
    writer = _AnnotatedWriter(annotated, images) if annotated is not None else None
    with open_pipeline(face, _threads(args), detector=args.detector) as pipeline:
        gallery = Gallery.load(Path(args.gallery), pipeline.embedder.descriptor_size)
        for image in images:
            row: dict[str, Any] = {"image": str(image)}
            try:
                rgb = load_image(image, limit)
                row["faces"] = recognize_image(pipeline, gallery, rgb, args.threshold, min_score)
                if writer is not None:
                    row["annotated"] = writer.write(image, rgb, row["faces"])
            except EdgeDeployError as exc:  # one bad image does not throw away the others' results
                row = {"image": str(image), "error": str(exc)}
            results.append(row)
    return results


def _cmd_recognize(args: argparse.Namespace) -> int:
    from edge.imageio import image_files

    _check_thresholds(args)
    images = image_files(args.images)
    if args.save_annotated is None:
        results = _recognize_all(args, images, None)
    else:
        given = f"--save-annotated {args.save_annotated}"
        with output_folder(Path(args.save_annotated), given, create=True) as folder:
            results = _recognize_all(args, images, _check_writable(folder, given))
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
            if "annotated" in r:
                print(f"  annotated: {r['annotated']}")
    failed = [r for r in results if "error" in r]
    if failed:
        raise InputError(f"{len(failed)} of {len(results)} images could not be analysed; first: {failed[0]['error']}")
    return 0


def add_face(sub: argparse._SubParsersAction) -> None:
    p = command_parser(
        sub,
        "face",
        summary="enroll people and recognise faces with converted face models (device side)",
        description="Recognise faces with a folder from 'edge-deploy convert face': detect (MTCNN or BlazeFace), "
        "align on 5 points, describe, and name each face after the nearest person in a gallery.",
        examples="""
        edge-deploy face enroll out/face people/ -o out/gallery.npz
        edge-deploy face recognize out/face photo.jpg --gallery out/gallery.npz
        """,
    )
    fsub = add_commands(p, "action", "ACTION")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--threads", type=int, help="intra-op threads (default: all CPUs this process may use)")
    common.add_argument("--json", action="store_true", help="machine-readable output")
    common.add_argument(
        "--detector",
        choices=[d.value for d in Detector],
        help="face detector (default: the folder's, else mtcnn; BlazeFace: see convert blazeface)",
    )
    _add_enroll(fsub, common)
    _add_recognize(fsub, common)


def _add_enroll(fsub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    e = command_parser(
        fsub,
        "enroll",
        parents=[common],
        summary="build a gallery from a folder with one sub-folder of photos per person",
        description="Enroll every person of PHOTOS (PHOTOS/<name>/*.jpg; the largest face of each photo) into a "
        "gallery file. Photos without a face are listed as skipped, not fatal.",
        examples="""
        # people/alice/*.jpg, people/bob/*.jpg, ...; out/ is created if missing
        edge-deploy face enroll out/face people/ -o out/gallery.npz
        """,
    )
    e.add_argument("models", help="models folder (from: edge-deploy convert face)")
    e.add_argument("photos", help="folder with one sub-folder per person")
    e.add_argument("--output", "-o", required=True, help="gallery file to write (.npz; parents created)")
    e.set_defaults(func=_cmd_enroll)


def _add_recognize(fsub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    r = command_parser(
        fsub,
        "recognize",
        parents=[common],
        summary="name every face in images against a gallery",
        description="Detect, align and describe every face, and name it after the nearest gallery person when "
        "the descriptor distance is below --threshold; else 'unknown'. An image that cannot be read is reported, "
        "the others are analysed, and the command then exits non-zero.",
        examples="""
        edge-deploy face recognize out/face group.jpg --gallery out/gallery.npz
        # every image of a folder, boxes, landmarks, names and distances drawn into out/annotated/
        edge-deploy face recognize out/face photos/ --gallery out/gallery.npz --save-annotated out/annotated
        # BlazeFace (added by: convert blazeface) instead of the folder's detector, as JSON
        edge-deploy face recognize out/face a.jpg b.jpg --gallery out/gallery.npz --detector blazeface --json
        """,
    )
    r.add_argument("models", help="models folder (from: edge-deploy convert face)")
    r.add_argument(
        "images", nargs="+", help="image files (JPEG, PNG, ...), folders (their images) or quoted glob patterns"
    )
    r.add_argument("--gallery", "-g", required=True, help="gallery file (from: edge-deploy face enroll)")
    r.add_argument(
        "--threshold",
        type=float,
        help=f"same-person distance (default: models.json's, else dlib's {DLIB_SAME_PERSON_THRESHOLD})",
    )
    r.add_argument(
        "--min-score", type=float, help="ignore weaker detections (default: 0.9 for MTCNN, 0.5 / 0.6 for BlazeFace)"
    )
    r.add_argument(
        "--save-annotated",
        metavar="DIR",
        help="write each image with boxes, landmarks, names and distances drawn as DIR/<name>.png (created)",
    )
    r.set_defaults(func=_cmd_recognize)


def _cmd_demo(args: argparse.Namespace) -> int:
    from converters.demo.host import run_main_job
    from converters.demo.html_report import write_html_report
    from edge.profiles import load_profile
    from edge.progress import StepProgress
    from edge_deploy.device_commands import broker_config

    profile = load_profile(args.target, Path(args.profiles))
    progress = StepProgress(stream=None if args.json else sys.stderr)
    broker = None if args.no_broker else broker_config(args)
    with output_folder(Path(args.output), f"--output {args.output}") as out:
        result = run_main_job(
            profile,
            out,
            Path(args.cache),
            broker=broker,
            emulate=not args.no_emulation,
            threads=args.threads,
            progress=progress,
        )
        progress("writing the HTML report: annotated photos, the gate's histograms, the emulated Pi vs this host")
        report = write_html_report(result)
    if args.json:
        print_json(result.to_dict() | {"report": str(report)})
    else:
        print(result.summary())
        print(f"report: {report}")
    return 0 if result.passed else 5


def add_demo(sub: argparse._SubParsersAction) -> None:
    from edge_deploy.device_commands import add_broker_options

    p = command_parser(
        sub,
        "demo",
        extra="convert",
        summary="the main job: build + verify the Pi bundle, recognise faces, run it on an emulated Pi, report",
        description="The main job, end to end on photos shipped in Python packages: build and verify the face "
        "bundle for --target, enroll a gallery and recognise faces on this host, then run the bundle on an "
        "emulated Pi (qemu-user) and report its latency over MQTT (kept in the outbox when no broker answers).",
        examples="""
        edge-deploy demo -o out/demo
        # the host part only: no emulated Pi, no broker
        edge-deploy demo --target rpi5 --no-emulation --no-broker -o out/demo-rpi5
        """,
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
