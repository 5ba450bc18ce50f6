"""``edge-deploy convert model``: bring your own ONNX model (host side); argv adapter for converters.byom."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from edge.profiles import DEFAULT_PROFILE_DIR, ModelFormats, Runtime, load_profile
from edge_deploy.common import command_parser, output_folder, print_json

EXAMPLES = """
# static INT8 for the Pi 4: calibrated on calib.npz, gated on eval.npz (cosine, nearest-neighbour agreement)
edge-deploy convert model net.onnx --target rpi4 --precision int8 --calib calib.npz --eval eval.npz \\
    --task embedding -o out/net
# a classifier, gated on top-1 agreement
edge-deploy convert model classifier.onnx --target rpi5 --precision int8 --calib calib.npz --eval eval.npz \\
    --task classification --min-top1 0.99 -o out/cls
# fp32 for the browser, the dynamic input fixed to 1x3x224x224
edge-deploy convert model net.onnx --target browser-wasm --precision fp32 --input x=1x3x224x224 \\
    --eval eval.npz -o out/web
# a torch.export program (.pt2), with the fp32 TFLite twin (needs scripts/setup_onnx2tf.sh)
edge-deploy convert model net.pt2 --target rpi4 --precision fp32 --eval eval.npz --input x=1x3x224x224 \\
    --format tflite -o out/pt2
# a transformer: dynamic INT8 (no calibration data)
edge-deploy convert model encoder.pt2 --target rpi4 --precision int8 --dynamic --eval eval.npz \\
    --task embedding -o out/enc
# image folders as data, normalised with ImageNet's mean and std
edge-deploy convert model mobilenet.onnx --target rpi5 --precision int8 --calib photos/calib/ \\
    --eval photos/eval/ --task classification --mean 123.675,116.28,103.53 --std 58.395,57.12,57.375 -o out/mnv2
"""


def _cmd_convert_model(args: argparse.Namespace) -> int:
    from converters.byom.build import ModelJob, convert_model
    from converters.byom.gate import Task, thresholds_for
    from converters.byom.images import ImageOptions, Layout, parse_channels
    from converters.byom.report import record, summary
    from converters.byom.source import parse_input_specs
    from edge.profiles import Precision
    from edge.progress import StepProgress
    from edge_deploy.build_commands import web_runtime_on_first_use

    profile = load_profile(args.target, Path(args.profiles))
    names = ("min_cosine", "min_rank_agreement", "min_top1", "max_abs_error", "max_rel_error")
    thresholds = thresholds_for(profile, {name: getattr(args, name) for name in names})
    job = ModelJob(
        model=Path(args.model_file),
        out_dir=Path(args.output),
        profile=profile,
        precision=Precision(args.precision or profile.runtime.precision.value),
        task=Task(args.task),
        evaluation=Path(args.eval),
        calibration=Path(args.calib) if args.calib else None,
        input_shapes=parse_input_specs(args.input or []),
        thresholds=thresholds,
        dynamic=args.dynamic,
        weight_only=args.weight_only,
        licence=args.licence,
        tflite=ModelFormats(args.format).tflite,
        images=ImageOptions(
            mean=parse_channels(args.mean, "--mean") if args.mean is not None else None,
            std=parse_channels(args.std, "--std") if args.std is not None else None,
            layout=Layout(args.layout) if args.layout else None,
        ),
    )
    progress = StepProgress(stream=None if args.json else sys.stderr)
    if profile.runtime.default is Runtime.ONNXRUNTIME_WEB:  # the model is checked in the page's runtime
        web_runtime_on_first_use(who="edge-deploy convert model --target browser-wasm", progress=progress)
    with output_folder(job.out_dir, f"--output {args.output}"):
        build = convert_model(job, progress)
    if args.json:
        print_json(record(build))
    else:
        print(summary(build))
    return 0


def _add_gate_flags(m: argparse.ArgumentParser, defaults: Any) -> None:
    """The gate's flags; each defaults to the target profile's ``thresholds.model_*`` key."""
    for flag, key, what in (
        ("--min-cosine", "min_cosine", "embedding: least mean cosine"),
        ("--min-rank-agreement", "min_rank_agreement", "embedding: least nearest-neighbour agreement"),
        ("--min-top1", "min_top1", "classification: least top-1 agreement"),
        ("--max-rel-error", "max_rel_error", "raw: largest |difference| / largest |source value|"),
    ):
        m.add_argument(flag, type=float, metavar="X", help=f"{what} (default: the profile's "
                       f"thresholds.model_{key}, {getattr(defaults, key)})")  # fmt: skip
    m.add_argument("--max-abs-error", type=float, metavar="X", help="raw: largest |difference| (default: not gated)")


def add_convert_model(csub: argparse._SubParsersAction) -> None:
    """Register ``convert model`` under ``convert``."""
    from converters.byom.gate import GateThresholds  # numpy only: the defaults shown in --help

    defaults = GateThresholds()
    m = command_parser(
        csub,
        "model",
        summary="your own ONNX, torch.export or float .tflite model: fp32 or INT8, gated against it on your data",
        description="Convert your model (ONNX, torch.export .pt2 or float .tflite) for a target: fix dynamic input "
        "shapes, write an fp32 copy or a static INT8 model calibrated on --calib, run source and candidate on "
        "--eval and gate by --task. Writes models.json (only when it passed) and report.md; bad input leaves "
        "nothing in -o. Data formats: docs/byom.md.",
        examples=EXAMPLES,
    )
    m.add_argument(
        "model_file", metavar="MODEL", help="an ONNX model (.onnx), a torch.export program (.pt2) or a float .tflite"
    )
    m.add_argument("--target", "-t", required=True, help="target profile, e.g. rpi4 (see: edge-deploy targets)")
    m.add_argument("--output", "-o", required=True, help="output folder, new or empty (parents created)")
    m.add_argument("--precision", choices=["fp32", "int8"], help="default: the profile's")
    m.add_argument("--calib", metavar="NPZ|DIR", help="calibration inputs (.npz or image folder); static int8")
    m.add_argument("--dynamic", action="store_true", help="int8: dynamic (no calibration; for transformers)")
    m.add_argument(
        "--weight-only", action="store_true", help="int8: 8-bit MatMul weights, fp32 activations (no calibration)"
    )
    m.add_argument("--eval", required=True, metavar="NPZ|DIR", help="evaluation inputs (.npz or image folder)")
    m.add_argument("--mean", metavar="R,G,B", help="image folders: per-channel mean, 0-255 scale (default 0)")
    m.add_argument(
        "--std", metavar="R,G,B", help="image folders: per-channel std, 0-255 scale (default 255: pixels/255)"
    )
    m.add_argument("--layout", choices=["nchw", "nhwc"], help="image folders: channel axis (default: from the shape)")
    m.add_argument("--task", choices=["embedding", "classification", "raw"], default="raw", help="what the gate checks")
    m.add_argument("--input", action="append", metavar="NAME=DIMS", help="fix an input's shape, e.g. x=1x3x224x224")
    _add_gate_flags(m, defaults)
    m.add_argument("--licence", help="the model's licence, recorded in models.json and bundles (default: unknown)")
    m.add_argument(
        "--format",
        choices=[f.value for f in ModelFormats],
        default=ModelFormats.ONNX.value,
        help="onnx (default); tflite or both: also the TFLite twin (onnx2tf), checked on LiteRT",
    )
    m.add_argument("--json", action="store_true", help="print the build record as JSON")
    m.add_argument("--profiles", default=str(DEFAULT_PROFILE_DIR), help=argparse.SUPPRESS)
    m.set_defaults(func=_cmd_convert_model)
