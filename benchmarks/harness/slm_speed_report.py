"""Markdown, goals and the bar chart of the small-LM speed race (``benchmarks/slm_speed.py``)."""

from __future__ import annotations

from pathlib import Path

from benchmarks.harness.slm_speed_child import CONTENDERS, PEER, REFERENCE

LABELS = dict(CONTENDERS)
#: The race's goals: ours INT4 decode against each peer, and the INT4 model's size against fp32.
DECODE_VS_LLAMA_GOAL = 1.0
DECODE_VS_TRANSFORMERS_GOAL = 5.0
SIZE_RATIO_GOAL = 0.20
MIB = 1024 * 1024


def fmt(value: float | None, spec: str = ".1f", suffix: str = "") -> str:
    """``value`` formatted, or an em dash when missing."""
    return "—" if value is None else f"{value:{spec}}{suffix}"


def speed_table(rows: list[dict]) -> str:
    """One line per prompt, threads and contender: rates, ratios, agreement with transformers, first run."""
    order = {kind: i for i, (kind, _l) in enumerate(CONTENDERS)}
    rows = sorted(rows, key=lambda r: (r["prompt"] != "short", r["threads"], order[r["kind"]]))
    lines = [
        "| prompt (tokens) | threads | contender | prefill tok/s | decode tok/s | decode vs llama.cpp "
        "| decode vs transformers | same tokens as transformers / llama.cpp | first run: TTFT ms, decode tok/s |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        agree = " / ".join("—" if r[k] is None else f"{r[k]}/{r['new_tokens']}" for k in ("agree_ref", "agree_peer"))
        if not r["stable_tokens"]:
            agree += " (varied between rounds)"
        first = f"{fmt(r.get('first_ttft_s', 0) * 1000, '.0f')}, {fmt(r.get('first_decode_tps'))}"
        lines.append(
            f"| {r['prompt']} ({r['prompt_tokens']}) | {r['threads']} | {LABELS[r['kind']]} | "
            f"{fmt(r['prefill_tps'])} | {fmt(r['decode_tps'])} | {fmt(r['decode_tps_vs_llama'], '.2f', 'x')} | "
            f"{fmt(r['decode_tps_vs_tf'], '.2f', 'x')} | {agree} | {first} |"
        )
    return "\n".join(lines)


def rss_table(rss: list[dict]) -> str:
    """Peak RSS (VmHWM) and load time of each contender's process."""
    lines = ["| contender | threads | peak RSS MiB (VmHWM) | after load MiB | load s |", "|---|---:|---:|---:|---:|"]
    for r in sorted(rss, key=lambda r: (r["threads"], [k for k, _l in CONTENDERS].index(r["kind"]))):
        lines.append(
            f"| {LABELS[r['kind']]} | {r['threads']} | {r['vm_hwm_kib'] / 1024:.0f} | {r['load_hwm_kib'] / 1024:.0f} "
            f"| {r['load_s']:.1f} |"
        )
    return "\n".join(lines)


def goals(rows: list[dict], sizes: dict) -> list[str]:
    """One line per goal of the race: met or missed, with the measured figure."""
    out = []
    for r in sorted((r for r in rows if r["kind"] == "ours-int4"), key=lambda r: (r["prompt"], r["threads"])):
        where = f"{r['prompt']} prompt, {r['threads']} thread(s)"
        for key, goal, peer in (
            ("decode_tps_vs_llama", DECODE_VS_LLAMA_GOAL, "llama.cpp"),
            ("decode_tps_vs_tf", DECODE_VS_TRANSFORMERS_GOAL, "transformers"),
        ):
            value = r[key]
            verdict = "—" if value is None else ("met" if value >= goal else "MISSED")
            out.append(f"- INT4 decode >= {goal:.1f}x {peer} ({where}): {fmt(value, '.2f', 'x')} — {verdict}")
    size = sizes["int4_vs_fp32"]
    verdict = "met" if size <= SIZE_RATIO_GOAL else "MISSED"
    out.append(f"- INT4 model <= {SIZE_RATIO_GOAL:.2f}x the fp32 size: {size:.3f}x of the fp32 file — {verdict}")
    if "int4_vs_fp32_params" in sizes:
        size = sizes["int4_vs_fp32_params"]
        verdict = "met" if size <= SIZE_RATIO_GOAL else "MISSED"
        params = f"4 bytes x {sizes['parameters']:,} parameters"
        out.append(f"- INT4 model <= {SIZE_RATIO_GOAL:.2f}x {params}: {size:.3f}x — {verdict}")
    return out


def tokenization_lines(checks: list[dict]) -> list[str]:
    """Whether llama.cpp tokenizes each prompt text as we do (both runs get our ids regardless)."""
    out = []
    for c in checks:
        if c["identical"]:
            out.append(
                f"- {c['prompt']} prompt: llama.cpp's own tokenization is identical to ours ({c['ours']} tokens)"
            )
        else:
            out.append(
                f"- {c['prompt']} prompt: llama.cpp's own tokenization DIFFERS ({c['llama']} tokens vs our "
                f"{c['ours']}, first difference at token {c['first_difference']}); every contender was fed our ids"
            )
    return out


def answers(rows: list[dict]) -> list[str]:
    """The short prompt's greedy answer of each contender (at the highest thread count)."""
    short = [r for r in rows if r["prompt"] == "short"]
    if not short:
        return []
    top = max(r["threads"] for r in short)
    out = []
    for kind, label in CONTENDERS:
        for r in short:
            if r["kind"] == kind and r["threads"] == top:
                text = r["text"].replace("`", "'").replace("\n", " ")
                out.append(f"- {label}: `{text}`")
    return out


def build_lines(profile: dict | None) -> list[str]:
    """What ours was built for: the profile and, from its INT4 report, the accuracy level and the head."""
    if not profile:
        return []
    settings = profile.get("settings", {})
    level = settings.get("accuracy_level", "?")
    head = "an fp32 Gemm over its 8-bit codes" if settings.get("fp32_head") else "8-bit MatMulNBits"
    return [
        f"Ours: `edge-deploy convert slm --target {profile['name']}` (INT4: 4-bit projections at accuracy level "
        f"{level}, the LM head {head}; and its fp32 build), what the product builds for this kind of host.",
        "",
    ]


def markdown(result: dict, command: str, machine: str, image: str) -> str:
    """The docs/benchmarks.md section."""
    sizes = result["sizes"]
    n = result["new_tokens"]
    parts = [
        "## Small LM speed: ours vs llama.cpp vs transformers (SmolLM2-135M-Instruct)",
        "",
        f"`{command}` — {machine}",
        "",
        f"Same prompt token ids for every contender, same threads, greedy, {n} new tokens per run with end-of-text "
        f"ignored (1 from the prefill, {n - 1} decode steps). Prefill tok/s = prompt tokens / time to first token; "
        f"decode tok/s = decode steps / their time. Medians of {result['rounds']} interleaved rounds; the first run "
        "of each process is shown apart. Each contender runs in its own fresh process. "
        f'"Same tokens as transformers" = leading tokens equal to {LABELS[REFERENCE]} on the same prompt and '
        "threads (a low number means that model answers differently, not that it is slower).",
        "",
        *build_lines(result.get("profile")),
        speed_table(result["rows"]),
        "",
        f"Load average during the race: {result['load_average'][0]:.1f} at the start, "
        f"{result['load_average'][1]:.1f} at the end, on {result.get('cores', '?')} cores shared with other jobs. "
        "Multi-threaded runs suffer most from such sharing (a descheduled thread stalls its pool's barrier).",
        "",
        f"![SmolLM2 speed]({image})",
        "",
        "**Goals**",
        "",
        *goals(result["rows"], sizes),
        "",
        "**Peak memory**: VmHWM of one fresh process per contender and thread count (load + all runs). "
        "ru_maxrss is not used: Linux keeps it across exec, so each child would report the parent's peak.",
        "",
        rss_table(result["rss"]),
        "",
        f"**Model files**: ours INT4 `model.onnx` {sizes['int4_onnx'] / MIB:.1f} MiB, ours fp32 "
        f"{sizes['fp32_onnx'] / MIB:.1f} MiB (ratio {sizes['int4_vs_fp32']:.3f}), the GGUF llama.cpp runs "
        f"{sizes['gguf'] / MIB:.1f} MiB.",
        "",
        "**Tokenization**",
        "",
        *tokenization_lines(result["tokenization"]),
        "",
        f"**Greedy answers to the short prompt** ({n} tokens, end-of-text ignored)",
        "",
        *answers(result["rows"]),
    ]
    return "\n".join(parts) + "\n"


def plot(rows: list[dict], path: Path) -> Path:
    """Grouped bars: prefill and decode tok/s per contender, for each prompt and thread count."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = sorted({(r["prompt"] != "short", r["prompt"], r["threads"]) for r in rows})
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    width = 0.8 / len(CONTENDERS)
    for ax, metric, title in ((axes[0], "prefill_tps", "prefill tokens/s"), (axes[1], "decode_tps", "decode tokens/s")):
        for i, (kind, label) in enumerate(CONTENDERS):
            values = []
            for _s, prompt, threads in groups:
                match = [r for r in rows if (r["kind"], r["prompt"], r["threads"]) == (kind, prompt, threads)]
                values.append(match[0][metric] or 0.0 if match else 0.0)
            ax.bar([g + i * width for g in range(len(groups))], values, width, label=label)
        ax.set_xticks([g + 0.4 - width / 2 for g in range(len(groups))])
        ax.set_xticklabels([f"{p}\n{t} thr" for _s, p, t in groups])
        ax.set_title(title + " (higher is better)")
        ax.grid(axis="y", alpha=0.3)
    axes[1].legend(fontsize=8)
    fig.suptitle(f"SmolLM2-135M on this host: ours vs {PEER} vs {REFERENCE}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
