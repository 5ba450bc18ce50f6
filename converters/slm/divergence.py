"""Teacher-forced comparison of a candidate language model with the fp32 model: what the field gates on.

Both models read the same token windows (one prefill each, empty cache; see ``perplexity.text_windows``). At
every scored position the fp32 model's next-token distribution P and the candidate's Q give

- the KL divergence KL(P || Q) = sum_v P(v) (log P(v) - log Q(v)), in nats;
- whether both put the same token first (argmax of the logits: "same top-1");
- each model's negative log likelihood of the token that follows in the text (its perplexity).

The figures are llama.cpp's ``llama-perplexity --kl-divergence``'s: mean and 99th-percentile KLD, same-top-1 %
and the perplexity ratio candidate / fp32. They are the build's verdict (:class:`DivergenceGate`): at least as
close to fp32 as llama.cpp running the same GGUF, by the profile's ``thresholds.slm_*`` limits. The held-out
text is the shipped U.S. Constitution followed by *Alice's Adventures in Wonderland* (both public domain;
``data/*.SOURCE.md``); no build step calibrates on either.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from converters.paths import DATA_DIR
from converters.slm.perplexity import PerplexityResult, onnx_window_logits, text_windows
from edge.errors import InputError, ValidationError, require
from edge.progress import ProgressFn, silent, tracked

if TYPE_CHECKING:
    from edge.profiles import Thresholds

#: The held-out texts, read in this order (windows never cross from one text into the next).
HELD_OUT_TEXTS = (DATA_DIR / "us_constitution.txt", DATA_DIR / "alice_in_wonderland.txt")
#: Tokens of the held-out texts that are read (each window's first token is context, the rest are scored).
HELD_OUT_TOKENS = 8192
#: Rows of a window's logits turned into float64 distributions at a time (bounds the memory: vocab x rows).
_ROWS = 64

#: Logits of one window of token ids: (len(ids) - 1, vocab) for the positions that predict ids[1:].
WindowLogits = Callable[[list[int]], np.ndarray]


@dataclass(frozen=True)
class PositionStats:
    """Per scored position: KL(fp32 || candidate), same argmax, and both models' NLL of the true next token."""

    kld: np.ndarray
    same_top1: np.ndarray
    reference_nll: np.ndarray
    candidate_nll: np.ndarray


@dataclass(frozen=True)
class Divergence:
    """The teacher-forced figures of a candidate against fp32 over ``tokens`` scored positions."""

    tokens: int
    windows: int
    mean_kld: float
    p99_kld: float
    max_kld: float
    same_top1: float
    reference_perplexity: float
    candidate_perplexity: float

    @property
    def perplexity_ratio(self) -> float:
        return self.candidate_perplexity / self.reference_perplexity

    def to_dict(self) -> dict:
        return {
            "tokens_scored": self.tokens,
            "windows": self.windows,
            "mean_kld": self.mean_kld,
            "p99_kld": self.p99_kld,
            "max_kld": self.max_kld,
            "same_top1_percent": 100.0 * self.same_top1,
            "perplexity_fp32": self.reference_perplexity,
            "perplexity": self.candidate_perplexity,
            "perplexity_ratio": self.perplexity_ratio,
        }

    def line(self) -> str:
        """One printed line: the figures in llama.cpp's terms."""
        return (
            f"KLD mean {self.mean_kld:.3g}, p99 {self.p99_kld:.3g}; same top-1 {100 * self.same_top1:.2f} %; "
            f"perplexity ratio {self.perplexity_ratio:.4f} on {self.tokens} held-out tokens"
        )


@dataclass(frozen=True)
class DivergenceLimits:
    """How far from fp32 a build may be (the profile's ``thresholds.slm_*``; docs/slm.md, "The gate")."""

    max_mean_kld: float
    max_p99_kld: float
    min_same_top1: float
    max_perplexity_ratio: float

    @classmethod
    def of(cls, thresholds: Thresholds) -> DivergenceLimits:
        """The limits a profile's ``[thresholds]`` declare: field ``x`` is the profile's ``slm_x``."""
        return cls(**{f.name: getattr(thresholds, f"slm_{f.name}") for f in fields(cls)})

    def to_dict(self) -> dict[str, float]:
        """The limits under their profile keys (``thresholds.slm_x``)."""
        return {f"thresholds.slm_{f.name}": getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class DivergenceGate:
    """A build's verdict: its teacher-forced figures against the limits, and the arithmetic that was measured."""

    divergence: Divergence
    limits: DivergenceLimits
    arithmetic: str

    @property
    def failures(self) -> tuple[str, ...]:
        """One line per figure beyond its limit, naming the figure, its value, the limit and the profile key."""
        d, lim, out = self.divergence, self.limits, []
        if not d.mean_kld <= lim.max_mean_kld:
            out.append(f"mean KLD {d.mean_kld:.3g}; expected at most {lim.max_mean_kld} (thresholds.slm_max_mean_kld)")
        if not d.p99_kld <= lim.max_p99_kld:
            out.append(f"p99 KLD {d.p99_kld:.3g}; expected at most {lim.max_p99_kld} (thresholds.slm_max_p99_kld)")
        if not d.same_top1 >= lim.min_same_top1:
            out.append(
                f"same top-1 {100 * d.same_top1:.2f} %; expected at least {100 * lim.min_same_top1:.2f} % "
                "(thresholds.slm_min_same_top1)"
            )
        if not d.perplexity_ratio <= lim.max_perplexity_ratio:
            out.append(
                f"perplexity ratio {d.perplexity_ratio:.4f}; expected at most {lim.max_perplexity_ratio} "
                "(thresholds.slm_max_perplexity_ratio)"
            )
        return tuple(out)

    @property
    def passed(self) -> bool:
        return not self.failures

    def to_dict(self) -> dict:
        return {
            "passed": self.passed,
            "arithmetic": self.arithmetic,
            "thresholds": self.limits.to_dict(),
            "failures": list(self.failures),
        }

    def line(self) -> str:
        """One printed line: the verdict, the figures and the limits."""
        lim = self.limits
        return (
            f"{'PASSED' if self.passed else 'FAILED'} teacher-forced gate: {self.divergence.line()} (limits: mean "
            f"{lim.max_mean_kld}, p99 {lim.max_p99_kld}, same top-1 {100 * lim.min_same_top1:.2f} %, ratio "
            f"{lim.max_perplexity_ratio})"
        )

    def check(self, label: str) -> None:
        """Raise ValidationError naming every figure beyond its limit.

        Raises:
            ValidationError: a figure is further from fp32 than its limit allows.
        """
        if self.passed:
            return
        raise ValidationError(
            f"{label}: further from fp32 than llama.cpp running the same GGUF, teacher-forced over "
            f"{self.divergence.tokens} held-out tokens ({self.arithmetic}):\n"
            + "\n".join(f"  {line}" for line in self.failures)
        )


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """log softmax over the last axis, in float64."""
    shifted = logits.astype(np.float64) - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def position_stats(reference: np.ndarray, candidate: np.ndarray, targets: Sequence[int]) -> PositionStats:
    """Compare two (positions, vocab) logit arrays row by row; ``targets[i]`` is the token after position i.

    Raises:
        InputError: the shapes differ, or ``targets`` has not one id per row.
    """
    if reference.shape != candidate.shape or reference.ndim != 2:
        raise InputError(f"logits of shape {candidate.shape} against fp32 {reference.shape}; expected equal 2-D")
    rows = reference.shape[0]
    target = np.asarray(targets, np.int64)
    if target.shape != (rows,):
        raise InputError(f"{target.size} target ids for {rows} positions; expected one per position")
    kld, ref_nll, cand_nll = np.empty(rows), np.empty(rows), np.empty(rows)
    for lo in range(0, rows, _ROWS):
        hi = min(lo + _ROWS, rows)
        logp, logq = log_softmax(reference[lo:hi]), log_softmax(candidate[lo:hi])
        kld[lo:hi] = (np.exp(logp) * (logp - logq)).sum(axis=-1)
        pick = np.arange(hi - lo), target[lo:hi]
        ref_nll[lo:hi], cand_nll[lo:hi] = -logp[pick], -logq[pick]
    same = reference.argmax(axis=-1) == candidate.argmax(axis=-1)
    return PositionStats(np.maximum(kld, 0.0), same, ref_nll, cand_nll)


def summarize(stats: Iterable[PositionStats]) -> Divergence:
    """The figures over all positions of all windows (one :class:`PositionStats` per window).

    Raises:
        InputError: no position was scored.
    """
    parts = list(stats)
    kld = np.concatenate([s.kld for s in parts]) if parts else np.empty(0)
    if kld.size == 0:
        raise InputError("no scored positions; expected at least one window of two tokens")
    same = np.concatenate([s.same_top1 for s in parts])
    ref_nll = np.concatenate([s.reference_nll for s in parts])
    cand_nll = np.concatenate([s.candidate_nll for s in parts])
    return Divergence(
        tokens=int(kld.size),
        windows=len(parts),
        mean_kld=float(kld.mean()),
        p99_kld=float(np.percentile(kld, 99)),
        max_kld=float(kld.max()),
        same_top1=float(same.mean()),
        reference_perplexity=math.exp(float(ref_nll.mean())),
        candidate_perplexity=math.exp(float(cand_nll.mean())),
    )


def held_out_windows(
    encode: Callable[[str], list[int]], window: int, max_tokens: int = HELD_OUT_TOKENS,
    texts: Sequence[Path] = HELD_OUT_TEXTS,
) -> list[list[int]]:  # fmt: skip
    """Windows of ``window`` tokens over ``texts`` in order, ``max_tokens`` tokens in all.

    Raises:
        InputError: a text cannot be read, or the texts hold fewer than ``max_tokens`` tokens.
    """
    out: list[list[int]] = []
    left = max_tokens
    for path in texts:
        if left <= 1:
            break
        try:
            ids = encode(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise InputError(f"{path}: cannot read the held-out text ({exc.strerror})") from exc
        found = text_windows(ids, window, left)
        out += found
        left -= sum(len(w) for w in found)
    if left > 1:
        raise InputError(f"{', '.join(map(str, texts))}: {max_tokens - left} tokens; expected {max_tokens}")
    return out


def teacher_forced(
    reference: WindowLogits, candidate: WindowLogits, windows: list[list[int]], progress: ProgressFn = silent
) -> list[PositionStats]:
    """Run every window once through each model and compare; one :class:`PositionStats` per window (the
    same function as both models runs once and is compared with itself); ``progress`` counts the windows."""
    out = []
    for ids in tracked(progress, windows, "windows, fp32 and candidate"):
        ref = reference(ids)
        out.append(position_stats(ref, ref if candidate is reference else candidate(ids), ids[1:]))
    return out


def perplexities(stats: Sequence[PositionStats]) -> tuple[PerplexityResult, PerplexityResult]:
    """The fp32 model's and the candidate's perplexity over the windows of ``stats``.

    Raises:
        InputError: no position was scored.
    """
    if not stats or not sum(s.kld.size for s in stats):
        raise InputError("no scored positions; expected at least one window of two tokens")
    ref = np.concatenate([s.reference_nll for s in stats])
    cand = np.concatenate([s.candidate_nll for s in stats])
    return (
        PerplexityResult(math.exp(float(ref.mean())), int(ref.size), len(stats)),
        PerplexityResult(math.exp(float(cand.mean())), int(cand.size), len(stats)),
    )


def gate_against_fp32(
    fp32: Path,
    candidate: WindowLogits | None,
    tokenizer: Path,
    limits: DivergenceLimits,
    arithmetic: str,
    window: int = 512,
    tokens: int = HELD_OUT_TOKENS,
    threads: int = 2,
    progress: ProgressFn = silent,
) -> DivergenceGate:
    """The verdict on a language model: one teacher-forced pass of the fp32 ONNX and ``candidate`` over the
    held-out text.

    Args:
        fp32: the fp32 ONNX export (the reference).
        candidate: the build's logits per window (``perplexity.onnx_window_logits`` of an ONNX model,
            ``tflite.tflite_window_logits``); None for the fp32 build itself, compared with itself.
        tokenizer: ``tokenizer.json``.
        limits: the profile's thresholds.
        arithmetic: what ``candidate`` computes, as the report names it.
        window: tokens per window (at most what either model holds).
        tokens: tokens of the held-out texts read.
        threads: onnxruntime threads.
        progress: counts the windows.

    Returns:
        The gate record (does not raise; see :meth:`DivergenceGate.check`).

    Raises:
        InputError: a held-out text cannot be read or is too short.
    """
    tokenizers = require("tokenizers", "convert", "tokenizing the held-out text")
    tok = tokenizers.Tokenizer.from_file(str(tokenizer))
    windows = held_out_windows(lambda s: tok.encode(s).ids, window, tokens)
    reference = onnx_window_logits(fp32, threads)
    stats = teacher_forced(reference, candidate or reference, windows, progress)
    return DivergenceGate(summarize(stats), limits, arithmetic)
