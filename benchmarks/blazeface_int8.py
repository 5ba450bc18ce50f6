"""Static INT8 BlazeFace full range: does it find the faces the fp32 detector finds? (issue #13, "INT8 behind the
gate where it passes")

    .venv/bin/python benchmarks/blazeface_int8.py            # writes the ``blazeface-int8`` section
    .venv/bin/python benchmarks/blazeface_int8.py --quick    # 50 calibration images, prints only

BlazeFace full range (mediapipe 0.10.21's ``.tflite``, our ONNX translation: ``export_blazeface_onnx``) is
quantized as the face build quantizes its embedder (``converters.quantize.quantize_model``, static QDQ with each
profile's ``[quant]`` settings: rpi4 uint8 activations, rpi5 int8; per-channel int8 weights), with its two output
heads (the last Conv of the box regressor and of the score logits, and the reshapes after them) kept in fp32,
calibrated on the face build's calibration images (``calibration_images``, letterboxed to 192x192 as the
detector feeds them) with min-max and with percentile ranges. Each candidate then runs unfused
(``Optimization.NONE``: QDQ as dequantize -> float op -> quantize, so the counts do not depend on this host's
INT8 kernels) on the evaluation set's 21 images with their 54 annotated faces, on the whole frame and tiled
(``DEFAULT_TILING``), at MediaPipe's threshold (0.6). Found / missed / false as in ``detector_quality.py``
(IoU >= 0.3, one to one). The gate this would need before an INT8 detector could ship: every face the fp32
detector finds is found, and no false detection is added.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.report import REPO, machine_line, write_section  # noqa: E402
from converters.face.blazeface import FULL_RANGE, export_blazeface_onnx  # noqa: E402
from converters.face.boxes import match_boxes  # noqa: E402
from converters.face.facedata import calibration_images, make_eval_images  # noqa: E402
from converters.quantize import QuantMode, quantize_model, settings_for  # noqa: E402
from edge.face.detect_blazeface import BlazeFaceDetector, letterbox_window  # noqa: E402
from edge.face.detect_mtcnn import integral_image  # noqa: E402
from edge.face.tiles import DEFAULT_TILING  # noqa: E402
from edge.profiles import CalibrationMethod, load_profile  # noqa: E402
from edge.runtime import Optimization, open_model  # noqa: E402

CACHE = REPO / ".cache" / "bench"
TARGETS = ("rpi4", "rpi5")
METHODS = (CalibrationMethod.MINMAX, CalibrationMethod.PERCENTILE)
PASSES = {"whole frame": None, "tiled": DEFAULT_TILING}


def calibration_feeds(count: int, input_name: str) -> list[dict[str, np.ndarray]]:
    """The face build's calibration images, each letterboxed to the detector's 192x192 input as it feeds it."""
    feeds = []
    for _name, rgb in calibration_images(count):
        tensor, _ = letterbox_window(integral_image(rgb), (0, rgb.shape[0], 0, rgb.shape[1]), FULL_RANGE.input_shape[1])
        feeds.append({input_name: tensor})
    return feeds


def detections(model: Path, images, optimization: Optimization) -> dict[str, list[list]]:
    """Each pass's boxes on every image."""
    out = {}
    for label, tiling in PASSES.items():
        with BlazeFaceDetector(model, threads=2, tiling=tiling, optimization=optimization) as detector:
            out[label] = [[d.box for d in detector.detect(image.rgb)] for image in images]
    return out


def counts(boxes: list[list], images, reference: list[list] | None) -> dict:
    """Found, missed and false against the annotations; faces the reference found and these boxes did not."""
    found = false = lost = 0
    for got, image, ref in zip(boxes, images, reference or [None] * len(images), strict=True):
        truth = [f.box for f in image.faces]
        hit = {i for i, _, _ in match_boxes(truth, got)}
        found, false = found + len(hit), false + len(got) - len(hit)
        if ref is not None:
            lost += len({i for i, _, _ in match_boxes(truth, ref)} - hit)
    faces = sum(len(image.faces) for image in images)
    return {"found": found, "missed": faces - found, "false": false, "lost": lost}


def measure(calibration: int) -> dict:
    images = make_eval_images(0)
    export = export_blazeface_onnx(CACHE / "blazeface", FULL_RANGE)
    with open_model(export.onnx, threads=1) as model:
        input_name = model.inputs[0].name  # the translation's one input
    feeds = calibration_feeds(calibration, input_name)
    fp32 = detections(export.onnx, images, Optimization.ALL)
    rows = [{"model": "fp32", **{p: counts(fp32[p], images, None) for p in PASSES}}]
    with tempfile.TemporaryDirectory(prefix="bf-int8-") as tmp:
        for target in TARGETS:
            profile = load_profile(target)
            for method in METHODS:
                settings = settings_for(profile, QuantMode.STATIC_QDQ, calibration=method, float_heads=True)
                out = quantize_model(export.onnx, Path(tmp) / f"{target}-{method.value}.onnx", settings, feeds)
                got = detections(out, images, Optimization.NONE)
                label = f"INT8 {target} ({settings.activations.value} activations, {method.value})"
                rows.append({"model": label, **{p: counts(got[p], images, fp32[p]) for p in PASSES}})
    faces = sum(len(image.faces) for image in images)
    return {"machine": machine_line(), "images": len(images), "faces": faces, "calibration": calibration, "rows": rows}


def markdown(result: dict, command: str) -> str:
    lines = [
        "## Static INT8 BlazeFace full range: faces found against fp32",
        "",
        f"`{command}` — {result['machine']}",
        "",
        "BlazeFace full range quantized as the face build quantizes its embedder (static QDQ, the profile's "
        "`[quant]` settings, per-channel int8 weights; the two output heads kept fp32), calibrated on "
        f"{result['calibration']} of the face build's calibration images letterboxed to 192×192, then run unfused "
        "(QDQ as dequantize → float op → quantize: host-independent) on the evaluation set's "
        f"{result['images']} images ({result['faces']} annotated faces), at MediaPipe's 0.6. `lost` = faces the fp32 "
        "detector finds and this one misses. The gate an INT8 detector would need: nothing lost, no false "
        "detection added.",
        "",
        "| model | " + " | ".join(f"{p}: found / missed / false / lost" for p in PASSES) + " | gate |",
        "|---|" + "---:|" * len(PASSES) + "---|",
    ]
    base, passed = result["rows"][0], []
    for row in result["rows"]:
        cells = [f"{row[p]['found']} / {row[p]['missed']} / {row[p]['false']} / {row[p]['lost']}" for p in PASSES]
        ok = all(row[p]["lost"] == 0 and row[p]["false"] <= base[p]["false"] for p in PASSES)
        if row is not base and ok:
            passed.append(row["model"])
        verdict = "" if row is base else ("passes" if ok else "**fails**")
        lines.append(f"| {row['model']} | " + " | ".join(cells) + f" | {verdict} |")
    lines.append("")
    if passed:
        lines.append(f"Passing: {', '.join(passed)}. No face build quantizes BlazeFace yet; the folders ship it fp32.")
    else:
        lines.append(
            "None passes, so no INT8 BlazeFace ships: the face folders keep the fp32 detector (models.json "
            "`detector.blazeface_full` fp32), and the ARM frame counts (`arm-frame`) run it in fp32."
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calibration", type=int, default=200, help="calibration images (default 200)")
    parser.add_argument("--quick", action="store_true", help="50 calibration images; prints, writes no docs")
    args = parser.parse_args(argv)
    calibration = 50 if args.quick else args.calibration
    result = measure(calibration)
    command = ".venv/bin/python benchmarks/blazeface_int8.py" + (
        f" --calibration {calibration}" if calibration != 200 else ""
    )
    md = markdown(result, command)
    print(md)
    if not args.quick:
        write_section("blazeface-int8", md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
