"""How much the bench runner's timing loop costs over a bare ``session.run`` loop (goal: <= 3 %).

Both loops drive the same onnxruntime session on the same feeds, in interleaved blocks (the order flips
every block, so drift on a noisy machine hits both alike). "ours" is ``edge.bench.run_bench``'s timed
loop (its ``duration_s``: per-run clock reads, the prepared call, the output dict); "bare" is
``for _ in range(n): session.run(None, feeds)``. The overhead is the median of the per-block ratios.
Blocks last about ``--block-seconds`` (at most ``--runs`` runs), so a slow model doesn't take minutes.

    .venv/bin/python -m benchmarks run runner_overhead            # tiny conv + dlib face embedder (fp32, batch 1)
    .venv/bin/python -m benchmarks run runner_overhead --model face.onnx --shape input=1x3x150x150

Prints a markdown table and, for the default models, writes it into docs/benchmarks.md (section
``runner-overhead``). The face embedder is the real fp32 ONNX export of dlib's ResNet-29, built once into
``.cache/bench/face-fp32`` by ``benchmarks/harness/face_speed_models.py``. Host side: builds its models with onnx/torch.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.harness.overhead_stats import block_order, paired_ratios, runs_per_block, summarize_ratios
from benchmarks.harness.report import machine_line, write_section
from edge.bench import make_inputs, parse_shape_overrides, run_bench, timed_loop
from edge.runtime import open_model
from edge.runtime.ort_session import import_onnxruntime

NAME = "runner_overhead"
SUMMARY = "The bench runner's timing loop against a bare session.run loop"
#: the docs/benchmarks.md sections it writes
SECTIONS = ("runner-overhead",)

SECTION = "runner-overhead"
#: The runner's goal: its loop costs at most this much over a bare session.run loop.
GOAL_PCT = 3.0
EMBEDDER_SHAPE = {"chip": (1, 3, 150, 150)}


def build_tiny(folder: Path) -> Path:
    """A tiny conv 3->4 on 16x16 (tens of microseconds): where the loop's own cost shows most."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = (np.random.default_rng(0).standard_normal((4, 3, 3, 3)) * 0.1).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["c0"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c0"], ["r0"]),
        helper.make_node("GlobalAveragePool", ["r0"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 1, 1])],
        [numpy_helper.from_array(w, "w0")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    path = folder / "tiny.onnx"
    onnx.save(model, str(path))
    return path


def build_models(folder: Path) -> dict[str, tuple[Path, dict[str, tuple[int, ...]]]]:
    """The tiny conv and the real dlib ResNet-29 face embedder (fp32 ONNX, batch 1, 150x150 chip)."""
    from benchmarks.harness.face_speed_models import CACHE, build_fp32

    face_dir = build_fp32(CACHE, lambda msg: print(f"[runner-overhead] {msg}", file=sys.stderr))
    return {
        "tiny conv 3->4, 16x16": (build_tiny(folder), {}),
        "dlib ResNet-29 face embedder, fp32, 1x3x150x150": (face_dir / "face_embedder.onnx", EMBEDDER_SHAPE),
    }


def measure(path: Path, shapes: dict, threads: int, blocks: int, runs: int, block_s: float) -> dict[str, float]:
    """Interleaved blocks of the two loops; per-inference medians and the median of per-block ratios.

    Each block has ``runs`` inferences, fewer for slow models (about ``block_s`` seconds, at least 5).
    """
    with open_model(path, threads=threads, backend="onnxruntime") as model:
        feeds = make_inputs(model.inputs, shapes, seed=0)
        session = model.session
        t0 = time.perf_counter()
        for _ in range(20):
            session.run(None, feeds)
        n = runs_per_block((time.perf_counter() - t0) / 20, block_s, 5, runs)
        bare: list[float] = []
        ours: list[float] = []
        for block in range(blocks):
            for which in block_order(("bare", "ours"), block):
                if which == "bare":
                    t0 = time.perf_counter()
                    for _ in range(n):
                        session.run(None, feeds)
                    bare.append((time.perf_counter() - t0) / n)
                else:
                    ours.append(run_bench(model, feeds, count=n, warmup=0).duration_s / n)
    summary = summarize_ratios(paired_ratios(ours, bare))
    return {
        "runs": n,
        "bare_us": statistics.median(bare) * 1e6,
        "ours_us": statistics.median(ours) * 1e6,
        "extra_us": statistics.median(o - b for o, b in zip(ours, bare, strict=True)) * 1e6,
        "ratio": summary.median,
        "ratio_q1": summary.q1,
        "ratio_q3": summary.q3,
    }


def fixed_cost_ns(runs: int = 2_000, repeats: int = 300) -> float:
    """The loop's own cost per run, noise-free: both loops around a stand-in ``run`` that does nothing.

    "ours" wraps it exactly as OnnxRuntimeModel.prepare does (output dict) inside run_bench's timed loop;
    the minimum over many short repeats removes scheduler noise, so this is the cost the model latency is compared
    with: the runner stays within 3 % for any model slower than fixed_cost / 0.03.
    """
    names, feeds, out = ["y"], {"x": None}, [None]

    def run(_names: object, _feeds: object) -> list[None]:
        return out

    def call() -> dict[str, None]:
        return dict(zip(names, run(names, feeds)))  # noqa: B905 (as OnnxRuntimeModel.prepare)

    bare, ours = [], []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        for _ in range(runs):
            run(None, feeds)
        bare.append(time.perf_counter_ns() - t0)
        ours.append(timed_loop(call, runs, 0)[1])
    return (min(ours) - min(bare)) / runs


def render(rows: list[tuple[str, dict[str, float]]], cost_ns: float, args: argparse.Namespace) -> str:
    """The markdown section: setup line, table with a verdict per model, fixed loop cost, command, machine."""
    lines = [
        "## Runner loop overhead",
        "",
        f"Goal: the runner's loop costs <= {GOAL_PCT:.0f} % over a bare `session.run` loop. "
        f"onnxruntime {import_onnxruntime().__version__}, {args.threads} thread(s), {platform.machine()}, "
        f"Python {platform.python_version()}; {args.blocks} interleaved block pairs (order flips every block); "
        "overhead = median of the per-block time ratios (run_bench loop / bare loop).",
        "",
        "| model | runs/block | bare session.run (us/run) | run_bench loop (us/run) | extra per run (us) "
        "| overhead (median of block ratios) | block ratios p25..p75 | goal <= 3 % |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, r in rows:
        pct = 100 * (r["ratio"] - 1)
        lines.append(
            f"| {name} | {r['runs']:.0f} | {r['bare_us']:.1f} | {r['ours_us']:.1f} | {r['extra_us']:+.2f} "
            f"| {pct:+.2f} % | {100 * (r['ratio_q1'] - 1):+.1f} % .. {100 * (r['ratio_q3'] - 1):+.1f} % "
            f"| {'met' if pct <= GOAL_PCT else '**missed**'} |"
        )
    lines += [
        f"\n{name} misses the goal: the loop adds {r['extra_us']:.2f} us per run here (median of the per-block "
        f"differences; around a no-op it is {cost_ns:.0f} ns, below), more than 3 % of its "
        f"{r['bare_us']:.1f} us inference; by this measurement the goal holds for models slower than about "
        f"{r['extra_us'] / 0.03:.0f} us per run. The per-run clock reads and output dict are what the runner "
        "needs to report per-run latencies; a model this fast is better timed in batches of runs."
        for name, r in rows
        if 100 * (r["ratio"] - 1) > GOAL_PCT and r["extra_us"] > 0
    ]
    lines += [
        "",
        f"Fixed loop cost (two clock reads, the output dict, the sample store; min of 300 x 2000 runs around a "
        f"no-op): {cost_ns:.0f} ns per run, so the runner stays within 3 % for any model slower than "
        f"{cost_ns / 0.03 / 1000:.1f} us per inference. On the millisecond face embedder that cost is far below "
        "this machine's block-to-block noise (the p25..p75 spread), so its median ratio scatters around 0 %.",
        "",
        f"Command: `.venv/bin/python -m benchmarks run runner_overhead --threads {args.threads} --blocks {args.blocks} "
        f"--runs {args.runs} --block-seconds {args.block_seconds}`",
        "",
        f"Machine: {machine_line()}",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="an ONNX/ORT model (default: tiny conv + face embedder)")
    parser.add_argument("--shape", action="append", default=[], help="NAME=D1xD2x... for dynamic inputs")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--blocks", type=int, default=40, help="interleaved block pairs")
    parser.add_argument("--runs", type=int, default=20_000, help="most inferences per block")
    parser.add_argument("--block-seconds", type=float, default=0.3, help="aimed length of one block")
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        if args.model:
            models = {args.model.name: (args.model, parse_shape_overrides(args.shape))}
        else:
            models = build_models(Path(tmp))
        rows = [
            (name, measure(p, s, args.threads, args.blocks, args.runs, args.block_seconds))
            for name, (p, s) in models.items()
        ]
    markdown = render(rows, fixed_cost_ns(), args)
    print(markdown)
    if not args.model and not args.no_write:
        print(f"written to {write_section(SECTION, markdown)}", file=sys.stderr)
    return 0
