"""Which INT8 layout makes dlib's embedder cheapest on a core without dot-product instructions?

Issue #13 asks for the INT8 embedder at <= 0.6x the fp32 instructions on the Pi 4's Cortex-A72, where the
rpi4 profile's build (static QDQ, uint8 activations, int8 per-channel weights) measured 0.768x. This builds
the embedder in each layout onnxruntime's static QDQ offers — activations uint8/int8 x weights uint8/int8 x
per-channel/per-tensor — and dynamic INT8, from one fp32 export and one calibration set, each behind the
profile's own gate (mean cosine and same/different decisions against fp32, graph unfused: the target's
arithmetic), and counts each ORT-format file on emulated cores (``converters.arm.cost.measure_model``:
steady-state instructions of one inference of a real aligned chip, exact counts of the TCG plugin).

    .venv/bin/python -m benchmarks run embedder_layouts [--cpus cortex-a72,cortex-a76] [--write]

Counts do not depend on the host's load; the gate figures do not depend on its INT8 kernels (unfused).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from benchmarks.harness.arm_models import int8_file, model_inputs
from benchmarks.harness.report import say
from converters.arm.cost import DEFAULT_PLUGIN, ModelCost, build_plugin, measure_model
from converters.arm.guest import DEFAULT_CACHE, prepare_guest
from converters.face.build import export_face_models
from converters.quantize import QuantMode
from edge.face import models as face_models
from edge.face.models import FaceModel
from edge.profiles import Precision, QuantType, load_profile

NAME = "embedder_layouts"
SUMMARY = "The INT8 embedder's layouts on a core without dot product (emulated)"
#: the docs/benchmarks.md sections it writes
SECTIONS = ("embedder-layouts",)


@dataclass(frozen=True)
class Layout:
    """One INT8 build of the embedder: static QDQ settings, or dynamic INT8."""

    name: str
    activations: QuantType = QuantType.UINT8
    weights: QuantType = QuantType.INT8
    per_channel: bool = True
    dynamic: bool = False

    def overrides(self) -> dict:
        if self.dynamic:
            return {"weights": self.weights, "per_channel": self.per_channel}
        return {"activations": self.activations, "weights": self.weights, "per_channel": self.per_channel}


U8, S8 = QuantType.UINT8, QuantType.INT8
LAYOUTS = (
    Layout("u8 act, s8 weights, per-channel (rpi4 today)", U8, S8, True),
    Layout("u8 act, u8 weights, per-channel", U8, U8, True),
    Layout("s8 act, s8 weights, per-channel (rpi5 today)", S8, S8, True),
    Layout("u8 act, s8 weights, per-tensor", U8, S8, False),
    Layout("u8 act, u8 weights, per-tensor", U8, U8, False),
    Layout("s8 act, s8 weights, per-tensor", S8, S8, False),
    Layout("dynamic INT8, s8 weights, per-channel", weights=S8, per_channel=True, dynamic=True),
)


def build(fp32: Path, layout: Layout, index: int, target: str, calibration, calib_count: int) -> tuple[Path, dict]:
    """The embedder alone quantized in ``layout`` (the other nets stay fp32); (ORT file, gate figures)."""
    from converters.face.quantize import quantize_face_models

    out = DEFAULT_CACHE / "embedder-layouts" / f"{target}-{index}"
    report = out / "quant_report.json"
    if not report.is_file():
        say(f"quantizing the embedder: {layout.name}")
        mode = QuantMode.DYNAMIC if layout.dynamic else QuantMode.STATIC_QDQ
        quantize_face_models(
            fp32, out, load_profile(target), Precision.INT8, calib_count, say, mode=mode,
            nets=[FaceModel.EMBEDDER], overrides={FaceModel.EMBEDDER: layout.overrides()},
            calibration=None if layout.dynamic else calibration, check=False,
        )  # fmt: skip
    data = json.loads(report.read_text(encoding="utf-8"))
    embedder = data["embedder"]
    gate = {
        "cosine_mean": embedder["cosine_mean"],
        "agreement": embedder["decisions"]["agreement"],
        "passed": not [f for f in data.get("failures", []) if f.startswith("embedder")],
    }
    return int8_file(out, face_models.read_models_folder(fp32).model_path(FaceModel.EMBEDDER.role)), gate


def table(rows: list[dict], fp32: dict[str, int]) -> str:
    lines = [
        "| layout | core | steady M instr. | INT8 / fp32 | NEON % | SDOT+UDOT | mean cosine | decisions | gate |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        c: ModelCost = r["cost"]
        lines.append(
            f"| {r['layout']} | {c.cpu} | {c.steady.total / 1e6:.2f} | {c.steady.total / fp32[c.cpu]:.3f} | "
            f"{100 * c.steady.simd_share:.1f} | {c.steady.sdot + c.steady.udot:,} | "
            f"{r['gate']['cosine_mean']:.5f} | {r['gate']['agreement']:.4f} | "
            f"{'pass' if r['gate']['passed'] else '**fail**'} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpus", default="cortex-a72")
    parser.add_argument("--target", default="rpi4", help="profile whose thresholds gate the layouts")
    parser.add_argument("--calibration", type=int, default=40, help="calibration images (as arm_cost.py)")
    parser.add_argument("--k", type=int, default=2, help="steady-state inferences averaged")
    parser.add_argument("--write", action="store_true", help="write the 'embedder-layouts' section")
    args = parser.parse_args(argv)
    from converters.face.calibration import collect_calibration

    build_plugin()
    work = DEFAULT_CACHE / "cost"
    work.mkdir(parents=True, exist_ok=True)
    fp32 = export_face_models(DEFAULT_CACHE / "face-fp32", progress=say)
    chip = model_inputs(fp32, work)[FaceModel.EMBEDDER]
    calibration = collect_calibration(fp32, args.calibration, progress=say)
    built = [(lay, *build(fp32, lay, i, args.target, calibration, args.calibration)) for i, lay in enumerate(LAYOUTS)]
    rows, fp32_steady = [], {}
    for cpu in [c.strip() for c in args.cpus.split(",") if c.strip()]:
        guest = prepare_guest(cpu, progress=say)
        plain = face_models.read_models_folder(fp32).model_path(FaceModel.EMBEDDER.role)
        fp32_steady[cpu] = measure_model(guest, plain, "onnxruntime", args.k, DEFAULT_PLUGIN, chip).steady.total
        say(f"fp32 on {cpu}: {fp32_steady[cpu] / 1e6:.2f} M")
        for layout, path, gate in built:
            cost = measure_model(guest, path, "onnxruntime", args.k, DEFAULT_PLUGIN, chip)
            say(
                f"{layout.name} on {cpu}: {cost.steady.total / 1e6:.2f} M ({cost.steady.total / fp32_steady[cpu]:.3f}x)"
            )
            rows.append({"layout": layout.name, "cost": cost, "gate": gate})
    text = table(rows, fp32_steady)
    print(text)
    if args.write:
        from benchmarks.harness.report import machine_line, write_section

        head = HEAD.format(
            machine=machine_line(), fp32=", ".join(f"{c} {v / 1e6:.2f} M" for c, v in fp32_steady.items())
        )
        write_section("embedder-layouts", head + "\n" + text + "\n\n`python -m benchmarks run embedder_layouts "
                      + " ".join(argv if argv is not None else sys.argv[1:]) + "`")  # fmt: skip
    return 0


HEAD = """## The INT8 embedder's layout on a core without dot product (emulated Cortex-A72)

dlib's ResNet embedder quantized in every static QDQ layout onnxruntime offers, and dynamic INT8, each from
the same fp32 export and calibration images (40, arm_cost.py's count; the shipped build takes 200), each gated
by the rpi4 profile's thresholds (unfused: the target's arithmetic), each counted as the ORT-format file a
bundle ships: steady-state instructions of one inference of a real aligned chip under the counting plugin.
fp32 (`face_embedder.onnx`): {fp32}. Goal (issue #13): INT8 <= 0.6x fp32 on the A72. Machine: {machine}
(instruction counts of the emulated cores: the host's CPU features do not enter them).
"""
