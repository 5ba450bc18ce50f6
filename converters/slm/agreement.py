"""Greedy answers to a few fixed chat prompts: a printed report and a smoke check, not the verdict.

Teacher-forced figures are the build's gate (``divergence.DivergenceGate``); an exact greedy run is not a gate
the field uses (at 97.7 % per-token agreement, 16 tokens in a row match 69 % of the time). Each fixed prompt
runs greedily through the fp32 and the built decoder for ``thresholds.slm_greedy_tokens`` tokens; the report
shows both answers and how many leading tokens are equal. The smoke check: where fp32's answer names the
expected word (``SMOKE``: "Paris" for the capital of France), the build's must too, else ValidationError naming
the prompt and both answers.
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
#: The smoke check: a prompt and the word its answer must name whenever fp32's does.
SMOKE = {"What is the capital of France?": "Paris"}


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
    """All prompts' answers (``required`` tokens each) and the smoke check."""

    prompts: tuple[PromptAgreement, ...]
    required: int

    @property
    def failures(self) -> tuple[PromptAgreement, ...]:
        """Prompts of ``SMOKE`` whose fp32 answer names the word and whose candidate answer does not."""
        return tuple(
            p
            for p in self.prompts
            if p.prompt in SMOKE and SMOKE[p.prompt] in p.reference_text and SMOKE[p.prompt] not in p.candidate_text
        )

    @property
    def passed(self) -> bool:
        return not self.failures

    def to_dict(self) -> dict:
        return {
            "required_tokens": self.required,
            "smoke_check": {prompt: word for prompt, word in SMOKE.items()},
            "passed": self.passed,
            "prompts": [p.to_dict() for p in self.prompts],
        }

    def check(self, label: str) -> None:
        """Raise ValidationError naming every smoke prompt whose answer lost its word."""
        if self.passed:
            return
        lines = [
            f"  {p.prompt!r}: fp32 {p.reference_text!r}, quantized {p.candidate_text!r}; expected an answer "
            f"naming {SMOKE[p.prompt]!r}"
            for p in self.failures
        ]
        raise ValidationError(f"{label}: the greedy smoke check failed:\n" + "\n".join(lines))


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
        required: tokens each prompt generates (``thresholds.slm_greedy_tokens``).
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
