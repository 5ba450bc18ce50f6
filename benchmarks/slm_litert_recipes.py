"""SmolLM2 through LiteRT's integer kernels: which quantization recipes pass our gates.

XNNPACK (LiteRT's CPU delegate) multiplies 4-bit and 8-bit weights only against int8 activations that it
quantizes per token at run time (dynamic range). The cheapest decoder on the Pi's cores that we measured is
such a build (docs/slm.md: litert-torch's ``dynamic_int4_block32``, 0.83x llama.cpp's instructions a token
on the A72), so this benchmark asks what each recipe costs in accuracy, with the gates ``convert slm``
applies to every SmolLM2 build:

- greedy agreement (``converters.slm.agreement.greedy_agreement``): the five fixed chat prompts, the first
  ``thresholds.slm_greedy_tokens`` (16) tokens equal to the fp32 ONNX's;
- perplexity on ``data/us_constitution.txt`` (2,048 tokens in windows of 500, inside the 512-position KV
  buffer) against the fp32 ONNX's, limit ``thresholds.slm_perplexity_ratio`` (1.10).

Recipes (``scripts/slm/litert_recipe_export.py``, run in ``.venv-litert-torch``): ``none`` (fp32, the twin
``convert slm --precision fp32 --format tflite`` ships), ``int8-all`` (8-bit weights per channel, the tied
embedding and head too), ``int4-mlp`` (the MLP's 4-bit in blocks of 32, the rest 8-bit), ``int4-all``
(4-bit in blocks of 32 everywhere). Weights are re-rounded from the fp32 export by ai-edge-quantizer
(symmetric), not the GGUF's Q4_1 codes.

    .venv/bin/python -m benchmarks run slm_litert_recipes [--recipes none,int8-all,...] [--write]

Each export takes 2-6 min on 2 shared cores (cached in ``.cache/bench``); the gates ~1 min each. The
results are computed on this host's XNNPACK kernels (its CPU features are named in the section).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from benchmarks.harness.report import REPO, machine_line, say, write_section
from benchmarks.harness.slm_speed_models import cached, race_models

NAME = "slm_litert_recipes"
SUMMARY = "SmolLM2 through LiteRT's integer kernels: which recipes pass the gates"
#: the docs/benchmarks.md sections it writes
SECTIONS = ("slm-litert-recipes",)

RECIPES = {
    "none": "fp32 (no quantization): the twin `convert slm --precision fp32 --format tflite` writes",
    "int8-all": "8-bit weights per channel everywhere (tied embedding and head too), int8 activations",
    "int4-mlp": "MLP 4-bit in blocks of 32; attention, embedding and head 8-bit per channel; int8 activations",
    "int4-all": "4-bit in blocks of 32 everywhere, int8 activations",
}
EXPORT = REPO / "scripts" / "slm" / "litert_recipe_export.py"
KV, PREFILL, WINDOW, TOKENS = 512, 32, 500, 2048


@dataclass(frozen=True)
class Result:
    recipe: str
    mb: float
    perplexity: float
    ratio: float
    leading: tuple[int, ...]
    needed: tuple[int, ...]
    answers: tuple[str, ...]

    @property
    def greedy_passed(self) -> bool:
        return all(n >= k for n, k in zip(self.leading, self.needed, strict=True))


def export(recipe: str, hf_dir: Path, key: str) -> Path:
    """The recipe's ``.tflite`` (cached), exported by litert-torch in its venv."""
    from converters.slm.tflite import venv_python
    from converters.tools import run_tool
    from edge.errors import ConversionError

    def build(out: Path) -> None:
        out.mkdir(parents=True)
        cmd = [str(venv_python()), str(EXPORT), recipe, "--hf-dir", str(hf_dir), "--out-dir", str(out)]
        cmd += ["--name", "model", "--kv-cache-max-len", str(KV), "--prefill-len", str(PREFILL)]
        env = {**os.environ, "EDGE_LITERT_THREADS": "2", "TF_CPP_MIN_LOG_LEVEL": "2"}
        proc = run_tool(cmd, 1800, f"litert-torch export ({recipe})", ConversionError, env=env, keep_stdout=True)
        record = json.loads(proc.stdout.strip().splitlines()[-1])
        Path(record["path"]).rename(out / "model.tflite")
        (out / "export.json").write_text(json.dumps(record) + "\n", encoding="utf-8")

    folder = cached(REPO / ".cache" / "bench" / f"slm-litert-{recipe}-{key}", "export.json", build, say)
    return folder / "model.tflite"


def gates(model: Path, recipe: str, fp32_dir: Path, reference_ppl: float, windows: list[list[int]]) -> Result:
    """The recipe's greedy agreement and perplexity against the fp32 ONNX, as ``convert slm`` gates them."""
    from converters.slm.agreement import greedy_agreement
    from converters.slm.tflite import tflite_perplexity
    from edge.text.chat import ChatFormat

    spec = json.loads((fp32_dir / "generation.json").read_text(encoding="utf-8"))
    chat, stops = ChatFormat.from_dict(spec["chat_format"]), spec["stop_token_ids"]
    agreement = greedy_agreement(fp32_dir / "model.onnx", model, fp32_dir / "tokenizer.json", chat, stops, 16)
    ppl = tflite_perplexity(model, windows).perplexity
    prompts = agreement.prompts
    return Result(
        recipe,
        model.stat().st_size / 1e6,
        ppl,
        ppl / reference_ppl,
        tuple(p.leading_equal for p in prompts),
        tuple(min(16, len(p.reference_ids)) for p in prompts),
        tuple(p.candidate_text for p in prompts),
    )


def table(results: list[Result], reference_ppl: float) -> str:
    lines = [
        "| recipe | what | file (MB) | perplexity (÷ fp32 ONNX) | leading greedy tokens equal (needed) | gates |",
        "|---|---|---:|---:|---|---|",
        f"| fp32 ONNX | the reference | | {reference_ppl:.3f} | | |",
    ]
    for r in results:
        lead = ", ".join(f"{n}/{k}" for n, k in zip(r.leading, r.needed, strict=True))
        verdict = "pass" if r.greedy_passed and r.ratio <= 1.10 else "**fail**"
        cells = [
            f"`{r.recipe}`",
            RECIPES[r.recipe],
            f"{r.mb:.1f}",
            f"{r.perplexity:.3f} ({r.ratio:.3f})",
            lead,
            verdict,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def section(results: list[Result], reference_ppl: float, command: str) -> str:
    return f"""## SmolLM2 through LiteRT's integer kernels: which recipes pass the gates

The gates `convert slm` applies to every SmolLM2 build, on `.tflite` decoders exported by litert-torch 0.10.0
(`scripts/slm/litert_recipe_export.py`: KV buffer {KV}, `prefill_{PREFILL}`) and run by LiteRT (XNNPACK): greedy
agreement with the fp32 ONNX on the five fixed chat prompts (the first 16 tokens, or the whole answer when
fp32's is shorter), and perplexity on {TOKENS} tokens of `data/us_constitution.txt` in windows of {WINDOW}
(limit 1.10× fp32's). XNNPACK's 4-bit and 8-bit kernels quantize activations to int8 per token at run time;
weights are re-rounded from the fp32 export (symmetric), not the GGUF's Q4_1 codes. Computed on this host's
XNNPACK kernels. Machine: {machine_line()}.

{table(results, reference_ppl)}

Answers (first 16 tokens):

{chr(10).join(f"- `{r.recipe}`: " + " / ".join(json.dumps(a) for a in r.answers) for r in results)}

`{command}`
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipes", default=",".join(RECIPES))
    parser.add_argument("--write", action="store_true", help="write the table into docs/benchmarks.md")
    args = parser.parse_args(argv)
    recipes = [r for r in args.recipes.split(",") if r]
    unknown = [r for r in recipes if r not in RECIPES]
    if unknown:
        parser.error(f"--recipes: unknown {', '.join(unknown)}; expected some of {', '.join(RECIPES)}")
    from tokenizers import Tokenizer

    from converters.slm.perplexity import DEFAULT_TEXT, perplexity, text_windows

    models = race_models(say)
    ids = Tokenizer.from_file(str(models.fp32_dir / "tokenizer.json")).encode(DEFAULT_TEXT.read_text()).ids
    windows = text_windows(ids, WINDOW, TOKENS)
    reference = perplexity(models.fp32_dir / "model.onnx", windows).perplexity
    results = []
    for recipe in recipes:
        model = export(recipe, models.hf_dir, models.key)
        say(f"{recipe}: gates")
        results.append(gates(model, recipe, models.fp32_dir, reference, windows))
        print(table(results, reference), file=sys.stderr, flush=True)
    command = "python -m benchmarks run slm_litert_recipes " + " ".join(sys.argv[1:])
    markdown = section(results, reference, command.strip())
    print(markdown)
    if args.write:
        print(f"wrote {write_section('slm-litert-recipes', markdown)}", file=sys.stderr)
    return 0
