"""The rpi4 INT8 face gate's figures on this host and on an AVX2-only x86: does the verdict depend on the build host?

The face gate (``converters/face/quant_eval.py``) runs the quantized ``.onnx`` unfused, so QDQ is computed as
dequantize -> float op -> quantize whatever INT8 kernels the build machine has. This script measures that
claim on the gate's own faces: the rpi4 INT8 embedder (built as the main job builds it: 200 calibration
images, the same profile) embeds the gate's fp32 reference chips (every face the fp32 cascade finds on the
evaluation set) natively, and the same chips in ``qemu-x86_64 -cpu Haswell`` (AVX2 and FMA, no AVX-512, no
VNNI: the CPU the first release's main job failed on). For each it prints the gate's figures — mean and min
cosine to fp32, same/different decisions agreeing with fp32 — and the largest descriptor difference between
the two hosts. ``--fused`` adds the saturating case (fused, onnxruntime's default u8s8 kernels) for contrast.

    .venv/bin/python -m benchmarks run face_gate_hosts [--faces N] [--fused] [--json out.json]

The emulated run is slow (TCG; the unfused embedder is ~120 M x86 instructions a face,
benchmarks/x86_int8_cost.py): minutes for the 54 faces. The Pi's own figures (the shipped ``.ort`` on
emulated Cortex-A72/A76) are in docs/quantization.md, measured by the emulated-Pi check.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

NAME = "face_gate_hosts"
SUMMARY = "The rpi4 INT8 face gate's figures on this host and on an AVX2-only x86"
#: the docs/benchmarks.md sections it writes (none: it prints its figures)
SECTIONS = ()

REPO = Path(__file__).resolve().parent.parent

_CHILD = """
import json, sys
from pathlib import Path
import numpy as np
from edge.cpu import int8_kernels
from edge.face.embed import FaceEmbedder
from edge.runtime import Optimization
model, chips, fused = Path(sys.argv[1]), np.load(sys.argv[2]), sys.argv[3] == "1"
optimization = Optimization.ALL if fused else Optimization.NONE
# fused: onnxruntime's defaults (no session.x64quantprecision: the saturating u8s8 kernels where VNNI is missing)
embedder = FaceEmbedder(model, 1, optimization, precise_int8=not fused)
out = embedder.embed(chips)
print(json.dumps({"kernels": int8_kernels().describe(), "descriptors": out.tolist()}))
"""


def _embed(prefix: list[str], model: Path, chips: Path, fused: bool) -> tuple[str, np.ndarray]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [*prefix, sys.executable, "-c", _CHILD, str(model), str(chips), "1" if fused else "0"],
        env=env, capture_output=True, text=True, timeout=14400, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(prefix) or 'native'}: embedding failed:\n{done.stderr[-3000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    return out["kernels"], np.asarray(out["descriptors"], dtype=np.float32)


def _build(say) -> tuple[Path, object]:
    """(the rpi4 INT8 QDQ embedder, the gate's fp32 reference), built as the main job builds them."""
    from benchmarks.harness.face_speed_models import CACHE, build_fp32, build_int8
    from converters.face.calibration import chip_landmarks
    from converters.face.facedata import make_eval_set
    from converters.face.quant_eval import fp32_reference
    from converters.face.quantize import DEFAULT_CALIBRATION_COUNT
    from edge.face import models as face_models
    from edge.profiles import load_profile

    CACHE.mkdir(parents=True, exist_ok=True)
    fp32_dir = build_fp32(CACHE, say)
    folder, _ = build_int8(fp32_dir, load_profile("rpi4"), CACHE, DEFAULT_CALIBRATION_COUNT, say)
    report = json.loads((folder / "quant_report.json").read_text(encoding="utf-8"))
    fp32 = face_models.read_models_folder(fp32_dir)
    nets = fp32.model_paths(face_models.FACE_NETS)
    say("the gate's fp32 reference (the fp32 cascade over the evaluation set)")
    reference = fp32_reference(make_eval_set(0), nets, 2, chip_landmarks(fp32))
    return folder / report["onnx_files"]["embedder"]["file"], reference


def _figures(reference, vectors: np.ndarray) -> dict:
    from converters.face.quant_eval import compare_decisions
    from edge.cosine import row_cosines

    n = len(vectors)
    cos = row_cosines(reference.descriptors[:n], vectors)
    decisions = compare_decisions(reference, dict(zip(reference.keys[:n], vectors, strict=True)))
    return {"faces": n, "mean_cosine": float(cos.mean()), "min_cosine": float(cos.min()),
            "decisions": f"{decisions.agree} of {decisions.pairs}", "agreement": decisions.agreement}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--faces", type=int, help="only the first N of the gate's faces (default: all)")
    parser.add_argument("--fused", action="store_true", help="also the saturating case (fused, ORT defaults)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    model, reference = _build(lambda line: print(f"  {line}", file=sys.stderr))
    chips = Path(tempfile.mkdtemp(prefix="face-gate-hosts-")) / "chips.npy"
    np.save(chips, reference.chips[: args.faces])
    rows = {}
    for fused in (False, True) if args.fused else (False,):
        how = "fused, onnxruntime defaults" if fused else "unfused (the gate)"
        for host, prefix in (("this host", []), ("emulated Haswell", ["qemu-x86_64", "-cpu", "Haswell"])):
            print(f"{how} on {host}", file=sys.stderr)
            kernels, vectors = _embed(prefix, model, chips, fused)
            rows[(how, host)] = {"kernels": kernels, **_figures(reference, vectors), "vectors": vectors}
    heads = ("how the rpi4 INT8 embedder runs", "where (INT8 kernels)", "faces", "mean cosine", "min cosine")
    print("| " + " | ".join(heads) + " | decisions equal fp32's |")
    print("|---|---|---:|---:|---:|---:|")
    for (how, host), r in rows.items():
        print(f"| {how} | {host} ({r['kernels']}) | {r['faces']} | {r['mean_cosine']:.6f} | {r['min_cosine']:.6f} "
              f"| {r['decisions']} |")  # fmt: skip
    gate = [r["vectors"] for (how, _h), r in rows.items() if how.startswith("unfused")]
    diff = float(np.abs(gate[0] - gate[1]).max())
    print(f"\nmax |descriptor difference| between the two hosts in the gate's arithmetic: {diff:.2e}")
    if args.json:
        kept = [{"how": h, "host": w, **{k: v for k, v in r.items() if k != "vectors"}} for (h, w), r in rows.items()]
        args.json.write_text(json.dumps(kept, indent=2))
    return 0
