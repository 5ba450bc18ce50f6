"""The teacher-forced comparison's arithmetic (converters.slm.divergence) on hand-computed cases, no model."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from converters.slm.divergence import (
    HELD_OUT_TEXTS,
    Divergence,
    DivergenceGate,
    DivergenceLimits,
    PositionStats,
    held_out_windows,
    perplexities,
    position_stats,
    summarize,
    teacher_forced,
)
from edge.errors import InputError, ValidationError
from edge.profiles import load_profile


def test_kld_of_identical_logits_is_zero_whatever_the_shift() -> None:
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(5, 50)).astype(np.float32) * 4
    s = position_stats(logits, logits + 7.0, [0, 1, 2, 3, 4])
    assert np.all(np.abs(s.kld) < 1e-12)
    assert s.same_top1.all()
    assert np.allclose(s.reference_nll, s.candidate_nll)


def test_kld_of_a_known_pair_is_kl_from_fp32_to_the_candidate() -> None:
    # P = (1/2, 1/2) (fp32), Q = (3/4, 1/4): KL(P||Q) = 1/2 ln(4/3) = 0.14384; KL(Q||P) would be 0.13081.
    p = np.array([[0.0, 0.0]])
    q = np.array([[math.log(3.0), 0.0]])
    s = position_stats(p, q, [1])
    assert s.kld[0] == pytest.approx(0.5 * math.log(4 / 3), abs=1e-12)
    assert s.reference_nll[0] == pytest.approx(math.log(2))
    assert s.candidate_nll[0] == pytest.approx(math.log(4))


def test_same_top1_compares_argmax_per_position() -> None:
    ref = np.array([[3.0, 1.0, 0.0], [0.0, 2.0, 1.0], [0.0, 1.0, 5.0], [1.0, 0.0, 0.0]])
    cand = np.array([[2.0, 2.5, 0.0], [0.0, 9.0, 1.0], [0.0, 1.0, 1.5], [0.0, 0.0, 3.0]])
    s = position_stats(ref, cand, [0, 0, 0, 0])
    assert s.same_top1.tolist() == [False, True, True, False]
    assert summarize([s]).same_top1 == 0.5


def _stats(kld: list[float], ref_nll: list[float] | None = None, cand_nll: list[float] | None = None) -> PositionStats:
    n = len(kld)
    zeros = [0.0] * n
    return PositionStats(np.array(kld), np.ones(n, bool), np.array(ref_nll or zeros), np.array(cand_nll or zeros))


def test_summary_mean_p99_max_over_all_windows() -> None:
    # 100 positions in two windows: 99 at 0 and one at 100. p99 interpolates between the 99th and 100th
    # smallest (index 0.99 * 99 = 98.01): 0.01 * 100 = 1.0; the mean is 1.0 too, the max 100.
    d = summarize([_stats([0.0] * 60), _stats([0.0] * 39 + [100.0])])
    assert (d.tokens, d.windows) == (100, 2)
    assert d.mean_kld == pytest.approx(1.0)
    assert d.p99_kld == pytest.approx(1.0)
    assert d.max_kld == 100.0
    spread = summarize([_stats([float(i) for i in range(101)])])
    assert spread.p99_kld == pytest.approx(99.0)
    assert spread.mean_kld == pytest.approx(50.0)


def test_perplexity_is_exp_of_mean_nll_per_token_and_ratio_candidate_over_fp32() -> None:
    a = _stats([0.0, 0.0], [math.log(4)] * 2, [math.log(8)] * 2)
    b = _stats([0.0], [math.log(4)], [math.log(2)])
    d = summarize([a, b])
    # candidate: exp((2 ln 8 + ln 2) / 3) = exp(7/3 ln 2) = 2^(7/3)
    assert d.reference_perplexity == pytest.approx(4.0)
    assert d.candidate_perplexity == pytest.approx(2 ** (7 / 3))
    assert d.perplexity_ratio == pytest.approx(2 ** (7 / 3) / 4)
    ref, cand = perplexities([a, b])
    assert (ref.perplexity, ref.tokens_scored, ref.windows) == pytest.approx((4.0, 3, 2))
    assert cand.perplexity == pytest.approx(d.candidate_perplexity)


def test_teacher_forced_scores_the_token_after_each_position() -> None:
    vocab = 6
    calls: list[list[int]] = []

    def model(ids: list[int]) -> np.ndarray:  # puts 10 on "the id + 1" after each position
        calls.append(ids)
        out = np.zeros((len(ids) - 1, vocab))
        out[np.arange(len(ids) - 1), (np.array(ids[:-1]) + 1) % vocab] = 10.0
        return out

    stats = teacher_forced(model, model, [[0, 1, 2, 3], [4, 5]])
    assert calls == [[0, 1, 2, 3], [4, 5]]  # the same model is run once per window
    d = summarize(stats)
    assert d.tokens == 4 and d.mean_kld == 0.0 and d.same_top1 == 1.0
    expected_nll = math.log(math.exp(10) + vocab - 1) - 10  # the text follows the model's favourite every time
    assert d.reference_perplexity == pytest.approx(math.exp(expected_nll))


def test_shapes_must_match() -> None:
    with pytest.raises(InputError, match="expected equal 2-D"):
        position_stats(np.zeros((2, 3)), np.zeros((2, 4)), [0, 0])
    with pytest.raises(InputError, match="one per position"):
        position_stats(np.zeros((2, 3)), np.zeros((2, 3)), [0])
    with pytest.raises(InputError, match="no scored positions"):
        summarize([])


def test_held_out_windows_stay_inside_each_text_and_stop_at_the_budget(tmp_path: Path) -> None:
    first, second = tmp_path / "a.txt", tmp_path / "b.txt"
    first.write_text("abcdefg")
    second.write_text("HIJKLMNOPQ")
    encode = lambda s: [ord(c) for c in s]  # noqa: E731
    windows = held_out_windows(encode, 3, 12, texts=(first, second))
    # "g" alone scores nothing and is dropped; the second text fills the budget of 12
    assert ["".join(map(chr, w)) for w in windows] == ["abc", "def", "HIJ", "KLM"]
    with pytest.raises(InputError, match="expected 40"):
        held_out_windows(encode, 3, 40, texts=(first, second))


def test_shipped_held_out_texts_exist_with_their_sources() -> None:
    for text in HELD_OUT_TEXTS:
        assert text.is_file() and text.with_suffix(".SOURCE.md").is_file()


#: llama.cpp 0.3.36 (llama-cpp-python) running SmolLM2's Q4_1 GGUF, as measured in docs/slm.md
LLAMA_CPP = Divergence(8175, 17, 0.0054, 0.040, 0.9, 0.9584, 10.0, 10.042)


def test_the_profiles_declare_the_gate_once_at_llama_cpps_figures() -> None:
    for target in ("rpi4", "rpi5", "x86_64-host", "browser-wasm"):
        assert DivergenceLimits.of(load_profile(target).thresholds) == DivergenceLimits(0.0054, 0.040, 0.958, 1.0042)
    gate = DivergenceGate(LLAMA_CPP, DivergenceLimits.of(load_profile("rpi4").thresholds), "level 0")
    assert gate.passed and gate.failures == ()  # llama.cpp itself is exactly at the limits
    gate.check("model.onnx")  # does not raise
    assert gate.to_dict() == {
        "passed": True,
        "arithmetic": "level 0",
        "thresholds": {
            "thresholds.slm_max_mean_kld": 0.0054,
            "thresholds.slm_max_p99_kld": 0.040,
            "thresholds.slm_min_same_top1": 0.958,
            "thresholds.slm_max_perplexity_ratio": 1.0042,
        },
        "failures": [],
    }


def test_a_build_further_from_fp32_than_llama_cpp_fails_naming_each_figure_and_threshold() -> None:
    # per-tensor dynamic uint8 activations: far beyond llama.cpp on every figure
    drifted = Divergence(8175, 17, 0.31, 2.9, 7.5, 0.7203, 10.0, 21.1)
    gate = DivergenceGate(drifted, DivergenceLimits(0.0054, 0.040, 0.958, 1.0042), "the shipped graph")
    with pytest.raises(ValidationError) as err:
        gate.check("out/model.onnx (rpi4, int8, dynamic_int8)")
    assert str(err.value) == (
        "out/model.onnx (rpi4, int8, dynamic_int8): further from fp32 than llama.cpp running the same GGUF, "
        "teacher-forced over 8175 held-out tokens (the shipped graph):\n"
        "  mean KLD 0.31; expected at most 0.0054 (thresholds.slm_max_mean_kld)\n"
        "  p99 KLD 2.9; expected at most 0.04 (thresholds.slm_max_p99_kld)\n"
        "  same top-1 72.03 %; expected at least 95.80 % (thresholds.slm_min_same_top1)\n"
        "  perplexity ratio 2.1100; expected at most 1.0042 (thresholds.slm_max_perplexity_ratio)"
    )
    assert gate.to_dict()["failures"] == str(err.value).split("\n  ")[1:]
    assert gate.line().startswith("FAILED teacher-forced gate: KLD mean 0.31, p99 2.9; same top-1 72.03 %")


def test_one_figure_over_its_limit_fails_alone() -> None:
    limits = DivergenceLimits(0.0054, 0.040, 0.958, 1.0042)
    p99 = Divergence(8175, 17, 0.004, 0.05, 0.9, 0.97, 10.0, 10.01)
    assert DivergenceGate(p99, limits, "x").failures == (
        "p99 KLD 0.05; expected at most 0.04 (thresholds.slm_max_p99_kld)",
    )
    nan = Divergence(8175, 17, float("nan"), 0.0, 0.0, 1.0, 10.0, 10.0)
    assert DivergenceGate(nan, limits, "x").failures[0].startswith("mean KLD nan; expected at most 0.0054")
