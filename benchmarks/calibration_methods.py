"""Which static-INT8 calibration suits each face net? MinMax vs Entropy vs Percentile, per-tensor vs
per-channel weights, uint8 vs int8 activations, measured against fp32 on the evaluation set.

Each net is quantized alone and swapped into the otherwise fp32 pipeline, so every number belongs to one
net: the embedder is judged by cosine to fp32 on the same chips and same/different agreement on the
evaluation pairs; PNet/RNet/ONet by the IoU of every fp32-found face's box with its twin and faces lost.
Calibration data: ``converters.face.facedata.calibration_images`` (never the evaluation images).

    .venv/bin/python -m benchmarks run calibration_methods --fp32-dir OUT_OF_CONVERT_FACE [--count 120]

Prints a markdown table (and writes it as JSON with ``--json``). Takes ~20 min on 2 busy
cores (each MTCNN row runs the cascade on all 21 images).
"""

from __future__ import annotations

import argparse
import itertools
import json
import tempfile
import time
from pathlib import Path

from converters.face.calibration import chip_landmarks, collect_calibration
from converters.face.facedata import make_eval_set
from converters.face.quant_eval import evaluate_detector, evaluate_embedder, fp32_reference
from converters.quantize import QuantMode, QuantSettings, quantize_model
from edge.face import models as face_models
from edge.face.models import FaceModel
from edge.profiles import CalibrationMethod, QuantType

NAME = "calibration_methods"
SUMMARY = "Static-INT8 calibration methods per face net against fp32"
#: the docs/benchmarks.md sections it writes (none: it prints its figures)
SECTIONS = ()

METHODS = (CalibrationMethod.MINMAX, CalibrationMethod.ENTROPY, CalibrationMethod.PERCENTILE)


def _grid(full: bool) -> list[QuantSettings]:
    """Every method x per-channel x activation type (``full``), else the methods with per-channel uint8."""
    per_channel = (True, False) if full else (True,)
    activations = (QuantType.UINT8, QuantType.INT8) if full else (QuantType.UINT8,)
    return [
        QuantSettings(QuantMode.STATIC_QDQ, activations=act, weights=QuantType.INT8, per_channel=pc, calibration=m)
        for m, pc, act in itertools.product(METHODS, per_channel, activations)
    ]


def _measure(net: FaceModel, settings: QuantSettings, calib, ref, fp32: dict, workdir: Path, threads: int) -> dict:
    start = time.perf_counter()
    out = quantize_model(fp32[net], workdir / f"{net}.onnx", settings, calib.feeds[net])
    row = {"net": net, **settings.to_dict(), "quantize_s": round(time.perf_counter() - start, 1)}
    if net is FaceModel.EMBEDDER:
        stats = evaluate_embedder(ref, out, threads)
        row.update(stats.to_dict())
        row.pop("decisions")
        row["agreement"] = stats.decisions.agreement
    else:
        stats, _ = evaluate_detector(ref, {**fp32, net: out}, threads)
        row.update(stats.to_dict())
    return row


def _table(rows: list[dict]) -> str:
    lines = [
        "| net | calibration | weights | activations | cos mean | cos min | agreement | IoU min | IoU mean | lost |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        w = "per-channel" if r["per_channel"] else "per-tensor"

        def f(key: str, fmt: str, r: dict = r) -> str:
            return format(r[key], fmt) if key in r else "-"

        lines.append(
            f"| {r['net']} | {r['calibration']} | {w} | {r['activations']} | {f('cosine_mean', '.5f')} | "
            f"{f('cosine_min', '.5f')} | {f('agreement', '.4f')} | {f('iou_min', '.3f')} | {f('iou_mean', '.3f')} "
            f"| {f('lost', 'd')} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fp32-dir", type=Path, required=True, help="folder written by 'edge-deploy convert face'")
    parser.add_argument("--count", type=int, default=120, help="calibration images")
    parser.add_argument("--nets", default="embedder,pnet,rnet,onet")
    parser.add_argument(
        "--full-detector-grid", action="store_true", help="the embedder's full grid for the MTCNN nets too"
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    folder = face_models.read_models_folder(args.fp32_dir)
    fp32 = folder.model_paths(face_models.FACE_NETS)
    calib = collect_calibration(folder, args.count, threads=args.threads, progress=print)
    ref = fp32_reference(make_eval_set(0), fp32, args.threads, chip_landmarks(folder))
    print(f"evaluation: {ref.faces_found} annotated faces found by fp32, {len(ref.eval_set.pairs)} pairs")
    rows = []
    with tempfile.TemporaryDirectory(prefix="calib-bench-") as tmp:
        for net in [FaceModel(name) for name in args.nets.split(",")]:
            for settings in _grid(net is FaceModel.EMBEDDER or args.full_detector_grid):
                rows.append(_measure(net, settings, calib, ref, fp32, Path(tmp), args.threads))
                print(_table(rows[-1:]).splitlines()[-1], flush=True)
    print()
    print(f"calibration: {json.dumps(calib.to_dict())}")
    print(_table(rows))
    if args.json:
        args.json.write_text(json.dumps({"calibration": calib.to_dict(), "rows": rows}, indent=2) + "\n")
    return 0
