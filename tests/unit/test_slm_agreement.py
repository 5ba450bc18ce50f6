"""Greedy agreement records: which prompts fail, and the exact error text (no model needed)."""

from __future__ import annotations

import pytest

from converters.slm.agreement import GreedyAgreement, PromptAgreement, leading_equal
from edge.errors import ValidationError


def _prompt(prompt: str, ref: tuple[int, ...], cand: tuple[int, ...], ref_text: str, cand_text: str):
    return PromptAgreement(prompt, ref, cand, ref_text, cand_text, leading_equal(ref, cand))


def testleading_equal_counts_up_to_the_first_difference() -> None:
    assert leading_equal([1, 2, 3], [1, 2, 4]) == 2
    assert leading_equal([1, 2], [1, 2, 3]) == 2
    assert leading_equal([5], [6]) == 0


def test_short_reference_answers_need_only_their_length() -> None:
    # fp32 stopped after 3 tokens (the stop token is the third): the candidate must match those 3
    same = _prompt("Hi", (7, 8, 2), (7, 8, 2), "Hello", "Hello")
    agreement = GreedyAgreement((same,), required=16)
    assert agreement.passed and agreement.failures == ()
    agreement.check("model.onnx")  # does not raise


def test_failure_names_prompt_answers_and_threshold() -> None:
    ok = _prompt("How do I ride a bicycle?", tuple(range(16)), tuple(range(16)), "Riding...", "Riding...")
    bad = _prompt(
        "What is the capital of France?",
        (504, 3575, 282, 4649, 314, 7042, 30, 2),
        (59, 23, 9, 4, 11, 12, 13, 14),
        "The capital of France is Paris.",
        "L'Étoile, la Cité",
    )
    agreement = GreedyAgreement((ok, bad), required=16)
    assert not agreement.passed and agreement.failures == (bad,)
    assert agreement.to_dict()["prompts"][1] == {
        "prompt": "What is the capital of France?",
        "leading_equal": 0,
        "reference": "The capital of France is Paris.",
        "candidate": "L'Étoile, la Cité",
        "needed": 8,
    }
    with pytest.raises(ValidationError) as err:
        agreement.check("out/model.onnx (rpi4, int4, gguf_grid)")
    assert str(err.value) == (
        "out/model.onnx (rpi4, int4, gguf_grid): greedy answers differ from fp32 on 1 of 2 prompts; expected the "
        "first 16 tokens equal (thresholds.slm_greedy_tokens):\n"
        "  'What is the capital of France?': 0 equal leading tokens (need 8); "
        "fp32 'The capital of France is Paris.', quantized \"L'Étoile, la Cité\""
    )
