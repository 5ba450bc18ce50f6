"""``convert model`` with folders of real photos as --calib / --eval: the gate figures of docs/byom.md.

The tests' embedder (``testsupport/byom_models.py``: Conv 3->8 + ReLU -> Conv 8->16 stride 2 + ReLU -> Gemm ->
32-d, seeded weights) as NCHW float32 (ImageNet mean/std) and as NHWC uint8 (raw pixels), fed folders of
crops of skimage's sample photos (astronaut, coffee, chelsea; seeded, 48 to 160 pixels a side, alternately
.jpg and .png): 32 calibration and 12 evaluation images from different seeds, stretched to 16 x 16.

    .venv/bin/python -m benchmarks run byom_images [--targets rpi4 rpi5 x86_64-host] [--calib 32] [--eval 12]

Prints one markdown row per model and target.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from converters.byom.build import ModelJob, convert_model
from converters.byom.gate import Task
from converters.byom.images import ImageOptions
from edge.errors import ValidationError
from edge.profiles import Precision, load_profile
from testsupport.byom_models import write_embedder, write_photo_folder

NAME = "byom_images"
SUMMARY = "convert model with folders of real photos as --calib / --eval: docs/byom.md's gate figures"
#: the docs/benchmarks.md sections it writes (none: it prints its figures)
SECTIONS = ()

REPO = Path(__file__).resolve().parent.parent

IMAGENET = ImageOptions(mean=(123.675, 116.28, 103.53), std=(58.395, 57.12, 57.375))
MODELS = {
    "NCHW float32, ImageNet mean/std": ({"nhwc": False, "uint8": False}, (4, 3, 16, 16), IMAGENET),
    "NHWC uint8, raw pixels": ({"nhwc": True, "uint8": True}, (4, 16, 16, 3), ImageOptions()),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--targets", nargs="+", default=["rpi4", "rpi5", "x86_64-host"])
    parser.add_argument("--calib", type=int, default=32)
    parser.add_argument("--eval", type=int, default=12)
    args = parser.parse_args(argv)
    print("| model | target | QDQ (Q / DQ) | cosine mean | cosine min | NN agreement | verdict |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="byom-images-") as tmp:
        d = Path(tmp)
        calib = write_photo_folder(d / "calib", seed=10, count=args.calib)
        evaluation = write_photo_folder(d / "eval", seed=11, count=args.eval)
        for label, (kw, shape, options) in MODELS.items():
            model = write_embedder(d / f"emb_{len(label)}.onnx", **kw)
            for target in args.targets:
                job = ModelJob(
                    model=model,
                    out_dir=d / f"out-{len(label)}-{target}",
                    profile=load_profile(target),
                    precision=Precision.INT8,
                    task=Task.EMBEDDING,
                    evaluation=evaluation,
                    calibration=calib,
                    input_shapes={"x": shape},
                    images=options,
                )
                try:
                    convert_model(job)
                    verdict = "pass"
                except ValidationError:
                    verdict = "**fail**"  # the report is written: its figures are printed the same way
                report = json.loads((job.out_dir / "report.json").read_text(encoding="utf-8"))
                e, q = report["gate"]["figures"]["embedding"], report["quant_ops"]
                print(
                    f"| {label} | {target} | {q['QuantizeLinear']} / {q['DequantizeLinear']} | {e['cosine_mean']:.5f} "
                    f"| {e['cosine_min']:.5f} | {e['rank_agree']}/{e['samples']} | {verdict} |"
                )
    return 0
