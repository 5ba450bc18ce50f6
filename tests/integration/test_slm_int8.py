"""SmolLM2 INT8 builds: weight-only MatMulNBits passes the rpi4 teacher-forced gate but not the Paris smoke check
(re-rounding the 4-bit weights onto an 8-bit grid flips the France answer); dynamic INT8 misses every figure of
the gate."""

from __future__ import annotations

import json
import re
from collections import Counter

import onnx
import pytest

from converters.slm.build import ARITHMETIC_AS_SHIPPED, MODEL_FILE, SlmOptions, convert_slm
from converters.slm.divergence import DivergenceLimits, gate_against_fp32
from converters.slm.perplexity import onnx_window_logits
from converters.slm.quantize import quantize_int8_dynamic
from edge.errors import ValidationError
from edge.profiles import LmHead, Precision, load_profile
from edge.text import SamplingConfig, TextGenerator

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def build(tmp_path_factory, slm_int4):
    """(root, profile, the ValidationError of the smoke check, progress lines): the build folder and report
    are written before the gates raise. The session's INT4 work folder is shared, so its fp32 export is
    reused (not exported a second time)."""
    root = tmp_path_factory.mktemp("slm8")
    profile = load_profile("rpi4")
    options = SlmOptions(work_dir=slm_int4["root"] / "work")
    lines: list[str] = []
    with pytest.raises(ValidationError) as err:
        convert_slm(profile, Precision.INT8, root / "int8", progress=lines.append, options=options)
    return root, profile, err.value, lines


def test_a_kept_fp32_export_is_reused_by_the_next_conversion(build, slm_int4) -> None:
    lines = build[3]
    kept = slm_int4["root"] / "work" / "fp32"
    assert f"reusing the fp32 export in {kept} (same GGUF, same exporter)" in lines, lines
    assert "exporting fp32 ONNX with KV cache" not in lines


def test_weight_only_int8_passes_the_gate_but_not_the_paris_smoke_check(build) -> None:
    root, profile, error, _ = build
    out = root / "int8"
    model = out / MODEL_FILE
    assert str(error).startswith(
        f"{model} (rpi4, int8, matmul_nbits): the greedy smoke check failed:\n  'What is the capital of France?': "
        "fp32 'The capital of France is Paris.', quantized \"L'"
    ) and str(error).endswith("; expected an answer naming 'Paris'")
    print(error)
    nodes = onnx.load(str(model), load_external_data=False).graph.node
    bits = Counter(
        onnx.helper.get_attribute_value(a)
        for n in nodes
        if n.op_type == "MatMulNBits"
        for a in n.attribute
        if a.name == "bits"
    )
    fp32_head = profile.quant.lm_head is LmHead.FP32  # rpi4: the head is an fp32 Gemm over its 8-bit codes
    assert bits == {8: 121 - fp32_head}
    assert sum(n.op_type == "Gemm" for n in nodes) == fp32_head
    report = json.loads((out / "report.json").read_text())
    gate = report["gate"]
    print(f"int8 weight-only: {gate['mean_kld']:.3g} mean KLD, {gate['same_top1_percent']:.2f} % same top-1")
    assert gate["passed"] and gate["tokens_scored"] == 8175 and gate["failures"] == []
    assert report["greedy_agreement"]["passed"] is False
    assert report["precision"] == "int8" and report["method"] == "matmul_nbits"
    assert report["settings"]["bits"] == 8 and report["settings"]["block_size"] == profile.quant.int4_block_size
    assert report["settings"]["exact_top_k"] == (0 if fp32_head else 8)
    assert report["settings"]["fp32_head"] == int(fp32_head)
    with TextGenerator(out, threads=2) as gen:
        # (the first token of "What is the capital of France?" is a near tie that accuracy level 4 flips,
        # so check raw continuations with a clear answer; fp32 gives the same)
        capital = gen.generate("The capital of France is", SamplingConfig(max_new_tokens=3), chat=False)
        assert capital.text.startswith(" Paris.")
        counted = gen.generate("One, two, three, four,", SamplingConfig(max_new_tokens=4), chat=False)
        assert counted.text == " five, six,"


def test_dynamic_int8_misses_the_gate(build, slm_int4) -> None:
    root, profile, _, _ = build
    out = root / "dyn" / "model.onnx"
    fp32 = slm_int4["result"].fp32_model  # the session's kept export, which the INT8 build reused
    assert fp32 == slm_int4["root"] / "work" / "fp32" / MODEL_FILE
    q = quantize_int8_dynamic(fp32, out, per_channel=profile.quant.per_channel)
    assert q.op_counts["MatMulInteger"] == 121 and q.op_counts.get("MatMulNBits", 0) == 0

    # MatMulInteger has no accuracy level: the gate runs the graph as shipped, as convert_slm would
    limits = DivergenceLimits.of(profile.thresholds)
    g = gate_against_fp32(
        fp32, onnx_window_logits(out), root / "int8" / "tokenizer.json", limits, ARITHMETIC_AS_SHIPPED
    )
    print(f"dynamic int8: {g.line()}")
    with pytest.raises(ValidationError) as err:
        g.check(str(out))
    head = (
        f"{out}: further from fp32 than llama.cpp running the same GGUF, teacher-forced over 8175 held-out tokens "
        f"({ARITHMETIC_AS_SHIPPED}):\n"
    )
    assert str(err.value).startswith(head)
    # every figure is further from fp32 than llama.cpp's: each is named with its value and threshold
    assert re.fullmatch(
        re.escape(head) + r"  mean KLD \S+; expected at most 0\.0054 \(thresholds\.slm_max_mean_kld\)\n"
        r"  p99 KLD \S+; expected at most 0\.04 \(thresholds\.slm_max_p99_kld\)\n"
        r"  same top-1 \d+\.\d\d %; expected at least 95\.80 % \(thresholds\.slm_min_same_top1\)\n"
        r"  perplexity ratio \d\.\d{4}; expected at most 1\.0042 \(thresholds\.slm_max_perplexity_ratio\)",
        str(err.value),
    )
