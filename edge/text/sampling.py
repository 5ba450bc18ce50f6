"""Choosing the next token: greedy, or temperature + top-p (nucleus) with a seeded generator."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edge.errors import InputError


@dataclass(frozen=True)
class SamplingConfig:
    """How to generate.

    Attributes:
        max_new_tokens: stop after this many new tokens.
        temperature: 0 for greedy (argmax); otherwise logits are divided by it before sampling.
        top_p: keep the smallest set of tokens whose probability adds up to at least this (1.0 = all).
        seed: seed of the random generator (sampling only); None for a fresh one.
        stop_token_ids: extra ids that end generation (the model's own stop tokens always do).
    """

    max_new_tokens: int = 128
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    stop_token_ids: tuple[int, ...] = ()

    def check(self) -> None:
        """Raise InputError naming the first bad field."""
        if self.max_new_tokens < 1:
            raise InputError(f"max_new_tokens = {self.max_new_tokens}; expected at least 1")
        if not self.temperature >= 0.0:
            raise InputError(f"temperature = {self.temperature}; expected 0 (greedy) or more")
        if not 0.0 < self.top_p <= 1.0:
            raise InputError(f"top_p = {self.top_p}; expected a number in (0, 1]")


class Sampler:
    """Pick token ids from logits according to a :class:`SamplingConfig`."""

    def __init__(self, config: SamplingConfig) -> None:
        config.check()
        self.config = config
        self._rng = np.random.default_rng(config.seed)

    def __call__(self, logits: np.ndarray) -> int:
        """The next token id for one row of logits ``[vocab]``."""
        if self.config.temperature == 0.0:
            return int(np.argmax(logits))
        scaled = logits.astype(np.float64) / self.config.temperature
        probs = np.exp(scaled - scaled.max())
        probs /= probs.sum()
        if self.config.top_p < 1.0:
            order = np.argsort(-probs, kind="stable")
            cumulative = np.cumsum(probs[order])
            keep = order[: int(np.searchsorted(cumulative, self.config.top_p)) + 1]
            kept = probs[keep] / probs[keep].sum()
            return int(keep[self._rng.choice(len(keep), p=kept)])
        return int(self._rng.choice(len(probs), p=probs))
