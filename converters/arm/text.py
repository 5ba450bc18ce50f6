"""The language model in the emulated Pi: greedy tokens against the host, and instructions per token.

``scripts/arm/run_text.py`` runs ``edge.text.generator.TextGenerator`` greedily on a converted model folder
and writes the token ids. The same tokens must come out of the host and the guest. Per generated token,
the script runs with ``n`` and ``n + k`` new tokens under the counting plugin, ``generate`` marked as a
region: the difference of the two regions over ``k`` is one decode step (the decoder with its KV cache,
the greedy pick and the incremental detokenisation); the prompt's prefill is in both and cancels.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from converters.arm.cost import DEFAULT_PLUGIN, InsnCounts, count_instructions
from converters.arm.guest import SCRIPTS, ArmGuest, read_result, run_both
from edge.errors import InferenceError, InputError

RUN_TEXT = SCRIPTS / "run_text.py"


def _args(model_dir: Path, out: Path, tokens: int, prompt: str | None) -> list[str]:
    args = ["--model", str(Path(model_dir).resolve()), "--out", str(out), "--max-new-tokens", str(tokens)]
    return args + (["--prompt", prompt] if prompt else [])


def run_text_both(
    guest: ArmGuest,
    model_dir: Path,
    work: Path,
    tokens: int = 8,
    prompt: str | None = None,
    timeout: float = 1800,
    host_python: Path | None = None,
) -> tuple[dict, dict]:
    """Generate ``tokens`` greedy tokens on the host and in the guest.

    Args:
        guest: a prepared guest.
        model_dir: a converted language model folder (host path).
        work: folder for the two JSON outputs.
        tokens: how many tokens to generate.
        prompt: the prompt (default: run_text.py's).
        timeout: seconds for each run.
        host_python: the host interpreter (default: this one).

    Returns:
        (host result, guest result): dicts with ``tokens``, ``text``, ``stop_reason``, ``machine``.

    Raises:
        InferenceError: either run failed or timed out (the message carries the end of its stderr).
    """
    work = Path(work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    outputs = (work / "text-host.json", work / f"text-{guest.cpu.value}.json")

    def args_for(out: Path) -> list[str]:
        return _args(model_dir, out, tokens, prompt)

    return run_both(guest, RUN_TEXT, args_for, outputs, timeout, host_python)


@dataclass(frozen=True)
class TokenCost:
    """Instructions of one generated token (steady decode step) on one core."""

    model: str
    cpu: str
    prompt_tokens: int
    tokens: tuple[int, int]  # the two generation lengths counted
    per_token: InsnCounts

    def to_dict(self) -> dict:
        fields = ("total", "simd", "vector", "sdot", "udot")
        return {
            "model": self.model,
            "cpu": self.cpu,
            "prompt_tokens": self.prompt_tokens,
            "tokens": list(self.tokens),
            "per_token": dict(zip(fields, self.per_token.astuple(), strict=True)),
        }


def measure_generation(
    guest: ArmGuest, model_dir: Path, n: int = 2, k: int = 4, prompt: str | None = None, plugin: Path | None = None
) -> TokenCost:
    """Executed instructions per generated token: runs with ``n`` and ``n + k`` new tokens, difference / k.

    Raises:
        InputError: n < 1 or k < 1; InferenceError: a run failed, or generation stopped before ``n + k``
            tokens (a stop token), which would make the difference meaningless.
    """
    if n < 1 or k < 1:
        raise InputError(f"n = {n}, k = {k}; expected at least 1 token each")
    out = guest.rootfs / "tmp" / f"run-text-{os.getpid()}-{time.monotonic_ns()}.json"
    counts, results = [], []
    try:
        for tokens in (n, n + k):
            run = count_instructions(guest, RUN_TEXT, [*_args(model_dir, out, tokens, prompt), "--mark"], plugin)
            if 1 not in run.regions:
                raise InferenceError(f"{RUN_TEXT.name} on {guest.cpu.value}: the plugin saw no region 1")
            counts.append(run.regions[1])
            results.append(read_result(out, RUN_TEXT))
    finally:
        out.unlink(missing_ok=True)
    if results[1]["stop_reason"] != "max_tokens" or len(results[1]["tokens"]) != n + k:
        raise InferenceError(
            f"{model_dir}: generation stopped after {len(results[1]['tokens'])} tokens ({results[1]['stop_reason']}); "
            f"expected {n + k} to count per-token cost: use a prompt with a longer answer"
        )
    per = InsnCounts(*(round(v / k) for v in (counts[1] - counts[0]).astuple()))
    return TokenCost(Path(model_dir).name, guest.cpu.value, results[1]["prompt_tokens"], (n, n + k), per)


@dataclass(frozen=True)
class PrefillCost:
    """Instructions of one prompt token in the prefill, from two prompts of different lengths."""

    model: str
    cpu: str
    prompt_tokens: tuple[int, int]
    per_token: InsnCounts


def measure_prefill(
    guest: ArmGuest, model_dir: Path, prompts: tuple[str, str], plugin: Path | None = None
) -> PrefillCost:
    """Executed instructions per prompt token: ``generate`` with one new token on a short and a long prompt,
    (region of the long - region of the short) / (their difference in prompt tokens, chat template included).

    Raises:
        InputError: the second prompt has no more tokens than the first; InferenceError: a run failed.
    """
    out = guest.rootfs / "tmp" / f"run-text-{os.getpid()}-{time.monotonic_ns()}.json"
    counts, lengths = [], []
    try:
        for prompt in prompts:
            run = count_instructions(guest, RUN_TEXT, [*_args(model_dir, out, 1, prompt), "--mark"], plugin)
            if 1 not in run.regions:
                raise InferenceError(f"{RUN_TEXT.name} on {guest.cpu.value}: the plugin saw no region 1")
            counts.append(run.regions[1])
            lengths.append(int(read_result(out, RUN_TEXT)["prompt_tokens"]))
    finally:
        out.unlink(missing_ok=True)
    if lengths[1] <= lengths[0]:
        raise InputError(f"prompts of {lengths[0]} and {lengths[1]} tokens; the second must be longer")
    per = InsnCounts(*(round(v / (lengths[1] - lengths[0])) for v in (counts[1] - counts[0]).astuple()))
    return PrefillCost(Path(model_dir).name, guest.cpu.value, (lengths[0], lengths[1]), per)


__all__ = [
    "DEFAULT_PLUGIN",
    "RUN_TEXT",
    "PrefillCost",
    "TokenCost",
    "measure_generation",
    "measure_prefill",
    "run_text_both",
]
