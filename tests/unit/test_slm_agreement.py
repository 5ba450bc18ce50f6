"""Greedy answer records: a report and the "Paris" smoke check, with its exact error text (no model needed)."""

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


def test_answers_that_differ_from_fp32_are_reported_not_failed() -> None:
    # an exact 16-token run is not the verdict (the teacher-forced gate is): differing answers pass
    same = _prompt("Hi", (7, 8, 2), (7, 8, 2), "Hello", "Hello")
    other = _prompt("How do I ride a bicycle?", tuple(range(16)), (0, 1, 9), "Riding...", "Ride...")
    agreement = GreedyAgreement((same, other), required=16)
    assert agreement.passed and agreement.failures == ()
    agreement.check("model.onnx")  # does not raise
    assert [p["leading_equal"] for p in agreement.to_dict()["prompts"]] == [3, 2]


def test_paris_reworded_passes_the_smoke_check() -> None:
    paris = _prompt(
        "What is the capital of France?", (504, 3575, 2), (9, 3575, 2), "The capital of France is Paris.", "Paris."
    )
    assert GreedyAgreement((paris,), required=16).passed


def test_smoke_check_applies_only_where_fp32_names_the_word() -> None:
    # a model that does not know Paris in fp32 (a tiny random GGUF) is not failed by its builds
    random = _prompt("What is the capital of France?", (5, 6), (7, 8), "gibberish", "other gibberish")
    assert GreedyAgreement((random,), required=16).passed


def test_smoke_failure_names_prompt_answers_and_word() -> None:
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
    }
    assert agreement.to_dict()["smoke_check"] == {"What is the capital of France?": "Paris"}
    with pytest.raises(ValidationError) as err:
        agreement.check("out/model.onnx (rpi4, int4, gguf_grid)")
    assert str(err.value) == (
        "out/model.onnx (rpi4, int4, gguf_grid): the greedy smoke check failed:\n"
        "  'What is the capital of France?': fp32 'The capital of France is Paris.', quantized \"L'Étoile, la Cité\"; "
        "expected an answer naming 'Paris'"
    )
