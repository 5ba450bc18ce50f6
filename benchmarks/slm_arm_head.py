"""SmolLM2's LM head alone on emulated Cortex-A72 (Pi 4) and A76 (Pi 5): instructions per token of each way
to compute ``hidden [1, 1, 576] @ E^T -> logits [1, 1, 49152]`` from the Q8_0 tied table.

Every variant is a one-head ONNX model with the shape and storage of the SmolLM2 build (codes
``[49152, 18, 32]`` uint8, zero point 128, one scale per block of 32), counted by
``converters.arm.cost.measure_model`` (steady state, mean of k = 2 inferences, one thread):

- ``q8-nbits-l4`` / ``-l0``: the 8-bit ``MatMulNBits`` at accuracy level 4 / 0 (what the builds had);
  ``q8-nbits-l4-top8``: the same plus the exact top-8 logits (``grid_quant._exact_head``), as shipped.
- ``fp32-gemm``: ``Gemm(x, E, transB=1)`` over the fp32 table ``E [49152, 576]`` made at load by a constant
  subgraph ``(Cast(codes) - 128) * scales`` from the same codes (file unchanged, the table in memory in
  fp32: 113 MB); the tied embedding can ``Gather`` its rows from that same table.
- ``fp32-matmul``: ``MatMul(x, E^T)`` over a folded ``[576, 49152]`` copy (the layout the export has).
- ``int8-matmulinteger``: ``DynamicQuantizeLinear(x)`` (per-tensor uint8) and one ``MatMulInteger`` per
  block of 32 inputs (batched: ``[18, 1, 32] x [18, 32, 49152]``), scaled per block and summed.
- ``q4-nbits-l0`` / ``-l4``: the table re-rounded to 4 bits (lossy; cost only).

    .venv/bin/python -m benchmarks run slm_arm_head [--cpus cortex-a72,cortex-a76] [--variants a,b] [--write]

Prints a markdown table; ``--write`` puts it in docs/benchmarks.md (section ``slm-arm-head``). Random codes
and scales (instruction counts of these dense kernels do not depend on the values); input: a seeded normal
hidden state.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

from benchmarks.harness.report import machine_line, say, write_section
from benchmarks.harness.slm_speed_models import CACHE
from converters.arm.cost import DEFAULT_PLUGIN, InsnCounts, ModelCost, build_plugin, measure_model
from converters.arm.guest import prepare_guest

NAME = "slm_arm_head"
SUMMARY = "SmolLM2's LM head alone on emulated Cortex-A72 / A76: instructions per token of each way"
#: the docs/benchmarks.md sections it writes
SECTIONS = ("slm-arm-head",)

VOCAB, HIDDEN, BLOCK = 49152, 576, 32
WORK = CACHE / "slm-arm-head"


def _table(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Codes uint8 ``[VOCAB, HIDDEN/32, 32]`` (zero point 128, Q8_0's -127..127) and fp32 scales ``[VOCAB, 18]``."""
    rng = np.random.default_rng(seed)
    codes = (rng.integers(-127, 128, (VOCAB, HIDDEN // BLOCK, BLOCK)) + 128).astype(np.uint8)
    scales = rng.uniform(0.001, 0.02, (VOCAB, HIDDEN // BLOCK)).astype(np.float16).astype(np.float32)
    return codes, scales


def _save(nodes: list, inits: list, path: Path) -> Path:
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        nodes,
        "lm_head",
        [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, [1, 1, HIDDEN])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 1, VOCAB])],
        inits,
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def nbits_head(path: Path, bits: int, level: int, top_k: int = 0) -> Path:
    """The build's head: ``MatMulNBits`` (``grid_quant._replace``), with exact top-k logits when ``top_k``."""
    import onnx
    from onnx import helper

    from converters.slm import grid_quant

    codes, scales = _table()
    values = (codes.astype(np.float32) - 128) * scales[:, :, None]  # [V, 18, 32]
    weight = values.reshape(VOCAB, HIDDEN).T  # [K, N]
    grid = grid_quant.reround_int8(weight)
    if bits == 4:  # symmetric 4-bit round-to-nearest of the same table (lossy: cost only)
        blocks = weight.reshape(HIDDEN // BLOCK, BLOCK, VOCAB)
        d = np.abs(blocks).max(axis=1) / 7.0
        q = np.clip(np.rint(blocks / np.where(d == 0, 1, d)[:, None]), -8, 7) + 8
        grid = grid_quant.GridWeight(4, grid_quant._codes(q, VOCAB, HIDDEN), d.T.astype(np.float32), None)
    w = grid_quant._Writer(onnx)
    node = helper.make_node("MatMul", ["hidden", "lm_head.weight"], ["logits"], name="/lm_head/MatMul")
    scales_name = grid_quant._replace(w, node, grid, level)
    if top_k:
        table = grid_quant._Table("lm_head.weight_grid_q8", scales_name, VOCAB, HIDDEN)
        head = next(n for n in w.nodes if n.op_type == "MatMulNBits")
        grid_quant._exact_head(w, head, table, top_k)
    return _save(w.nodes, w.inits, path)


def _fp32_table(transposed: bool) -> tuple[list, list]:
    """Nodes making the fp32 table from the codes at load (a constant subgraph onnxruntime folds)."""
    from onnx import TensorProto, helper, numpy_helper

    codes, scales = _table()
    inits = [
        numpy_helper.from_array(codes, "embed_codes"),
        numpy_helper.from_array(scales.astype(np.float16)[:, :, None], "embed_scales_fp16"),
        numpy_helper.from_array(np.array(128, np.float32), "embed_zero"),
        numpy_helper.from_array(np.array([VOCAB, HIDDEN], np.int64), "embed_shape"),
    ]
    nodes = [
        helper.make_node("Cast", ["embed_codes"], ["embed_codes_f"], to=TensorProto.FLOAT),
        helper.make_node("Sub", ["embed_codes_f", "embed_zero"], ["embed_centred"]),
        helper.make_node("Cast", ["embed_scales_fp16"], ["embed_scales"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["embed_centred", "embed_scales"], ["embed_blocks"]),
        helper.make_node("Reshape", ["embed_blocks", "embed_shape"], ["embed_table"]),
    ]
    if transposed:
        nodes.append(helper.make_node("Transpose", ["embed_table"], ["embed_table_t"], perm=[1, 0]))
    return nodes, inits


def fp32_gemm_head(path: Path) -> Path:
    from onnx import helper, numpy_helper

    nodes, inits = _fp32_table(transposed=False)
    inits += [
        numpy_helper.from_array(np.array([-1, HIDDEN], np.int64), "rows_shape"),
        numpy_helper.from_array(np.array([1, 1, VOCAB], np.int64), "logits_shape"),
    ]
    nodes += [
        helper.make_node("Reshape", ["hidden", "rows_shape"], ["hidden_rows"]),
        helper.make_node("Gemm", ["hidden_rows", "embed_table"], ["logits_rows"], transB=1),
        helper.make_node("Reshape", ["logits_rows", "logits_shape"], ["logits"]),
    ]
    return _save(nodes, inits, path)


def fp32_matmul_head(path: Path) -> Path:
    from onnx import helper

    nodes, inits = _fp32_table(transposed=True)
    nodes.append(helper.make_node("MatMul", ["hidden", "embed_table_t"], ["logits"]))
    return _save(nodes, inits, path)


def matmulinteger_head(path: Path) -> Path:
    """Per-tensor uint8 activations x the 8-bit codes, one MatMulInteger per block of 32 (batched)."""
    from onnx import TensorProto, helper, numpy_helper

    codes, scales = _table()
    nb = HIDDEN // BLOCK
    inits = [
        numpy_helper.from_array(np.ascontiguousarray(codes.transpose(1, 2, 0)), "head_codes_t"),  # [18, 32, V]
        numpy_helper.from_array(np.array(128, np.uint8), "head_zero"),
        numpy_helper.from_array(np.ascontiguousarray(scales.T[:, None, :]), "head_scales_t"),  # [18, 1, V]
        numpy_helper.from_array(np.array([-1, nb, BLOCK], np.int64), "blocks_shape"),
        numpy_helper.from_array(np.array([0], np.int64), "axis0"),
        numpy_helper.from_array(np.array([1, 1, VOCAB], np.int64), "logits_shape"),
    ]
    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["hidden"], ["xq", "x_scale", "x_zero"]),
        helper.make_node("Reshape", ["xq", "blocks_shape"], ["xq_blocks"]),
        helper.make_node("Transpose", ["xq_blocks"], ["xq_t"], perm=[1, 0, 2]),  # [18, rows, 32]
        helper.make_node("MatMulInteger", ["xq_t", "head_codes_t", "x_zero", "head_zero"], ["acc"]),
        helper.make_node("Cast", ["acc"], ["acc_f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["acc_f", "head_scales_t"], ["acc_scaled"]),
        helper.make_node("ReduceSum", ["acc_scaled", "axis0"], ["sum"], keepdims=0),
        helper.make_node("Mul", ["sum", "x_scale"], ["logits_rows"]),
        helper.make_node("Reshape", ["logits_rows", "logits_shape"], ["logits"]),
    ]
    return _save(nodes, inits, path)


def fp32_blocks_head(path: Path) -> Path:
    """Per-block fp32 products over ``Cast(codes)`` only (the folded table needs no scale multiply): the 18
    partial sums per logit get the zero point (128 x block sum of x) and the block scales afterwards."""
    from onnx import TensorProto, helper, numpy_helper

    codes, scales = _table()
    nb = HIDDEN // BLOCK
    inits = [
        numpy_helper.from_array(codes, "head_codes"),  # [V, 18, 32], as the build stores them
        numpy_helper.from_array(np.ascontiguousarray(scales.T[:, None, :]).astype(np.float16), "scales_t16"),
        numpy_helper.from_array(np.array([-1, nb, BLOCK], np.int64), "blocks_shape"),
        numpy_helper.from_array(np.array([-1], np.int64), "last"),
        numpy_helper.from_array(np.array([0], np.int64), "first"),
        numpy_helper.from_array(np.array(128, np.float32), "zero"),
        numpy_helper.from_array(np.array([1, 1, VOCAB], np.int64), "logits_shape"),
    ]
    nodes = [
        helper.make_node("Transpose", ["head_codes"], ["codes_t"], perm=[1, 2, 0]),  # [18, 32, V] uint8
        helper.make_node("Cast", ["codes_t"], ["table_t"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["scales_t16"], ["scales_t"], to=TensorProto.FLOAT),  # [18, 1, V]
        helper.make_node("Reshape", ["hidden", "blocks_shape"], ["x_blocks"]),
        helper.make_node("Transpose", ["x_blocks"], ["xb"], perm=[1, 0, 2]),  # [18, rows, 32]
        helper.make_node("MatMul", ["xb", "table_t"], ["dots"]),  # [18, rows, V]
        helper.make_node("ReduceSum", ["xb", "last"], ["bsum"], keepdims=1),
        helper.make_node("Mul", ["bsum", "zero"], ["offset"]),
        helper.make_node("Sub", ["dots", "offset"], ["centred"]),
        helper.make_node("Mul", ["centred", "scales_t"], ["scaled"]),
        helper.make_node("ReduceSum", ["scaled", "first"], ["logits_rows"], keepdims=0),
        helper.make_node("Reshape", ["logits_rows", "logits_shape"], ["logits"]),
    ]
    return _save(nodes, inits, path)


VARIANTS: dict[str, Callable[[Path], Path]] = {
    "q8-nbits-l4": lambda p: nbits_head(p, 8, 4),
    "q8-nbits-l4-top8": lambda p: nbits_head(p, 8, 4, top_k=8),
    "q8-nbits-l0": lambda p: nbits_head(p, 8, 0),
    "fp32-gemm": fp32_gemm_head,
    "fp32-matmul": fp32_matmul_head,
    "int8-matmulinteger": matmulinteger_head,
    "fp32-blocks": fp32_blocks_head,
    "q4-nbits-l0": lambda p: nbits_head(p, 4, 0),
    "q4-nbits-l4": lambda p: nbits_head(p, 4, 4),
}
NOTES = {
    "q8-nbits-l4": "8-bit MatMulNBits, level 4",
    "q8-nbits-l4-top8": "the same + exact top-8 logits: rpi5's head (and rpi4's before `quant.lm_head`)",
    "q8-nbits-l0": "8-bit MatMulNBits, level 0",
    "fp32-gemm": "Gemm(x, E, transB=1), E fp32 [49152, 576] folded at load from the codes: rpi4's head",
    "fp32-matmul": "MatMul(x, E^T), E^T fp32 [576, 49152] folded at load",
    "int8-matmulinteger": "DynamicQuantizeLinear + MatMulInteger per 32-block (batched), 8-bit codes",
    "fp32-blocks": "MatMul per 32-block (batched) over Cast(codes) folded at load, scales after",
    "q4-nbits-l0": "4-bit MatMulNBits (re-rounded: lossy), level 0",
    "q4-nbits-l4": "4-bit MatMulNBits (re-rounded: lossy), level 4",
}
RUNTIME_MB = {  # what the head's weights take in memory after load (MB, 1e6 bytes)
    "q8-nbits-l4": VOCAB * HIDDEN * (1 + 4 / BLOCK) / 1e6,
    "q8-nbits-l4-top8": VOCAB * HIDDEN * (1 + 4 / BLOCK) / 1e6,
    "q8-nbits-l0": VOCAB * HIDDEN * (1 + 4 / BLOCK) / 1e6,
    "fp32-gemm": VOCAB * HIDDEN * 4 / 1e6,
    "fp32-matmul": VOCAB * HIDDEN * 4 / 1e6,
    "int8-matmulinteger": VOCAB * HIDDEN * (1 + 4 / BLOCK) / 1e6,
    "fp32-blocks": VOCAB * HIDDEN * 4 / 1e6,
    "q4-nbits-l0": VOCAB * HIDDEN * (0.5 + 4 / BLOCK) / 1e6,
    "q4-nbits-l4": VOCAB * HIDDEN * (0.5 + 4 / BLOCK) / 1e6,
}


# VmHWM, not getrusage's ru_maxrss: the latter carries the parent's peak over fork + exec
_RSS_CHILD = """
import sys, numpy as np
from edge.runtime.ort_session import build_session
def status(key):
    return next(int(x.split()[1]) for x in open('/proc/self/status') if x.startswith(key)) / 1024
base = status('VmRSS:')
s = build_session(sys.argv[1], 1)
if len(sys.argv) < 3:
    s.run(None, {'hidden': np.ones((1, 1, 576), np.float32)})
print(status('VmRSS:') - base, status('VmHWM:') - base)
"""


def host_rss(model: Path, run: bool = True) -> tuple[float, float]:
    """(MB more resident after load and one run, MB more at the peak) of a fresh host process, onnxruntime at
    optimisation ALL: what the model costs in memory, including what folding constants at load takes.
    ``run=False``: load only (a whole decoder, whose inputs this child does not make)."""
    args = [sys.executable, "-c", _RSS_CHILD, str(model), *([] if run else ["--load-only"])]
    out = subprocess.run(args, check=True, capture_output=True, text=True, timeout=600)
    after, peak = map(float, out.stdout.split()[-2:])
    return after, peak


def markdown(costs: list[tuple[str, ModelCost]], rss: dict[str, tuple[float, float]], command: str) -> str:
    lines = [
        "| variant | what | weights (MB) | host RSS after load / peak at load (MB) | core | M instr. / token "
        "| NEON share | SDOT+UDOT | repeat noise |",
        "|---|---|---:|---:|---|---:|---:|---:|---:|",
    ]
    for name, c in costs:
        s = c.steady
        after, peak = rss.get(name, (float("nan"), float("nan")))
        lines.append(
            f"| `{name}` | {NOTES[name]} | {RUNTIME_MB[name]:.1f} | {after:.0f} / {peak:.0f} | {c.cpu} | "
            f"{s.total / 1e6:.1f} | {s.simd_share:.0%} | {(s.sdot + s.udot) / 1e6:.2f} M | "
            f"{c.repeat_noise / 1e6:.2f} M |"
        )
    return f"""## ARM race, the LM head alone: SmolLM2's 49152 x 576 head on emulated Cortex-A72 and A76

One head model per variant (`benchmarks/slm_arm_head.py`: the SmolLM2 head's shape and storage, random
codes), one thread, onnxruntime 1.32 at graph optimisation ALL; steady-state instructions per call
(= per decoded token), `converters.arm.cost.measure_model`, k = 2. Weights: what the head's weights take
once loaded; host RSS: a fresh process on this host loading the head alone and running it once (the
peak includes the constants onnxruntime folds at load; the fp32 variants fold 113 MB tables).
Machine: {machine_line()} (the host's CPU features do not enter the counts of the emulated cores).

{chr(10).join(lines)}

`{command}`
"""


def load_costs(path: Path) -> dict[tuple[str, str], ModelCost]:
    """Costs measured by an earlier run, by (core, variant): a variant is counted once unless ``--fresh``."""
    if not path.is_file():
        return {}
    done = {}
    for name, d in json.loads(path.read_text(encoding="utf-8")):
        parts = {k: InsnCounts(**d[k]) for k in ("whole", "first", "steady")}
        done[(d["cpu"], name)] = ModelCost(d["model"], d["cpu"], d["backend"], **parts, repeat_noise=d["repeat_noise"])
    return done


def count(cpus: str, models: dict[str, Path], hidden: Path, k: int, fresh: bool) -> list[tuple[str, ModelCost]]:
    """Steady-state counts of every model on every core, resumed from ``costs.json`` unless ``fresh``."""
    plugin = build_plugin(DEFAULT_PLUGIN)
    store = WORK / "costs.json"
    done = {} if fresh else load_costs(store)
    costs: list[tuple[str, ModelCost]] = []
    for cpu in [c for c in cpus.split(",") if c]:
        guest = None
        for name, model in models.items():
            if (cpu, name) not in done:
                guest = guest or prepare_guest(cpu, progress=say)
                say(f"{cpu}: {name}")
                done[(cpu, name)] = measure_model(guest, model, "onnxruntime", k=k, plugin=plugin, input_npy=hidden)
                say(f"{cpu}: {name}: {done[(cpu, name)].steady.total / 1e6:.1f} M / token")
                store.write_text(json.dumps([[n, c.to_dict()] for (_, n), c in done.items()], indent=1) + "\n")
            costs.append((name, done[(cpu, name)]))
    return costs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpus", default="cortex-a72,cortex-a76")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--k", type=int, default=2)
    parser.add_argument("--fresh", action="store_true", help="count again what an earlier run counted")
    parser.add_argument(
        "--whole",
        nargs="*",
        type=Path,
        default=[],
        help="also: host memory of loading these whole SLM builds' model.onnx",
    )
    parser.add_argument("--write", action="store_true", help="write the table into docs/benchmarks.md")
    args = parser.parse_args(argv)
    names = [v for v in args.variants.split(",") if v]
    unknown = sorted(set(names) - set(VARIANTS))
    if unknown:
        parser.error(f"unknown variants {unknown}; expected some of {sorted(VARIANTS)}")
    WORK.mkdir(parents=True, exist_ok=True)
    hidden = WORK / "hidden.npy"
    np.save(hidden, np.random.default_rng(1).standard_normal((1, 1, HIDDEN)).astype(np.float32))
    models = {}
    for name in names:
        path = WORK / f"{name}.onnx"
        if not path.is_file():
            say(f"writing {path.name}")
            VARIANTS[name](path)
        models[name] = path
    costs = count(args.cpus, models, hidden, args.k, args.fresh)
    rss = {}
    for name in names:
        say(f"host memory: {name}")
        rss[name] = host_rss(models[name])
    command = "python -m benchmarks run slm_arm_head " + " ".join(sys.argv[1:])
    text = markdown(costs, rss, command.strip())
    for folder in args.whole:
        after, peak = host_rss(folder / "model.onnx", run=False)
        settings = json.loads((folder / "report.json").read_text(encoding="utf-8"))["settings"]
        text += (
            f"\nWhole decoder `{folder.name}` (fp32_head = {settings.get('fp32_head', 0)}), loaded on this host: "
            f"+{after:.0f} MB resident after load, +{peak:.0f} MB at the peak.\n"
        )
    print(text)
    if args.write:
        print(f"wrote {write_section('slm-arm-head', text)}", file=sys.stderr)
    return 0
