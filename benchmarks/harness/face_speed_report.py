"""The face speed race's write-up: the markdown section of docs/benchmarks.md and its bar chart."""

from __future__ import annotations

from pathlib import Path

#: The race's goals: speed-up over dlib with the gate passing, INT8 size and peak RSS as shares of fp32's.
SPEEDUP_GOAL = 5.0
SIZE_RATIO_GOAL = 0.27
RSS_RATIO_GOAL = 0.6
FP32_RSS = "fp32 pipeline (ONNX)"
INT8_RSS = "INT8 pipeline (shipped ORT files)"
BASELINE_RSS = "baseline (the pipeline's imports, no model)"
EMB_FP32_RSS = "embedder only, fp32 ONNX"
EMB_INT8_RSS = "embedder only, INT8 (shipped ORT file)"


def _mb(n: float) -> str:
    return f"{n / 1e6:.2f} MB"


def _verdict(ok: bool) -> str:
    return "met" if ok else "**not met**"


def best_passing(rows: list[dict]) -> dict | None:
    """The fastest of our contenders whose descriptors passed the gate."""
    ours = [r for r in rows if r["threads"] is not None and r["gate_passed"]]
    return min(ours, key=lambda r: r["ms"]) if ours else None


def flip_lines(rows: list[dict]) -> list[str]:
    """One line per contender whose same/different decisions differ from dlib's on some chip pair."""
    lines = []
    for r in rows:
        if r.get("flips"):
            shown = "; ".join(
                f"chips {f['chips'][0]}–{f['chips'][1]}: dlib {f['dlib_distance']:.4f}, ours {f['distance']:.4f}"
                for f in r["flips"][:5]
            )
            lines.append(
                f"- {r['label']} decides {len(r['flips'])} pair(s) otherwise than dlib (threshold 0.6): {shown}."
            )
    return lines


def load_note(load: float, cores: int) -> str:
    """A warning when the machine was busier than its cores during the run."""
    if load <= cores:
        return ""
    return (
        f"The 1-minute load average was {load:.1f} on {cores} cores during this run (other jobs): a 2-thread "
        "contender often waits for a second core, so the 2-thread rows are a worst case here, and the spread "
        "(q1–q3) is wide for all."
    )


def speed_table(rows: list[dict]) -> list[str]:
    lines = [
        "| contender | threads | load ms | first call ms | ms / chip (median) | q1–q3 | × faster than dlib | "
        "time vs fp32 (same runtime) | max abs diff vs dlib | min cosine | decisions agree | gate |",
        "|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        threads = "own (see below)" if r["threads"] is None else str(r["threads"])
        gate = ("pass" if r["gate_passed"] else "**FAIL**") + f" ({r['gate']})"
        lines.append(
            f"| {r['name']} | {threads} | {r['load_ms']:.0f} | {r['first_ms']:.1f} | {r['ms']:.2f} | "
            f"{r['q1']:.2f}–{r['q3']:.2f} | {r['speedup_vs_dlib']:.2f} | {r['vs_fp32']:.2f} | "
            f"{r['max_abs_diff']:.2e} | {r['min_cosine']:.6f} | "
            f"{r['decision_agreement']:.4f} of {r['pairs']} | {gate} |"
        )
    return lines


def size_table(sizes: dict) -> list[str]:
    e = sizes["embedder"]
    lines = ["| embedder file | size | vs ONNX fp32 |", "|---|---:|---:|"]
    for name, n in e.items():
        lines.append(f"| {name} | {_mb(n)} | {n / e['ONNX fp32']:.3f} |")
    ratio = sizes["folder_int8"] / sizes["folder_fp32"]
    lines.append(
        f"| whole models folder: fp32 {_mb(sizes['folder_fp32'])}, INT8 {_mb(sizes['folder_int8'])} "
        f"(MTCNN stays fp32) | | {ratio:.3f} |"
    )
    return lines


def rss_table(rss: dict) -> list[str]:
    base = rss[BASELINE_RSS]["vmhwm_kib"]
    lines = ["| process | faces found (described) | peak RSS (VmHWM) | above baseline |", "|---|---:|---:|---:|"]
    for name, r in rss.items():
        what = "chips" if name.startswith("embedder only") else "photos"
        lines.append(
            f"| {name} | {r['faces']} in {r['photos']} {what} | {r['vmhwm_kib'] / 1024:.1f} MiB | "
            f"{(r['vmhwm_kib'] - base) / 1024:.1f} MiB |"
        )
    return lines


def goals(rows: list[dict], sizes: dict, rss: dict) -> tuple[list[str], dict]:
    """The race's three goals, each with the measured value and whether it is met."""
    best = best_passing(rows)
    e = sizes["embedder"]
    size_ratio = e["ONNX INT8 (QDQ)"] / e["ONNX fp32"]
    tfl_ratio = e["TFLite INT8"] / e["TFLite fp32"]
    fp32_rss, int8_rss = rss[FP32_RSS]["vmhwm_kib"], rss[INT8_RSS]["vmhwm_kib"]
    base = rss[BASELINE_RSS]["vmhwm_kib"]
    rss_ratio = int8_rss / fp32_rss
    emb_ratio = rss[EMB_INT8_RSS]["vmhwm_kib"] / rss[EMB_FP32_RSS]["vmhwm_kib"]
    above = (int8_rss - base) / max(fp32_rss - base, 1)
    summary = {
        "best": best["label"] if best else None,
        "best_speedup": best["speedup_vs_dlib"] if best else None,
        "size_ratio_onnx": size_ratio,
        "size_ratio_tflite": tfl_ratio,
        "rss_ratio": rss_ratio,
        "rss_ratio_above_baseline": above,
        "rss_ratio_embedder_only": emb_ratio,
    }
    speed = (
        f"fastest passing: **{best['label']}**, {best['ms']:.2f} ms vs dlib {rows[0]['ms']:.2f} ms = "
        f"{best['speedup_vs_dlib']:.2f}× — {_verdict(best['speedup_vs_dlib'] >= SPEEDUP_GOAL)}"
        if best
        else "no contender passed the gate — **not met**"
    )
    lines = [
        f"- Speed, goal ≥ {SPEEDUP_GOAL:g}× dlib with the gate passing: {speed}.",
        f"- Size, goal INT8 ≤ {SIZE_RATIO_GOAL}× fp32: ONNX {size_ratio:.3f}×, TFLite {tfl_ratio:.3f}× — "
        f"{_verdict(max(size_ratio, tfl_ratio) <= SIZE_RATIO_GOAL)}.",
        f"- Peak RSS, goal INT8 pipeline ≤ {RSS_RATIO_GOAL}× fp32: {int8_rss / 1024:.1f} / {fp32_rss / 1024:.1f} MiB "
        f"= {rss_ratio:.3f}× — {_verdict(rss_ratio <= RSS_RATIO_GOAL)} (above the no-model baseline of "
        f"{base / 1024:.1f} MiB: {above:.3f}×; a process with the embedder alone: {emb_ratio:.3f}×).",
    ]
    return lines, summary


def markdown(result: dict, command: str, machine: str, image: str) -> str:
    """The whole ``face-speed`` section."""
    rows, sizes, rss = result["speed"], result["sizes"], result["rss"]
    goal_lines, _ = goals(rows, sizes, rss)
    p = result["params"]
    parts = [
        "## Face descriptor speed race: dlib vs ours (ORT / LiteRT, fp32 / INT8)",
        "",
        f"Command: `{command}`  ",
        f"Machine: {machine}",
        "",
        f"{p['chips']} real aligned 150×150 chips (the fp32 device pipeline on the evaluation photos), batch 1, "
        f"{p['rounds']} interleaved rounds of every contender over every chip ({rows[0]['samples']} timed calls "
        "each; each round starts one contender later). Load and first call are timed apart and not in the "
        "median. Descriptors of every contender were compared with dlib's on every chip in the same run "
        "before timing; decisions are same/different at distance 0.6 over every chip pair.",
        "",
        *goal_lines,
        "",
        *speed_table(rows),
        "",
        *flip_lines(rows),
        "",
        load_note(p["load"], p["cores"]),
        "",
        f"![ms per face descriptor]({image})",
        "",
        f"dlib's threads: {result['dlib_note']}",
        "",
        f"Models: ORT INT8 is `{result['int8_source']}`; ORT runs the QDQ `.onnx` here (the shipped `.ort` "
        "copy is pre-optimised for the ARM target). LiteRT INT8 is onnx2tf's full-integer file (int8 input "
        "and output, quantized and dequantized inside the timed call), calibrated on the same chips. "
        f"The quantization gate of the build: {result['quant_gate']}.",
        "",
        *size_table(sizes),
        "",
        f"Peak RSS: one fresh process per row loads the pipeline and runs it on {p['rss_photos']} photos "
        f"({p['rss_threads']} thread); VmHWM from /proc/self/status, median of 3 processes per row.",
        "",
        *rss_table(rss),
        "",
        result["cpu_note"] + " The ARM cost of INT8 vs fp32 is measured under emulation with the Pi build "
        "(benchmarks/arm_cost.py): these x86 times say nothing about a Pi's.",
    ]
    return "\n".join(parts)


def plot(rows: list[dict], path: Path) -> Path:
    """Horizontal bars of median ms per chip (log scale), dlib first, failed gates hatched."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [r["label"] for r in rows]
    ms = [r["ms"] for r in rows]
    colours = ["#888888" if r["threads"] is None else ("#1f77b4" if r["threads"] == 1 else "#ff7f0e") for r in rows]
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(rows) + 1.5))
    bars = ax.barh(labels, ms, color=colours)
    for bar, r in zip(bars, rows, strict=True):
        if not r["gate_passed"]:
            bar.set_hatch("//")
        ax.text(
            bar.get_width() * 1.03, bar.get_y() + bar.get_height() / 2, f"{r['ms']:.1f} ms", va="center", fontsize=8
        )
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("ms per face descriptor (median, batch 1; log scale)")
    ax.set_title("dlib vs ours: grey dlib, blue 1 thread, orange 2 threads, hatched = gate failed")
    ax.set_xlim(right=max(ms) * 3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
