"""A user's model on the Pi's cores: executed instructions per inference of a ``convert model`` folder.

For each passed ``edge-deploy convert model`` output folder: the fp32 ONNX copy it checked against the source
and the file it ships (models.json: the INT8 ``.ort``, or the fp32 one), each run in the arm64 guest
(``converters.arm.guest``) under the counting TCG plugin (``converters.arm.cost.measure_model``, single
thread, first inference and steady state apart) on the first batch (the model's, 1 when dynamic) of the
folder's own evaluation data (report.json's ``evaluation.file``, a ``.npz``; ``--inputs`` for another, or
random values with ``--random``). Counts are exact and do not depend on the machine's load.

    .venv/bin/python -m benchmarks run byom_arm_cost out/net [out/other ...] [--cpus cortex-a72,cortex-a76] [--write]

Each folder runs on the core of the profile it was converted for (models.json ``target``: rpi4 on the
Cortex-A72, rpi5 on the A76, the A53 boards on the A53), or on every core ``--cpus`` names.

Prints a markdown table; ``--write`` puts it in docs/benchmarks.md (section ``byom-arm-cost``).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from benchmarks.harness.report import machine_line, say, write_section
from converters.arm.cost import ModelCost, build_plugin, measure_model
from converters.arm.guest import prepare_guest
from converters.arm.model import evaluation_file
from converters.package.user_model import read_model_folder
from edge.errors import InputError
from edge.profiles import load_profile

NAME = "byom_arm_cost"
SUMMARY = "A convert model folder's instructions per inference on emulated Pi cores"
#: the docs/benchmarks.md sections it writes
SECTIONS = ("byom-arm-cost",)


@dataclass(frozen=True)
class Plan:
    """What to count for one folder, read once: on which cores, which files, on what inputs."""

    folder: Path
    cores: tuple[str, ...]
    contenders: tuple[tuple[str, Path], ...]  # (label, file): the fp32 ONNX copy, then the shipped file
    inputs: Path | None  # None: seeded random values


def plan(folder: Path, cpus: str | None, given: Path | None, random: bool) -> Plan:
    """``--cpus``, else the emulated core of the folder's target profile (its ``cpu.model``); the fp32 copy
    and the shipped file when it is another; ``--inputs``, else the folder's evaluation .npz."""
    model = read_model_folder(folder)  # the gate passed and every file has its recorded sha256
    cores = tuple(cpus.split(",")) if cpus else (load_profile(model.target).cpu.model.lower(),)
    shipped = model.models["models"][0]
    fp32 = model.report.get("files", {}).get("fp32_onnx", {}).get("file")
    out = [("fp32 ONNX", folder / fp32)] if fp32 else []
    if shipped["file"] != fp32:
        kind = f"{shipped['precision']} ({Path(shipped['file']).suffix.lstrip('.')})"
        out.append((f"shipped {kind}", folder / shipped["file"]))
    try:
        inputs = None if random else given or evaluation_file(model)
    except InputError as exc:
        raise SystemExit(f"{exc}; or give --inputs FILE.npz or --random") from None
    return Plan(folder, cores, tuple(out), inputs)


def table(rows: list[tuple[str, str, ModelCost]], inputs: dict[str, str]) -> str:
    lines = [
        "## A user's model on the Pi's cores (`convert model` folders)",
        "",
        f"`.venv/bin/python -m benchmarks run byom_arm_cost {' '.join(inputs)}` — {machine_line()} (instruction "
        "counts of the emulated cores: the host's CPU features do not enter them)",
        "",
        "Executed AArch64 instructions of one inference in the arm64 guest under `qemu-aarch64 -cpu CORE` and the "
        "counting plugin, 1 thread, the device runtime (`edge.runtime`, onnxruntime); steady state (mean of 2 "
        "after the first) and the first inference apart. Inputs: " + "; ".join(f"{k}: {v}" for k, v in inputs.items()),
        "",
        "| folder | model | core | M instr. steady | M first | NEON % | SDOT+UDOT | vs fp32 |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    fp32 = {(f, c.cpu): c.steady.total for f, label, c in rows if label == "fp32 ONNX"}
    for folder, label, c in rows:
        base = fp32.get((folder, c.cpu))
        ratio = f"{c.steady.total / base:.3f}×" if base else "—"
        neon = 100.0 * c.steady.simd / c.steady.total if c.steady.total else 0.0
        lines.append(
            f"| {folder} | {label} | {c.cpu} | {c.steady.total / 1e6:.1f} | {c.first.total / 1e6:.1f} | {neon:.0f} | "
            f"{(c.steady.sdot + c.steady.udot) / 1e6:.2f} M | {ratio} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path, help="passed convert model output folders")
    parser.add_argument("--cpus", help="comma list of cores for every folder (default: each folder's target's core)")
    parser.add_argument("--inputs", type=Path, help=".npz of every input (default: each folder's evaluation file)")
    parser.add_argument("--random", action="store_true", help="seeded random inputs instead")
    parser.add_argument("--write", action="store_true", help="write the byom-arm-cost section of docs/benchmarks.md")
    args = parser.parse_args(argv)
    plugin = build_plugin()
    plans = [plan(folder, args.cpus, args.inputs, args.random) for folder in args.folders]
    inputs = {
        str(p.folder): f"the first batch of `{p.inputs.name}`" if p.inputs else "seeded random values" for p in plans
    }
    rows = []
    for cpu in sorted({cpu for p in plans for cpu in p.cores}):
        guest = prepare_guest(cpu, progress=say)
        for p in [p for p in plans if cpu in p.cores]:
            for label, path in p.contenders:
                say(f"{p.folder.name}: {label} {path.name} on {cpu}")
                cost = measure_model(guest, path, plugin=plugin, inputs_npz=p.inputs)
                say(f"  {cost.steady.total / 1e6:.1f} M instructions steady (repeat noise {cost.repeat_noise})")
                rows.append((p.folder.name, label, cost))
    markdown = table(rows, inputs)
    print(markdown)
    if args.write:
        print(f"wrote {write_section('byom-arm-cost', markdown)}", file=sys.stderr)
    return 0
