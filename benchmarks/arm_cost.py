"""Exact ARM cost: executed instructions per inference of the face models on emulated Pi 4 / Pi 5 cores.

Each model runs in the arm64 guest (``converters.arm.guest``) under the counting TCG plugin
(``scripts/arm/insncount.c``) 0, 0, 1 and 1+k times; the differences give the first and the steady-state
inference (``converters.arm.cost``). fp32 models are the ONNX export; INT8 models are the profile's static
QDQ build (``converters.face.quantize``: rpi4 for the A72, rpi5 for the A76) in the ORT format a bundle ships.
With ``--litert``, the embedder also goes through onnx2tf to TFLite (fp32 and full-integer INT8) and runs
on LiteRT (XNNPACK). Counts do not depend on the machine's load; they took ~10-40 s of emulation each.

    .venv/bin/python -m benchmarks run arm_cost                       # embedder, ORT, A72 and A76
    .venv/bin/python -m benchmarks run arm_cost --models embedder,onet,rnet,pnet --litert --json cost.json

Prints a markdown table to paste into docs/benchmarks.md. Goals (from the Pi-build issue): INT8 / fp32
<= 0.6 on the A72 and <= 0.4 on the A76 for the embedder with its best backend, and SDOT running on the A76.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from benchmarks.harness.arm_models import int8_file, model_inputs
from benchmarks.harness.report import say
from converters.arm.cost import DEFAULT_PLUGIN, ModelCost, build_plugin, measure_model
from converters.arm.guest import DEFAULT_CACHE, prepare_guest
from converters.face.build import export_face_models
from edge.face import models as face_models
from edge.face.models import FaceModel
from testsupport.needs import ONNX2TF, install_on_first_use

NAME = "arm_cost"
SUMMARY = "Executed instructions per inference of the face models on emulated Pi 4 / Pi 5 cores"
#: the docs/benchmarks.md sections it writes
SECTIONS = ("arm-cost",)

PROFILE_OF_CPU = {"cortex-a72": "rpi4", "cortex-a76": "rpi5"}
GOALS = {"cortex-a72": 0.6, "cortex-a76": 0.4}


def int8_folder(fp32: Path, target: str, calibration: int) -> Path:
    """The profile's INT8 face models (static QDQ, ORT format), built once into .cache/arm."""
    from converters.face.quantize import quantize_face_models
    from edge.profiles import Precision, load_profile

    out = DEFAULT_CACHE / f"face-int8-{target}"
    if not (out / face_models.MODELS_FILE).is_file():
        say(f"quantizing the face models for {target} (static INT8 QDQ, {calibration} calibration images)")
        quantize_face_models(fp32, out, load_profile(target), Precision.INT8, calibration, say, check=False)
    return out


def litert_embedders(fp32: Path, chip_npy: Path, calibration: int) -> dict[str, Path]:
    """The embedder as TFLite (fp32 and full-integer INT8, float I/O) via onnx2tf, built once."""
    from converters.face.calibration import collect_calibration
    from converters.tflite.convert import export_tflite

    out = DEFAULT_CACHE / "face-tflite"
    files = {"fp32": out / "face_embedder_fp32.tflite", "int8": out / "face_embedder_int8_float_io.tflite"}
    if not all(p.is_file() for p in files.values()):
        calib = collect_calibration(fp32, calibration, progress=say)
        chips = np.concatenate([f["chip"] for f in calib.feeds[FaceModel.EMBEDDER]]).transpose(0, 2, 3, 1)
        install_on_first_use(ONNX2TF, "benchmarks/arm_cost.py (the TFLite embedders)")
        export_tflite(fp32 / "face_embedder.onnx", out, int8=True, calibration=chips, input_name="chip", progress=say)
    return files


def markdown(costs: list[tuple[str, str, ModelCost]], command: str) -> str:
    """The table: one row per (model, precision, backend, core), INT8 rows with their ratio to fp32."""
    fp32 = {(net, c.cpu, c.backend): c.steady.total for net, prec, c in costs if prec == "fp32"}
    lines = [
        "| model | precision | file | backend | core | first inference (M instr.) | steady (M instr.) "
        "| NEON % | SDOT+UDOT | INT8 / fp32 |",
        "|---|---|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for net, prec, c in costs:
        base = fp32.get((net, c.cpu, c.backend))
        ratio = f"{c.steady.total / base:.3f}" if prec != "fp32" and base else ""
        lines.append(
            f"| {net} | {prec} | `{c.model}` | {c.backend} | {c.cpu} | {c.first.total / 1e6:.2f} | "
            f"{c.steady.total / 1e6:.2f} | {100 * c.steady.simd_share:.1f} | {c.steady.sdot + c.steady.udot:,} | "
            f"{ratio} |"
        )
    noise = max(c.repeat_noise for _, _, c in costs)
    lines += ["", f"Repeat noise (steady state, two counted runs): at most {noise:,} instructions.", "", f"`{command}`"]
    return "\n".join(lines)


def goals(costs: list[tuple[str, str, ModelCost]]) -> str:
    """The verdict lines: best embedder INT8 / fp32 per core (any backend) against its goal, SDOT on A76."""
    fp32 = {
        (c.cpu, c.backend): c.steady.total for net, prec, c in costs if net is FaceModel.EMBEDDER and prec == "fp32"
    }
    lines = []
    for cpu, goal in (("cortex-a72", 0.6), ("cortex-a76", 0.4)):
        ratios = [
            (c.steady.total / fp32[(cpu, c.backend)], c.backend)
            for net, prec, c in costs
            if net is FaceModel.EMBEDDER and prec == "int8" and c.cpu == cpu and (cpu, c.backend) in fp32
        ]
        if ratios:
            best, backend = min(ratios)
            verdict = "met" if best <= goal else "**not met**"
            lines.append(f"- {cpu}: best embedder INT8 / fp32 = {best:.3f} ({backend}); goal <= {goal} — {verdict}.")
    dots = sum(c.steady.sdot + c.steady.udot for _, prec, c in costs if c.cpu == "cortex-a76" and prec == "int8")
    if any(c.cpu == "cortex-a76" for _, _, c in costs):
        lines.append(
            f"- SDOT/UDOT executed on cortex-a76 in the INT8 steady state: {dots:,} — the dot-product kernels run."
        )
    return "\n".join(lines)


def count_cpu(cpu: str, nets: list[str], fp32: Path, inputs: dict[str, Path], args) -> list[tuple[str, str, ModelCost]]:
    """Every requested model, fp32 and INT8 (and LiteRT), on one emulated core."""
    guest = prepare_guest(cpu, rootfs=args.rootfs, progress=say)
    int8 = int8_folder(fp32, PROFILE_OF_CPU.get(cpu, "rpi4"), args.calibration)
    variants = []
    for net in nets:
        plain = face_models.read_models_folder(fp32).model_path(net.role)
        variants.append((net, "fp32", plain))
        try:
            variants.append((net, "int8", int8_file(int8, plain)))
        except FileNotFoundError as exc:
            say(f"no INT8 {net} for {cpu}, fp32 only: {exc}")
    if args.litert and FaceModel.EMBEDDER in nets:
        tflite = litert_embedders(fp32, inputs[FaceModel.EMBEDDER], args.calibration)
        variants += [(FaceModel.EMBEDDER, p, f) for p, f in tflite.items()]
    costs = []
    for net, prec, path in variants:
        say(f"counting {net} {prec} ({path.name}) on {cpu}")
        backend = "litert" if path.suffix == ".tflite" else "onnxruntime"
        cost = measure_model(guest, path, backend, k=args.k, plugin=DEFAULT_PLUGIN, input_npy=inputs.get(net))
        dots = cost.steady.sdot + cost.steady.udot
        say(f"  steady {cost.steady.total / 1e6:.2f} M instructions, SDOT+UDOT {dots:,}")
        costs.append((net, prec, cost))
    return costs


SECTION_HEAD = """## ARM cost: executed instructions per inference on emulated Cortex-A72 (Pi 4) and A76 (Pi 5)

Counted by a TCG plugin (`scripts/arm/insncount.c`) under qemu-user, between region marks the guest sets
around the first inference and k steady-state inferences; NEON (AdvSIMD) and SDOT/UDOT counted apart.
Instruction counts do not depend on how loaded the host is; they are not times (emulation is 10-50x slower
than a Pi). Goals: embedder INT8 / fp32 <= 0.6 on A72 and <= 0.4 on A76 with the best backend; SDOT kernels
must run on A76. Machine: {machine}.
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpus", default="cortex-a72,cortex-a76")
    parser.add_argument("--models", default="embedder", help="comma list of embedder, pnet, rnet, onet")
    parser.add_argument("--k", type=int, default=2, help="steady-state inferences averaged (default 2)")
    parser.add_argument("--calibration", type=int, default=40, help="calibration images for INT8")
    parser.add_argument("--litert", action="store_true", help="also the embedder on LiteRT (needs onnx2tf)")
    parser.add_argument("--json", type=Path, default=None, help="write every count here too")
    parser.add_argument("--rootfs", type=Path, default=None, help="arm64 rootfs (default .cache/arm/rootfs)")
    parser.add_argument("--write", action="store_true", help="write the 'arm-cost' section of docs/benchmarks.md")
    args = parser.parse_args(argv)
    build_plugin()
    work = DEFAULT_CACHE / "cost"
    work.mkdir(parents=True, exist_ok=True)
    fp32 = export_face_models(DEFAULT_CACHE / "face-fp32", progress=say)
    inputs = model_inputs(fp32, work)
    nets = [FaceModel(n.strip()) for n in args.models.split(",") if n.strip()]
    costs: list[tuple[str, str, ModelCost]] = []
    for cpu in [c.strip() for c in args.cpus.split(",") if c.strip()]:
        costs += count_cpu(cpu, nets, fp32, inputs, args)
    command = "python -m benchmarks run arm_cost " + " ".join(argv if argv is not None else sys.argv[1:])
    table = markdown(costs, command.strip())
    print(table)
    if args.write:
        from benchmarks.harness.report import machine_line, write_section

        write_section("arm-cost", SECTION_HEAD.format(machine=machine_line()) + "\n" + goals(costs) + "\n\n" + table)
    if args.json:
        rows = [{"net": n, "precision": p, **c.to_dict()} for n, p, c in costs]
        args.json.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    return 0
