"""``edge-deploy emulate``: a converted folder on an emulated Pi core (argv adapter over converters.arm)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from edge_deploy.common import command_parser, output_folder, print_json

#: Largest |guest − host| allowed per output, as a share of the host output's largest magnitude, and the
#: smallest cosine between a guest row and its host row (the face build's INT8 descriptor tolerance, 0.03 on
#: descriptors of norm ~1, is of the same order).
RELATIVE_TOLERANCE = 0.03
MIN_ROW_COSINE = 0.999


def _cores(folder: Path, given: list[str] | None, target: str) -> list[str]:
    """``--cpu`` as given, else the core of the folder's target profile (its ``cpu.model``).

    Raises:
        InputError: an unknown core, or a target whose core is not an emulated Arm core and no ``--cpu``.
    """
    from converters.arm.guest import CpuModel, cpu_model
    from edge.errors import InputError
    from edge.profiles import load_profile

    if given:
        return [cpu_model(c, given_as="--cpu").value for c in given]
    known = " or ".join(m.value for m in CpuModel)
    core = load_profile(target).cpu.model
    if core.lower() not in {m.value for m in CpuModel}:
        raise InputError(
            f"{folder}: converted for {target}, whose core {core} is not one emulate runs; give --cpu {known}"
        )
    return [core.lower()]


def output_problems(cpu: str, outputs, tolerance: float) -> list[str]:
    """Each output of ``converters.arm.model.compare`` that is further from the host than ``tolerance`` of
    the host's largest |value|, or whose smallest row cosine is under ``MIN_ROW_COSINE``."""
    return [
        f"{cpu} output {o.name}: max |difference| {o.max_abs_diff:.3g} (host's largest |value| "
        f"{o.max_abs_host:.3g}, tolerance {tolerance:g} of it), smallest row cosine {o.min_row_cosine:.6f} "
        f"(expected >= {MIN_ROW_COSINE})"
        for o in outputs
        if not (o.max_abs_diff <= tolerance * o.max_abs_host and o.min_row_cosine >= MIN_ROW_COSINE)
    ]


def _check_model(args: argparse.Namespace, folder: Path, progress) -> dict:
    from converters.arm.cost import build_plugin, measure_model
    from converters.arm.guest import ArmGuest, prepare_guest
    from converters.arm.model import check_model_folder, gate_files
    from converters.package.user_model import read_model_folder
    from edge.errors import ValidationError
    from edge.progress import timed

    model = read_model_folder(folder, given_as="")  # its files hashed once, for every core
    shipped, gated, evaluation = gate_files(model)
    cores = _cores(folder, args.cpu, model.target)
    work = Path(args.work).resolve()
    plugin = build_plugin() if args.count else None
    guest = None
    runs, problems = [], []
    for cpu in cores:
        guest = prepare_guest(cpu, progress=progress) if guest is None else ArmGuest(guest.rootfs, cpu)
        line = f"running {shipped.name} on emulated {cpu} and {gated.name} on this host ({evaluation.name})"
        with timed(progress, line, f"emulate: run {shipped.name} {cpu}"):
            outputs = check_model_folder(model, guest, work)
        problems += output_problems(cpu, outputs, args.tolerance)
        run: dict[str, Any] = {"cpu": cpu, "outputs": [o.to_dict() for o in outputs]}
        if args.count:
            line = f"counting instructions of {shipped.name} on emulated {cpu} (2 counted runs)"
            with timed(progress, line, f"emulate: count {shipped.name} {cpu}"):
                run["instructions"] = measure_model(guest, shipped, plugin=plugin, inputs_npz=evaluation).to_dict()
        runs.append(run)
    if problems:
        raise ValidationError(f"{folder} on the emulated Pi differs from the gate's arithmetic: " + "; ".join(problems))
    return {"folder": str(folder), "kind": "model", "shipped": shipped.name, "host": gated.name,
            "inputs": str(evaluation), "tolerance": args.tolerance, "cores": runs}  # fmt: skip


def _check_face(args: argparse.Namespace, folder: Path, progress) -> dict:
    from converters.arm.face import check_face_models
    from edge.errors import InputError

    if args.count:
        raise InputError(
            f"--count with {folder}: counts of a face folder come from benchmarks/arm_frame.py (per frame) and "
            "benchmarks/arm_cost.py (per model); emulate counts a convert model folder"
        )
    target = json.loads((folder / "models.json").read_text(encoding="utf-8")).get("target")
    if not isinstance(target, str) and not args.cpu:
        raise InputError(f"{folder / 'models.json'}: no 'target'; give --cpu (the folder does not name its board)")
    runs = []
    for cpu in _cores(folder, args.cpu, target):
        result = check_face_models(folder, cpu, Path(args.work).resolve() / cpu, progress=progress)
        runs.append({"cpu": cpu, "comparison": result.to_dict()})
    return {"folder": str(folder), "kind": "face", "cores": runs}


def _cmd_emulate(args: argparse.Namespace) -> int:
    from converters.package.face_folder import is_face_folder
    from edge.errors import InputError
    from edge.progress import StepProgress

    folder = Path(args.folder)
    if not (folder / "models.json").is_file():
        raise InputError(f"{folder}: no models.json; expected a folder 'convert model' or 'convert face' wrote")
    if not 0 < args.tolerance < 1:
        raise InputError(f"--tolerance {args.tolerance}; expected a share of the output's magnitude in (0, 1)")
    progress = StepProgress(stream=None if args.json or args.quiet else sys.stderr)
    check = _check_face if is_face_folder(folder) else _check_model
    with output_folder(Path(args.work), f"--work {args.work}"):
        record = check(args, folder, progress)
    if args.json:
        print_json(record)
        return 0
    for run in record["cores"]:
        if record["kind"] == "face":
            c = run["comparison"]
            print(
                f"{run['cpu']}: OK — {c['faces_guest']} of {c['faces_host']} faces on {c['photos']} photos, box "
                f"difference {c['box_max_abs_diff']:.3g}, max |descriptor difference| "
                f"{c['descriptor_max_abs_diff']:.3g}, {c['decisions_agree']} of {c['pairs']} decisions equal"
            )
            continue
        for o in run["outputs"]:
            print(
                f"{run['cpu']}: {o['name']} {'x'.join(map(str, o['shape']))}: max |difference| "
                f"{o['max_abs_diff']:.3g} of {o['max_abs_host']:.3g}, smallest row cosine {o['min_row_cosine']:.6f}"
            )
        if "instructions" in run:
            steady, first = run["instructions"]["steady"], run["instructions"]["first"]
            print(
                f"{run['cpu']}: {record['shipped']}: {steady['total'] / 1e6:.1f} M instructions an inference "
                f"(first {first['total'] / 1e6:.1f} M; NEON {steady['simd'] / max(steady['total'], 1):.0%}, "
                f"SDOT+UDOT {(steady['sdot'] + steady['udot']) / 1e6:.2f} M)"
            )
    if record["kind"] == "model":
        print(f"OK: {record['shipped']} on the emulated Pi computes what the gate measured ({record['host']} "
              f"on this host) within {record['tolerance']:g} of each output's largest |value|")  # fmt: skip
    return 0


def add_emulate(sub: argparse._SubParsersAction) -> None:
    """Register ``edge-deploy emulate``."""
    p = command_parser(
        sub,
        "emulate",
        extra="convert",
        summary="run a converted folder on an emulated Pi core (qemu-aarch64): outputs vs the gate, instructions",
        description="Run what a passed 'convert model' or 'convert face' folder ships in an arm64 guest under "
        "qemu-aarch64 and compare its outputs with what the accuracy gate measured on this host; --count adds "
        "the instructions of one inference. Needs scripts/arm/rootfs.sh, run once. Method: docs/byom.md.",
        examples="""
        # on the core of the folder's target (rpi4: Cortex-A72), on its --eval data
        edge-deploy emulate out/net
        # both Pi cores, plus executed instructions per inference
        edge-deploy emulate out/net --cpu cortex-a72 --cpu cortex-a76 --count --json
        # a convert face folder: faces, boxes, descriptors and decisions on 4 probe photos
        edge-deploy emulate out/face
        """,
    )
    p.add_argument("folder", help="a passed 'edge-deploy convert model' or 'convert face' output folder")
    p.add_argument(
        "--cpu",
        action="append",
        metavar="CORE",
        help="cortex-a72 (Pi 4), cortex-a76 (Pi 5) or cortex-a53 (Pi Zero 2 W), repeatable (default: the target's)",
    )
    p.add_argument("--count", action="store_true", help="also count instructions per inference (convert model folders)")
    p.add_argument(
        "--tolerance",
        type=float,
        default=RELATIVE_TOLERANCE,
        help=f"largest |guest - host| per output, as a share of its largest |value| (default {RELATIVE_TOLERANCE})",
    )
    p.add_argument("--work", default="out/emulate", help="folder for the guest's outputs (default: out/emulate)")
    p.add_argument("--json", action="store_true", help="print the comparison (and counts) as JSON")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress lines")
    p.set_defaults(func=_cmd_emulate)
