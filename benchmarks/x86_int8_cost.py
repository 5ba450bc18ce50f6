"""INT8 on an x86 CPU without VNNI: what each way of running the face embedder costs and computes.

On x86 without VNNI (AVX2 only), onnxruntime's fused u8s8 kernels add uint8 x int8 products in 16 bits
with saturation (docs/quantization.md, "What the gate measures"). The ways out the x86 device path can
take are reduce-range (7-bit) weights at build time, onnxruntime's u8u8 path at run time
(``session.x64quantprecision=1``, which ``edge.runtime`` sets on every x86 session) or staying fp32. This
script measures them on one footing: every variant runs in ``qemu-x86_64 -cpu Haswell`` (AVX2 and FMA,
no AVX-512, no VNNI: the CPU the first release failed on) under the project's instruction-counting TCG
plugin (scripts/arm/insncount.c), so the figures are executed x86 instructions per face on an AVX2 CPU —
exact and repeatable, not times — and each variant's descriptors are compared with fp32's on the same
real chips.

    .venv/bin/python -m benchmarks run x86_int8_cost [--faces 4] [--json out.json] [--no-doc]

Models: the race's cached fp32 folder and the INT8 builds for ``x86_64-host`` (reduce-range weights) and
``rpi4`` (full-range weights, the saturating case) from ``benchmarks/harness/face_speed_models.py``; ~10 minutes the
first time (calibration), then a few minutes of emulation.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

NAME = "x86_int8_cost"
SUMMARY = "INT8 on an AVX2-only x86 (emulated Haswell): instructions and accuracy per face"
#: the docs/benchmarks.md sections it writes
SECTIONS = ("x86-int8-cost",)

REPO = Path(__file__).resolve().parent.parent
PLUGIN = REPO / ".cache" / "arm" / "libinsncount.so"
CALIBRATION = 100

#: Runs in the emulated Haswell: warm up on chip 0, then count region 1 over the other chips, one at a time.
_CHILD = """
import json, sys
from pathlib import Path
import numpy as np
from marks import marker
from edge.cpu import int8_kernels
from edge.face.embed import FaceEmbedder
from edge.runtime import Optimization
model, chips = Path(sys.argv[1]), np.load(sys.argv[2])
optimization, precise = Optimization[sys.argv[3]], sys.argv[4] == "1"
embedder = FaceEmbedder(model, 1, optimization, precise_int8=precise)
embedder.embed(chips[:1])
mark = marker(True)
out = []
mark(1, 0)
for chip in chips[1:]:
    out.append(embedder.embed(chip[None])[0])
mark(1, 1)
print(json.dumps({"kernels": int8_kernels().describe(), "descriptors": np.asarray(out).tolist()}))
"""


@dataclass(frozen=True)
class Variant:
    """One way of running the embedder: which file, fused or not, with onnxruntime's precise u8u8 path or not."""

    name: str
    model: str  # "fp32", "x86_64-host", "rpi4"
    optimization: str  # edge.runtime.Optimization member name
    precise: bool
    note: str


VARIANTS = (
    Variant("fp32", "fp32", "ALL", True, "fp32 `.onnx`"),
    Variant("x86 int8, shipped", "x86_64-host", "ALL", True, "reduce-range weights, fused, `x64quantprecision=1`"),
    Variant("x86 int8, ORT default", "x86_64-host", "ALL", False, "7-bit weights, fused, u8s8 (cannot saturate)"),
    Variant("rpi4 int8, precise", "rpi4", "ALL", True, "full-range weights, fused, `x64quantprecision=1`"),
    Variant("rpi4 int8, ORT default", "rpi4", "ALL", False, "full-range weights, fused, u8s8 (saturating)"),
    Variant("rpi4 int8, unfused (the gate)", "rpi4", "NONE", True, "QDQ unfused: dequantize, float op, quantize"),
)


def _count(model: Path, chips: Path, variant: Variant, work: Path) -> tuple[int, dict]:
    """(instructions in region 1, the child's JSON) for one variant under the emulated Haswell."""
    counts = work / f"{variant.name.replace(' ', '_')}.txt"
    qemu = ["setarch", "x86_64", "-R", "qemu-x86_64", "-plugin", str(PLUGIN), "-d", "plugin", "-D", str(counts)]
    args = [str(model), str(chips), variant.optimization, "1" if variant.precise else "0"]
    # scripts/arm on the path for its marks.py (the region markers the plugin counts between)
    path = os.pathsep.join([str(REPO), str(REPO / "scripts" / "arm")])
    env = {**os.environ, "PYTHONPATH": path, "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [*qemu, "-cpu", "Haswell", sys.executable, "-c", _CHILD, *args],
        env=env, capture_output=True, text=True, timeout=7200, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"{variant.name}: the emulated run failed:\n{done.stderr[-3000:]}")
    region = [ln for ln in counts.read_text().splitlines() if ln.startswith("insncount: region 1 ")]
    if not region:
        raise RuntimeError(f"{counts}: no region-1 count (is {PLUGIN} the counting plugin?)")
    return int(region[0].split()[4]), json.loads(done.stdout.strip().splitlines()[-1])


def _models(faces: int) -> tuple[dict[str, Path], np.ndarray]:
    """The embedder files by model key, and ``faces + 1`` real aligned chips (uint8 NHWC)."""
    from benchmarks.harness.face_speed_models import CACHE, build_fp32, build_int8, eval_photos, real_chips
    from edge.face import models as face_models
    from edge.profiles import load_profile

    def say(line: str) -> None:
        print(f"  {line}", file=sys.stderr)

    CACHE.mkdir(parents=True, exist_ok=True)
    fp32_dir = build_fp32(CACHE, say)
    files = {"fp32": face_models.read_models_folder(fp32_dir).model_path(face_models.FaceModel.EMBEDDER.role)}
    for target in ("x86_64-host", "rpi4"):
        folder, _ = build_int8(fp32_dir, load_profile(target), CACHE, CALIBRATION, say)
        report = json.loads((folder / "quant_report.json").read_text(encoding="utf-8"))
        files[target] = folder / report["onnx_files"]["embedder"]["file"]  # the QDQ .onnx (x86 runs .onnx)
    return files, real_chips(fp32_dir, eval_photos(), faces + 1)


def _table(rows: list[dict], faces: int, kernels: str) -> str:
    fp32 = next(r["per_face"] for r in rows if r["variant"] == "fp32")
    lines = [
        f"Per face: executed x86 instructions over {faces} real chips after one warm-up, in "
        f"`qemu-x86_64 -cpu Haswell` (the guest's CPU, as `edge.cpu` saw it: {kernels}), 1 thread; "
        "mean / min cosine to the fp32 descriptors of the same chips in the same emulated CPU.",
        "",
        "| variant | what runs | M instructions / face | vs fp32 | mean cosine | min cosine |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['variant']} | {r['note']} | {r['per_face'] / 1e6:.1f} | {r['per_face'] / fp32:.2f}x "
            f"| {r['mean_cosine']:.6f} | {r['min_cosine']:.6f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--faces", type=int, default=4, help="chips counted per variant (after one warm-up)")
    parser.add_argument("--json", type=Path, help="write the rows here too")
    parser.add_argument("--no-doc", action="store_true", help="print only; leave docs/benchmarks.md alone")
    args = parser.parse_args(argv)
    if shutil.which("qemu-x86_64") is None:
        subprocess.run(["bash", str(REPO / "scripts/arm/rootfs.sh")], check=True)
    subprocess.run(["bash", str(REPO / "scripts/arm/build_plugin.sh"), str(PLUGIN)], check=True)
    from edge.cosine import row_cosines

    files, chips = _models(args.faces)
    work = Path(tempfile.mkdtemp(prefix="x86-int8-cost-"))
    np.save(work / "chips.npy", chips)
    rows, reference, kernels = [], None, "?"
    for variant in VARIANTS:
        print(f"{variant.name}: counting {args.faces} faces under qemu-x86_64 -cpu Haswell", file=sys.stderr)
        total, out = _count(files[variant.model], work / "chips.npy", variant, work)
        got = np.asarray(out["descriptors"])
        reference = got if reference is None else reference
        cos = row_cosines(got, reference)
        kernels = out["kernels"]
        row = {"variant": variant.name, "note": variant.note, "per_face": total / args.faces}
        rows.append({**row, "mean_cosine": float(cos.mean()), "min_cosine": float(cos.min())})
        print(json.dumps(rows[-1]), file=sys.stderr)
    markdown = _table(rows, args.faces, kernels)
    if args.json:
        args.json.write_text(json.dumps({"faces": args.faces, "kernels": kernels, "rows": rows}, indent=2))
    if not args.no_doc:
        from benchmarks.harness.report import machine_line, write_section

        head = "## INT8 on an AVX2-only x86 (no VNNI): instructions and accuracy per face, emulated Haswell\n\n"
        command = f"`.venv/bin/python -m benchmarks run x86_int8_cost --faces {args.faces}` — {machine_line()}\n\n"
        write_section("x86-int8-cost", head + command + markdown)
    print(markdown)
    shutil.rmtree(work, ignore_errors=True)
    return 0
