"""SmolLM2 INT8 builds: weight-only MatMulNBits passes the rpi4 perplexity gate, dynamic INT8 does not."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

pytestmark = pytest.mark.integration

onnx = pytest.importorskip("onnx")
pytest.importorskip("torch")

from converters.slm.build import SlmOptions, convert_slm  # noqa: E402
from converters.slm.perplexity import DEFAULT_TEXT, gate, perplexity, text_windows  # noqa: E402
from converters.slm.quantize import quantize_int8_dynamic  # noqa: E402
from edge.errors import ValidationError  # noqa: E402
from edge.profiles import Precision, load_profile  # noqa: E402
from edge.text import SamplingConfig, TextGenerator  # noqa: E402


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    root = tmp_path_factory.mktemp("slm8")
    profile = load_profile("rpi4")
    options = SlmOptions(eval_tokens=1024, work_dir=root / "work")
    return root, profile, convert_slm(profile, Precision.INT8, root / "int8", options=options)


def test_weight_only_int8_passes_the_gate(build) -> None:
    _, profile, result = build
    nodes = onnx.load(str(result.model), load_external_data=False).graph.node
    bits = Counter(
        onnx.helper.get_attribute_value(a)
        for n in nodes
        if n.op_type == "MatMulNBits"
        for a in n.attribute
        if a.name == "bits"
    )
    assert bits == {8: 121}
    g = result.gate
    print(f"int8 weight-only: perplexity {g.candidate.perplexity:.4f} vs fp32 {g.reference.perplexity:.4f}")
    assert g.passed and g.candidate.tokens_scored == 1022
    report = json.loads(result.report_json.read_text())
    assert report["precision"] == "int8" and report["method"] == "matmul_nbits"
    assert report["settings"]["bits"] == 8 and report["settings"]["block_size"] == profile.quant.int4_block_size
    with TextGenerator(result.out_dir, threads=2) as gen:
        # (the first token of "What is the capital of France?" is a near tie that accuracy level 4 flips,
        # so check raw continuations with a clear answer; fp32 gives the same)
        capital = gen.generate("The capital of France is", SamplingConfig(max_new_tokens=3), chat=False)
        assert capital.text.startswith(" Paris.")
        counted = gen.generate("One, two, three, four,", SamplingConfig(max_new_tokens=4), chat=False)
        assert counted.text == " five, six,"


def test_dynamic_int8_misses_the_gate(build) -> None:
    root, profile, result = build
    out = root / "dyn" / "model.onnx"
    q = quantize_int8_dynamic(result.fp32_model, out, per_channel=profile.quant.per_channel)
    assert q.op_counts["MatMulInteger"] == 121 and q.op_counts.get("MatMulNBits", 0) == 0
    from tokenizers import Tokenizer

    ids = Tokenizer.from_file(str(result.tokenizer)).encode(DEFAULT_TEXT.read_text()).ids
    windows = text_windows(ids, 512, 512)
    reference, candidate = perplexity(result.fp32_model, windows), perplexity(out, windows)
    print(f"dynamic int8: perplexity {candidate.perplexity:.3f} vs fp32 {reference.perplexity:.3f}")
    with pytest.raises(ValidationError) as err:
        gate(reference, candidate, profile.thresholds.slm_perplexity_ratio, str(out))
    assert re.fullmatch(
        rf"{re.escape(str(out))}: perplexity \d+\.\d{{3}} vs fp32 \d+\.\d{{3}} \(ratio \d\.\d{{4}}\) on 511 "
        r"tokens; expected a ratio of at most 1\.1 \(thresholds\.slm_perplexity_ratio\)",
        str(err.value),
    )
