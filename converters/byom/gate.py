"""The gate of a user's model: how far a candidate's outputs are from the source's, by task.

* embedding (the first output, one vector per sample): cosine per sample (mean and min gated by
  ``min_cosine``), and nearest-neighbour ranking agreement: for each evaluation sample, whether its nearest
  other sample (by cosine) is the same under the candidate as under the source (``min_rank_agreement``).
* classification (the first output, scores on the last axis): top-1 agreement with the source
  (``min_top1``).
* raw (every output): max absolute difference (``max_abs_error``, off by default) and max relative
  difference = max |candidate - source| / max |source| per output (``max_rel_error``).

An fp32 copy is held to ``fp32_max_abs`` on every output whatever the task (it is the same graph), relative to
the output's largest value where that is above 1.
Thresholds come from the target profile's ``[thresholds] model_*`` keys, each overridden by its flag
(``thresholds_for``).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from edge.cosine import row_cosines
from edge.errors import InputError

if TYPE_CHECKING:
    from edge.profiles import TargetProfile


class Task(enum.Enum):
    EMBEDDING = "embedding"
    CLASSIFICATION = "classification"
    RAW = "raw"


@dataclass(frozen=True)
class GateThresholds:
    """What a candidate must meet; defaults are the CLI's (``docs/byom.md`` says why)."""

    min_cosine: float = 0.99
    min_rank_agreement: float = 0.9
    min_top1: float = 0.98
    max_abs_error: float | None = None
    max_rel_error: float = 0.05
    fp32_max_abs: float = 1e-4
    #: Where each threshold came from (flag or profile key), for the report; empty: these defaults.
    given_by: Mapping[str, str] = field(default_factory=dict)

    def check(self) -> GateThresholds:
        """Return self after checking every value is finite and in range.

        Raises:
            InputError: naming the flag and the allowed range.
        """
        for flag, value in (
            ("--min-cosine", self.min_cosine),
            ("--min-rank-agreement", self.min_rank_agreement),
            ("--min-top1", self.min_top1),
        ):
            if not (math.isfinite(value) and 0.0 < value <= 1.0):
                raise InputError(f"{flag} {value}; expected a number in (0, 1]")
        for flag, limit in (("--max-abs-error", self.max_abs_error), ("--max-rel-error", self.max_rel_error)):
            if limit is not None and not (math.isfinite(limit) and limit > 0.0):
                raise InputError(f"{flag} {limit}; expected a finite number > 0")
        return self

    def to_dict(self) -> dict:
        return {**self.__dict__, "given_by": dict(self.given_by)}

    def named(self, name: str) -> str:
        """How a failure names threshold ``name``: its profile key when the profile set it, else its flag."""
        given = self.given_by.get(name, "")
        return given if given.endswith(PROFILE_KEYS[name][0]) else PROFILE_KEYS[name][1]


#: The gate's thresholds a profile sets (``[thresholds] model_*``) and the flag that overrides each.
PROFILE_KEYS = {
    "min_cosine": ("model_min_cosine", "--min-cosine"),
    "min_rank_agreement": ("model_min_rank_agreement", "--min-rank-agreement"),
    "min_top1": ("model_min_top1", "--min-top1"),
    "max_rel_error": ("model_max_rel_error", "--max-rel-error"),
}


def thresholds_for(profile: TargetProfile, flags: Mapping[str, float | None]) -> GateThresholds:
    """The gate's thresholds for ``profile``: each flag that was given, else the profile's ``model_*`` key.

    Args:
        profile: the target; its ``thresholds.model_*`` keys (defaults 0.99, 0.9, 0.98, 0.05) and its
            ``embed_max_abs_diff_fp32`` for the fp32 copy.
        flags: ``min_cosine``, ``min_rank_agreement``, ``min_top1``, ``max_rel_error``, ``max_abs_error`` as
            given on the command line (None: not given).

    Returns:
        The thresholds, with ``given_by`` naming the flag or the profile key of each.
    """
    values: dict[str, Any] = {"max_abs_error": flags.get("max_abs_error")}
    given_by = {"fp32_max_abs": f"{profile.source.name} thresholds.embed_max_abs_diff_fp32"}
    given_by["max_abs_error"] = "--max-abs-error" if values["max_abs_error"] is not None else "not gated"
    for name, (key, flag) in PROFILE_KEYS.items():
        given = flags.get(name)
        values[name] = given if given is not None else getattr(profile.thresholds, key)
        given_by[name] = flag if given is not None else f"{profile.source.name} thresholds.{key}"
    return GateThresholds(**values, fp32_max_abs=profile.thresholds.embed_max_abs_diff_fp32, given_by=given_by)


def _nearest(vectors: np.ndarray) -> np.ndarray:
    unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-300)
    sim = unit @ unit.T
    np.fill_diagonal(sim, -np.inf)
    return np.argmax(sim, axis=1)


def measure_embedding(ref: np.ndarray, cand: np.ndarray) -> dict:
    """Cosine per sample and nearest-neighbour agreement of two [N, ...] outputs (N >= 2)."""
    a = ref.reshape(len(ref), -1).astype(np.float64)
    b = cand.reshape(len(cand), -1).astype(np.float64)
    cos = row_cosines(a, b)
    same = _nearest(a) == _nearest(b)
    return {
        "samples": len(a),
        "dimension": a.shape[1],
        "cosine_mean": float(cos.mean()),
        "cosine_min": float(cos.min()),
        "rank_agreement": float(same.mean()),
        "rank_agree": int(same.sum()),
    }


def measure_classification(ref: np.ndarray, cand: np.ndarray) -> dict:
    """Top-1 agreement of two score outputs (classes on the last axis)."""
    top_ref, top_cand = np.argmax(ref, axis=-1).ravel(), np.argmax(cand, axis=-1).ravel()
    agree = top_ref == top_cand
    return {
        "samples": int(agree.size),
        "classes": int(ref.shape[-1]),
        "top1_agreement": float(agree.mean()),
        "top1_agree": int(agree.sum()),
    }


def measure_raw(names: Sequence[str], ref: Sequence[np.ndarray], cand: Sequence[np.ndarray]) -> dict:
    """Max absolute and relative difference of every output."""
    out = {}
    for name, r, c in zip(names, ref, cand, strict=True):
        r64, c64 = r.astype(np.float64), c.astype(np.float64)
        diff = float(np.max(np.abs(r64 - c64))) if r64.size else 0.0
        scale = float(np.max(np.abs(r64))) if r64.size else 0.0
        out[name] = {"shape": list(r.shape), "max_abs": diff, "max_rel": diff / scale if scale > 0 else diff}
    return {"outputs": out}


def measure(task: Task, names: Sequence[str], ref: Sequence[np.ndarray], cand: Sequence[np.ndarray]) -> dict:
    """The task's figures (raw figures of every output are always included)."""
    figures = measure_raw(names, ref, cand)
    if task is Task.EMBEDDING:
        figures["embedding"] = measure_embedding(ref[0], cand[0])
    elif task is Task.CLASSIFICATION:
        figures["classification"] = measure_classification(ref[0], cand[0])
    return figures


def _raw_failures(figures: dict, t: GateThresholds) -> list[str]:
    out = []
    for name, f in figures["outputs"].items():
        if t.max_abs_error is not None and f["max_abs"] > t.max_abs_error:
            out.append(f"output {name!r}: max abs difference {f['max_abs']:.6g} > --max-abs-error {t.max_abs_error:g}")
        if f["max_rel"] > t.max_rel_error:
            out.append(
                f"output {name!r}: max relative difference {f['max_rel']:.6g} > {t.named('max_rel_error')} "
                f"{t.max_rel_error:g}"
            )
    return out


def failures(task: Task, figures: dict, t: GateThresholds) -> list[str]:
    """Every threshold the candidate misses, with the measured value and the flag in each line."""
    if task is Task.RAW:
        return _raw_failures(figures, t)
    out = []
    if task is Task.EMBEDDING:
        e = figures["embedding"]
        if e["cosine_mean"] < t.min_cosine:
            out.append(
                f"embedding: mean cosine to the source {e['cosine_mean']:.5f} < {t.named('min_cosine')} "
                f"{t.min_cosine:g} "
                f"({e['samples']} samples; min {e['cosine_min']:.5f})"
            )
        if e["rank_agreement"] < t.min_rank_agreement:
            out.append(
                f"embedding: nearest-neighbour agreement {e['rank_agreement']:.4f} ({e['rank_agree']} of "
                f"{e['samples']}) < {t.named('min_rank_agreement')} {t.min_rank_agreement:g}"
            )
    else:
        c = figures["classification"]
        if c["top1_agreement"] < t.min_top1:
            out.append(
                f"classification: top-1 agreement with the source {c['top1_agreement']:.4f} ({c['top1_agree']} of "
                f"{c['samples']}) < {t.named('min_top1')} {t.min_top1:g}"
            )
    return out


def fp32_failures(figures: dict, limit: float) -> list[str]:
    """Outputs of an fp32 copy further than ``limit`` from the source (any task), scaled by the output's largest
    magnitude where that is above 1: float32 rounding grows with the values, and how it rounds depends on the
    host's kernels, so an absolute bound on large logits made the verdict depend on the build host's CPU."""
    return [
        f"output {name!r}: fp32 copy differs from the source by {f['max_abs']:.3g} (relative {f['max_rel']:.3g}); "
        f"expected at most {limit:g}, relative to the output's largest value where that is above 1"
        for name, f in figures["outputs"].items()
        if f["max_abs"] > limit and f["max_rel"] > limit
    ]
