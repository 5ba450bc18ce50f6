"""Greedy agreement: does the quantized model still *answer* like fp32?

Perplexity averages over thousands of tokens and hides a flipped near tie at the start of an answer
("L'Étoile..." instead of "Paris"). This check runs a few fixed chat prompts greedily through the fp32 and
the quantized decoder and compares the leading tokens: the first ``tokens`` generated tokens (or all of
them, if fp32 stops earlier) must be equal on every prompt, else ValidationError naming the prompt, both
answers and the profile's ``thresholds.slm_greedy_tokens``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edge.errors import ValidationError
from edge.progress import ProgressFn, silent, tracked
from edge.text.chat import ChatFormat
from edge.text.decoder import OnnxDecoder

#: Fixed chat prompts: a fact, a list, an instruction, a definition, arithmetic.
DEFAULT_PROMPTS = (
    "What is the capital of France?",
    "Name three primary colours.",
    "How do I ride a bicycle?",
    "What is photosynthesis?",
    "What is 12 plus 7?",
)


@dataclass(frozen=True)
class PromptAgreement:
    """One prompt: both greedy continuations and how many leading tokens are equal."""

    prompt: str
    reference_ids: tuple[int, ...]
    candidate_ids: tuple[int, ...]
    reference_text: str
    candidate_text: str
    leading_equal: int

    def to_dict(self) -> dict:
        return {
            "prompt": self.prompt,
            "leading_equal": self.leading_equal,
            "reference": self.reference_text,
            "candidate": self.candidate_text,
        }


@dataclass(frozen=True)
class GreedyAgreement:
    """All prompts against the required number of leading equal tokens."""

    prompts: tuple[PromptAgreement, ...]
    required: int

    def _needed(self, p: PromptAgreement) -> int:
        return min(self.required, len(p.reference_ids))

    @property
    def failures(self) -> tuple[PromptAgreement, ...]:
        return tuple(p for p in self.prompts if p.leading_equal < self._needed(p))

    @property
    def passed(self) -> bool:
        return not self.failures

    def to_dict(self) -> dict:
        return {
            "required_tokens": self.required,
            "passed": self.passed,
            "prompts": [{**p.to_dict(), "needed": self._needed(p)} for p in self.prompts],
        }

    def check(self, label: str) -> None:
        """Raise ValidationError listing every prompt whose answer differs too early."""
        if self.passed:
            return
        lines = [
            f"  {p.prompt!r}: {p.leading_equal} equal leading tokens (need {self._needed(p)}); "
            f"fp32 {p.reference_text!r}, quantized {p.candidate_text!r}"
            for p in self.failures
        ]
        raise ValidationError(
            f"{label}: greedy answers differ from fp32 on {len(lines)} of {len(self.prompts)} prompts; expected "
            f"the first {self.required} tokens equal (thresholds.slm_greedy_tokens):\n" + "\n".join(lines)
        )


def greedy_ids(decoder: OnnxDecoder, prompt_ids: list[int], tokens: int, stops: set[int]) -> list[int]:
    """Greedy token ids after ``prompt_ids``, at most ``tokens``; a stop token ends the list (and is in it,
    so that stopping early counts as a different answer)."""
    n = len(prompt_ids)
    logits, cache = decoder.forward(
        np.array([prompt_ids]), np.ones((1, n), np.int64), np.arange(n)[None], decoder.empty_cache()
    )
    out: list[int] = []
    while True:
        token = int(np.argmax(logits[0, -1]))
        out.append(token)
        if token in stops or len(out) >= tokens:
            break
        total = n + len(out)
        logits, cache = decoder.forward(
            np.array([[token]]), np.ones((1, total), np.int64), np.array([[total - 1]]), cache
        )
    return out


def leading_equal(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens two generations share."""
    count = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        count += 1
    return count


def _decoder(path: Path, threads: int):
    """A ``.tflite`` decoder on LiteRT (``convert slm --format``), anything else on onnxruntime."""
    if Path(path).suffix == ".tflite":
        from edge.text.litert_decoder import LiteRtDecoder

        return LiteRtDecoder(Path(path), threads)
    return OnnxDecoder(path, threads)


def greedy_agreement(
    reference: Path,
    candidate: Path,
    tokenizer_path: Path,
    chat: ChatFormat,
    stops: Sequence[int],
    required: int,
    prompts: Sequence[str] = DEFAULT_PROMPTS,
    threads: int = 2,
    progress: ProgressFn = silent,
) -> GreedyAgreement:
    """Run ``prompts`` (one user turn each, through ``chat``) greedily on both models and compare.

    Args:
        reference: the fp32 model.
        candidate: the quantized model, or a ``.tflite`` twin (run on LiteRT).
        tokenizer_path: ``tokenizer.json``.
        chat: the chat format (``generation.json``'s).
        stops: stop token ids.
        required: leading tokens that must be equal (``thresholds.slm_greedy_tokens``); each prompt
            generates this many tokens.
        prompts: the user messages.
        threads: onnxruntime threads.
        progress: counts the prompts done (a bar on a terminal).

    Returns:
        The agreement record (does not raise; see :meth:`GreedyAgreement.check`).
    """
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_path))
    ref_dec, cand_dec = OnnxDecoder(reference, threads), _decoder(candidate, threads)
    stop_set = set(stops)
    results = []
    for prompt in tracked(progress, prompts, "prompts, both models"):
        ids = tok.encode(chat.render([{"role": "user", "content": prompt}])).ids
        ref = greedy_ids(ref_dec, ids, required, stop_set)
        cand = greedy_ids(cand_dec, ids, required, stop_set)
        results.append(
            PromptAgreement(
                prompt=prompt,
                reference_ids=tuple(ref),
                candidate_ids=tuple(cand),
                reference_text=tok.decode(ref),
                candidate_text=tok.decode(cand),
                leading_equal=leading_equal(ref, cand),
            )
        )
    return GreedyAgreement(tuple(results), required)
