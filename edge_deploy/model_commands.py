"""``edge-deploy convert model``: bring your own ONNX model (host side); argv adapter for converters.byom."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from edge.profiles import DEFAULT_PROFILE_DIR, ModelFormats, load_profile
from edge_deploy.common import print_json

EPILOG = """\
examples:
  edge-deploy convert model net.onnx --target rpi4 --precision int8 --calib calib.npz --eval eval.npz \\
      --task embedding -o out/net
                       static INT8 for the Pi 4, calibrated on calib.npz, gated on eval.npz (cosine and
                       nearest-neighbour agreement with the source)
  edge-deploy convert model classifier.onnx --target rpi5 --precision int8 --calib calib.npz \\
      --eval eval.npz --task classification --min-top1 0.99 -o out/cls
  edge-deploy convert model net.onnx --target browser-wasm --precision fp32 --input x=1x3x224x224 \\
      --eval eval.npz -o out/web --json
                       fp32 copy with the dynamic input fixed to 1x3x224x224, checked against the source
  edge-deploy convert model net.pt2 --target rpi4 --precision int8 --calib calib.npz --eval eval.npz \\
      --input x=4x3x224x224 -o out/pt2
                       a torch.export program (torch.export.save): exported to ONNX, checked against torch
  edge-deploy convert model detector.tflite --target rpi4 --precision fp32 --eval eval.npz --task raw \\
      -o out/det       a float .tflite: translated to ONNX (BlazeFace's op set), checked against LiteRT
  edge-deploy convert model net.onnx --target rpi4 --precision fp32 --eval eval.npz --input x=1x3x224x224 \\
      --format tflite -o out/net
                       also the fp32 TFLite twin (onnx2tf), checked on LiteRT against the fp32 copy
  edge-deploy convert model encoder.pt2 --target rpi4 --precision fp32 --eval tokens.npz --task embedding \\
      --format tflite -o out/enc-tflite
                       a text encoder's fp32 TFLite twin: input_ids / attention_mask [1, L] int64 kept as
                       they are (onnx2tf -kat), checked on LiteRT against the fp32 copy
  edge-deploy convert model net.onnx --target rpi4 --precision int8 --calib calib.npz --eval eval.npz \\
      --task embedding --input x=1x3x224x224 --format both -o out/net8
                       also a full-integer INT8 TFLite (onnx2tf, calibrated on calib.npz), run on LiteRT
                       and gated against the source like the INT8 ONNX
  edge-deploy convert model encoder.pt2 --target rpi4 --precision int8 --dynamic --eval eval.npz \\
      --task embedding -o out/enc
                       dynamic INT8 (no calibration data): for transformers, whose activations static
                       INT8 cannot hold (docs/byom.md: all-MiniLM-L6-v2)
  edge-deploy convert model encoder.pt2 --target rpi4 --precision int8 --weight-only --eval eval.npz \\
      --task embedding -o out/enc8
                       weight-only INT8: each weight MatMul as 8-bit blocks (MatMulNBits), activations
                       and arithmetic fp32: no calibration, the same figures on any host

  edge-deploy convert model mobilenet.onnx --target rpi5 --precision int8 --calib photos/calib/ \\
      --eval photos/eval/ --task classification --mean 123.675,116.28,103.53 \\
      --std 58.395,57.12,57.375 -o out/mnv2
                       image folders: each image resized to the model's input (stretched, RGB), then
                       (pixel - mean) / std per channel (ImageNet's values here)

Data: a .npz with one array per model input, named like the input, samples stacked on axis 0 (shape
N x d1 x ... for an input of shape B x d1 x ..., N a multiple of B) and the input's dtype; or a folder of
images (.jpg .jpeg .png .bmp .webp; other files skipped) for a model with one 4-D input of 1 or 3 channels
(NCHW or NHWC, from the shape; --layout when both fit): float32 inputs get (pixel - mean) / std with
--mean 0 --std 255 by default, uint8 inputs the pixels. The number of images must be a multiple of the
batch (a remainder is refused, not dropped). --eval must not be the --calib data.

Before quantizing, the fp32 copy (and then the INT8 candidate) is loaded in the target's own runtime:
this host's onnxruntime for the Pi and x86 targets, the site's onnxruntime-web under Node.js for
browser-wasm (an older release: ai.onnx up to opset 26). A model it cannot load is refused naming every
op without a kernel and the runtime's words. Exit codes: 3 bad input (including a model the target's
runtime cannot load), 4 conversion failed, 5 gate failed (the report is written, models.json is not),
7 onnxruntime cannot run the model, 9 a missing dependency (Node.js for browser-wasm:
scripts/setup_web.sh --page). Bundle a passed folder with: edge-deploy build --model OUT_DIR (see build --help).
"""


def _cmd_convert_model(args: argparse.Namespace) -> int:
    from converters.byom.build import ModelJob, convert_model
    from converters.byom.gate import Task, thresholds_for
    from converters.byom.images import ImageOptions, Layout, parse_channels
    from converters.byom.report import record, summary
    from converters.byom.source import parse_input_specs
    from edge.profiles import Precision
    from edge.progress import StepProgress

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
    build = convert_model(job, StepProgress(stream=None if args.json else sys.stderr))
    if args.json:
        print_json(record(build))
    else:
        print(summary(build))
    return 0


def _add_gate_flags(m: argparse.ArgumentParser, defaults: Any) -> None:
    """The gate's flags; each defaults to the target profile's ``thresholds.model_*`` key."""
    m.add_argument("--min-cosine", type=float, default=None,
                   help=f"embedding: mean cosine (default: the profile's thresholds.model_min_cosine, "
                   f"{defaults.min_cosine} in every shipped profile)")  # fmt: skip
    m.add_argument("--min-rank-agreement", type=float, default=None,
                   help="embedding: nearest-neighbour agreement (default: the profile's "
                   f"thresholds.model_min_rank_agreement, {defaults.min_rank_agreement})")  # fmt: skip
    m.add_argument("--min-top1", type=float, default=None,
                   help=f"classification: top-1 agreement (default: the profile's thresholds.model_min_top1, "
                   f"{defaults.min_top1})")  # fmt: skip
    m.add_argument("--max-abs-error", type=float, default=None, help="raw: max abs difference (default: not gated)")
    m.add_argument("--max-rel-error", type=float, default=None,
                   help="raw: max abs difference / max abs source value, per output (default: the profile's "
                   f"thresholds.model_max_rel_error, {defaults.max_rel_error})")  # fmt: skip


def add_convert_model(csub: argparse._SubParsersAction) -> None:
    """Register ``convert model`` under ``convert``."""
    from converters.byom.gate import GateThresholds  # numpy only: the defaults shown in --help

    defaults = GateThresholds()
    m = csub.add_parser(
        "model",
        help="your own ONNX model, torch.export program or float .tflite: fp32 or INT8, gated against it on your data",
        description="Read and check your ONNX model, torch.export program (.pt2: exported to ONNX with "
        "dynamo, checked against torch) or float .tflite (translated to ONNX, checked against LiteRT), fix "
        "dynamic input shapes (--input), write an fp32 copy or "
        "a static INT8 (QDQ) model calibrated on --calib with the target profile's settings (plus an ORT-format "
        "copy for the target's CPU), run source and candidate on --eval (the INT8 graph unfused, so the verdict "
        "does not depend on this host's INT8 kernels) and gate by --task. Writes models.json (passed builds), "
        "report.json and report.md; nothing is left in -o when an input is bad.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    m.add_argument(
        "model_file", metavar="MODEL", help="an ONNX model (.onnx), a torch.export program (.pt2) or a float .tflite"
    )
    m.add_argument("--target", "-t", required=True, help="target profile, e.g. rpi4 (see: edge-deploy targets)")
    m.add_argument("--output", "-o", required=True, help="output folder (new, or empty)")
    m.add_argument("--precision", choices=["fp32", "int8"], help="default: the profile's")
    m.add_argument("--calib", help="calibration inputs (.npz, or a folder of images); required for static int8")
    m.add_argument("--dynamic", action="store_true", help="int8: dynamic (no calibration; for transformers)")
    m.add_argument(
        "--weight-only",
        action="store_true",
        help="int8: 8-bit blockwise weights of every MatMul with a constant weight (MatMulNBits, accuracy level "
        "0), fp32 activations; no calibration; for transformers",
    )
    m.add_argument(
        "--eval", required=True, help="evaluation inputs (.npz, or a folder of images), not the calibration data"
    )
    m.add_argument("--mean", metavar="R,G,B", help="image folders: per-channel mean, 0-255 scale (default 0)")
    m.add_argument(
        "--std", metavar="R,G,B", help="image folders: per-channel std, 0-255 scale (default 255: pixels/255)"
    )
    m.add_argument("--layout", choices=["nchw", "nhwc"], help="image folders: channel axis (default: from the shape)")
    m.add_argument("--task", choices=["embedding", "classification", "raw"], default="raw", help="what the gate checks")
    m.add_argument("--input", action="append", metavar="NAME=DIMS", help="fix an input's shape, e.g. x=1x3x224x224")
    _add_gate_flags(m, defaults)
    m.add_argument("--licence", help="the model's licence, recorded in models.json and bundles "
                   "(default: 'unknown (user model)')")  # fmt: skip
    m.add_argument(
        "--format",
        choices=[f.value for f in ModelFormats],
        default=ModelFormats.ONNX.value,
        help="onnx (default), or also the TFLite twin by onnx2tf: fp32 (inputs of batch 1, float32/int64/int32; "
        "one 4-D float input is read as an NCHW image and made NHWC, other inputs keep their ONNX shape), checked "
        "against the fp32 copy; static int8 (one NCHW 3-channel image input): full integer, calibrated on --calib "
        "and gated against the source like the ONNX; shipped by build --model (tflite = both: the ONNX is always "
        "kept)",
    )
    m.add_argument("--json", action="store_true", help="print the build record as JSON")
    m.add_argument("--profiles", default=str(DEFAULT_PROFILE_DIR), help=argparse.SUPPRESS)
    m.set_defaults(func=_cmd_convert_model)
