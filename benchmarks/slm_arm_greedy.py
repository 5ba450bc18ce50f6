"""SmolLM2's greedy agreement on the emulated Pi: the shipped INT4 model on Cortex-A72 and A76 vs fp32.

The build's greedy gate (converters/slm/agreement.py) runs on the host with every MatMulNBits at accuracy
level 0 (``converters.slm.quantize.gate_copy``), because level 4's int8 activations are computed
differently by each CPU family. This script measures what the gate cannot: the five fixed prompts, greedy,
through the *shipped* model (level 4 where the profile says so) on emulated Cortex-A72 (Pi 4, NEON) and
Cortex-A76 (Pi 5, dot product), against the host's fp32 tokens and the gate copy's tokens. Device code
only in the guest (scripts/arm/run_text.py). Instruction-exact emulation, not timing: ~1-2 min per prompt
per core.

    .venv/bin/python -m benchmarks run slm_arm_greedy [--tokens 16] [--target rpi4] [--json out.json]

``--haswell`` adds a column: the gate copy run as an AVX2-only x86 (``qemu-x86_64 -cpu Haswell``, no AVX-512,
no VNNI), against the same host fp32 tokens: what the build's greedy gate computes on an AVX2-only build host.
``--cpus ''`` skips the ARM cores.

Prints a markdown table (leading tokens equal to fp32's, of ``--tokens``) to paste into docs/slm.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from converters.arm.guest import ArmGuest, prepare_guest
from converters.arm.text import RUN_TEXT
from converters.slm.agreement import DEFAULT_PROMPTS, leading_equal
from converters.slm.build import SlmOptions, convert_slm
from converters.slm.quantize import gate_copy
from edge.profiles import Precision, load_profile

NAME = "slm_arm_greedy"
SUMMARY = "SmolLM2's greedy agreement on emulated Cortex-A72 / A76 against fp32"
#: the docs/benchmarks.md sections it writes (none: it prints its figures)
SECTIONS = ()

CPUS = ("cortex-a72", "cortex-a76")
HASWELL = ("qemu-x86_64", "-cpu", "Haswell")


def _host(model_dir: Path, prompt: str, tokens: int, out: Path, prefix: tuple[str, ...] = ()) -> list[int]:
    """Greedy tokens on this host; ``prefix`` runs the same venv python under e.g. ``qemu-x86_64 -cpu Haswell``."""
    args = ["--model", str(model_dir), "--out", str(out), "--max-new-tokens", str(tokens), "--prompt", prompt]
    subprocess.run([*prefix, sys.executable, str(RUN_TEXT), *args], check=True, capture_output=True, timeout=7200)
    return json.loads(out.read_text())["tokens"]


def _guest(guest: ArmGuest, model_dir: Path, prompt: str, tokens: int, out: Path) -> list[int]:
    args = ["--model", str(model_dir), "--out", str(out), "--max-new-tokens", str(tokens), "--prompt", prompt]
    guest.run(RUN_TEXT, args, timeout=3600)
    return json.loads(out.read_text())["tokens"]


def _folder_with(model: Path, like: Path, out: Path) -> Path:
    """A model folder: ``model`` as model.onnx beside ``like``'s tokenizer and generation settings."""
    out.mkdir(parents=True, exist_ok=True)
    for name in ("generation.json", "tokenizer.json"):
        shutil.copyfile(like / name, out / name)
    shutil.copyfile(model, out / "model.onnx")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--target", default="rpi4", help="profile whose INT4 settings are built (rpi4, rpi5)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--profiles", type=Path, help="a folder of profile files to read --target from")
    parser.add_argument("--cpus", default=",".join(CPUS), help="emulated cores, comma-separated")
    parser.add_argument("--haswell", action="store_true", help="also run the gate copy as an AVX2-only x86")
    parser.add_argument("--prompts", help="1-based numbers of the fixed prompts to run, e.g. 2,3 (default all)")
    args = parser.parse_args(argv)
    cpus = tuple(c for c in args.cpus.split(",") if c)
    picked = [int(n) for n in args.prompts.split(",")] if args.prompts else range(1, len(DEFAULT_PROMPTS) + 1)
    prompts = [DEFAULT_PROMPTS[n - 1] for n in picked]
    work = Path(tempfile.mkdtemp(prefix="slm-arm-greedy-"))
    profile = load_profile(args.target, args.profiles) if args.profiles else load_profile(args.target)
    print(f"converting SmolLM2 for {profile.name} (INT4) in {work}", file=sys.stderr)
    build = convert_slm(profile, Precision.INT4, work / "int4", options=SlmOptions(work_dir=work / "work"))
    shipped = build.out_dir
    assert build.fp32_model is not None
    fp32 = _folder_with(build.fp32_model, shipped, work / "fp32")
    gated_model, _ = gate_copy(shipped / "model.onnx", work / "gate-model.onnx")
    gate = _folder_with(gated_model, shipped, work / "gate")
    guests = {cpu: prepare_guest(cpu) for cpu in cpus}
    rows = []
    for i, prompt in enumerate(prompts):
        print(f"prompt {i + 1}/{len(prompts)}: {prompt}", file=sys.stderr)
        ref = _host(fp32, prompt, args.tokens, work / f"fp32-{i}.json")
        row = {"prompt": prompt, "fp32_tokens": ref}
        row["host_gate"] = leading_equal(ref, _host(gate, prompt, args.tokens, work / f"gate-{i}.json"))
        row["host_shipped"] = leading_equal(ref, _host(shipped, prompt, args.tokens, work / f"host-{i}.json"))
        if args.haswell:
            avx2 = _host(gate, prompt, args.tokens, work / f"haswell-{i}.json", HASWELL)
            row["haswell_gate"] = leading_equal(ref, avx2)
        for cpu, guest in guests.items():
            row[cpu] = leading_equal(ref, _guest(guest, shipped, prompt, args.tokens, work / f"{cpu}-{i}.json"))
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)
    extra = ("haswell_gate",) if args.haswell else ()
    haswell_head = ["gate on emulated Haswell (AVX2)"] if extra else []
    heads = ["gate (host, level 0)", "shipped on this host", *haswell_head, *cpus]
    print("| prompt | " + " | ".join(heads) + " |")
    print("|---|" + "---:|" * len(heads))
    for r in rows:
        cells = [r["host_gate"], r["host_shipped"], *(r[c] for c in extra), *(r[c] for c in cpus)]
        print(f"| {r['prompt']} | " + " | ".join(f"{c} of {len(r['fp32_tokens'])}" for c in cells) + " |")
    if args.json:
        args.json.write_text(json.dumps({"target": profile.name, "tokens": args.tokens, "rows": rows}, indent=2))
    shutil.rmtree(work, ignore_errors=True)
    return 0
