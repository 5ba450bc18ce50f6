"""Any GGUF: each architecture x tensor type, our export against transformers loading the same file.

Every file is a tiny random-weight decoder (2 layers, hidden 64 — 256 for K-quants —, 4 query / 2 key-value
heads, vocab 48) written with gguf-py's writer; the legacy quantized types are made by gguf-py's port of
llama.cpp's quantizers, the K-quants (which gguf-py cannot quantize) from random codes and scales.
transformers' GGUF loader dequantizes the same file into ``LlamaForCausalLM`` / ``Qwen2ForCausalLM`` /
``Phi3ForCausalLM``: the fp32 reference. Our fp32 ONNX export must give the same logits (atol 1e-4 on
logits of magnitude ~1-20) and the same 8 greedy tokens. The int4 "grid" model (the GGUF's codes repacked
into MatMulNBits, accuracy level 0) holds the file's codes exactly but sums in another order: logits within
3e-5 x max |logit|, same greedy tokens. Q6_K is re-rounded to 8 bits: close, not exact.
"""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from converters.slm.export import export_onnx
from converters.slm.gguf_source import read_gguf, write_hf_folder
from converters.slm.gqa_graph import build_gqa_onnx
from converters.slm.grid_quant import repack_grid
from edge.errors import ConversionError
from edge_deploy.cli import main
from testsupport.gguf_models import HEAD_DIM, HEADS, HIDDEN, K_TYPES, LAYERS, TOKENS, write_gguf
from testsupport.gguf_models import finish as _finish
from testsupport.gguf_models import ours_run as _ours
from testsupport.gguf_models import reference_model as _reference
from testsupport.gguf_models import reference_run as _reference_run
from testsupport.gguf_models import write_header as _header

ATOL = 1e-4
GRID_RTOL = 3e-5
ARCHS = ("llama", "qwen2", "phi3")
#: every architecture x the common types; the rest of the types on llama (the dequantization is shared)
FP32_CASES = [(a, t) for a in ARCHS for t in (QT.F32, QT.F16, QT.Q8_0, QT.Q4_0, QT.Q4_1)]
FP32_CASES += [("llama", t) for t in (QT.Q5_0, QT.Q5_1, *K_TYPES)]
#: types whose codes MatMulNBits holds exactly, and at how many bits (Q5_*: 8-bit codes with offsets)
GRID_BITS = {QT.Q8_0: 8, QT.Q4_0: 4, QT.Q4_1: 4, QT.Q5_0: 8, QT.Q5_1: 8, QT.Q4_K: 4, QT.Q5_K: 8}
GRID_CASES = [(a, QT.Q4_0) for a in ARCHS] + [("llama", t) for t in GRID_BITS if t != QT.Q4_0]


def _compare(ours: tuple[np.ndarray, list[int]], ref: tuple[np.ndarray, list[int]], atol: float = ATOL) -> None:
    np.testing.assert_allclose(ours[0], ref[0], rtol=0, atol=atol)
    assert ours[1] == ref[1]


@pytest.mark.parametrize(("arch", "qtype"), FP32_CASES, ids=lambda c: getattr(c, "name", c))
def test_fp32_export_equals_transformers(arch: str, qtype: QT, tmp_path: Path) -> None:
    path = write_gguf(tmp_path / f"tiny-{arch}-{qtype.name}.gguf", arch, qtype)
    model = read_gguf(path)
    assert model.llama.architecture == arch and model.llama.attention_bias == (arch == "qwen2")
    assert model.llama.head_dim == model.llama.hidden_size // HEADS
    folder = write_hf_folder(model, tmp_path / "hf")
    fp32 = export_onnx(folder.path, tmp_path / "fp32" / "model.onnx").path
    ref = _reference_run(_reference(path))
    _compare(_ours(fp32), ref)


@pytest.mark.parametrize(("arch", "qtype"), GRID_CASES, ids=lambda c: getattr(c, "name", c))
def test_int4_grid_equals_transformers(arch: str, qtype: QT, tmp_path: Path) -> None:
    """The GGUF's own codes in MatMulNBits: the same function as the file, so the same logits and tokens."""
    path = write_gguf(tmp_path / f"tiny-{arch}-{qtype.name}.gguf", arch, qtype, seed=1, tied=qtype != QT.Q4_1)
    folder = write_hf_folder(read_gguf(path), tmp_path / "hf")
    fused = build_gqa_onnx(folder.path, tmp_path / "gqa" / "model.onnx")
    counts = repack_grid(fused, tmp_path / "int4" / "model.onnx", accuracy_level=0)
    # 4 weight MatMuls per layer (qkv, o, gate_up, down) + the LM head, all on the file's grid
    bits = GRID_BITS[qtype]
    assert counts[f"int{bits}"] == 4 * LAYERS + 1 and counts[f"int{12 - bits}"] == 0
    assert counts["rerounded_int8"] == 0
    ref = _reference_run(_reference(path))
    # same codes, other arithmetic order (scale * code + blocksum * offset): fp32 rounding, ~1e-5 relative
    _compare(_ours(tmp_path / "int4" / "model.onnx"), ref, GRID_RTOL * float(np.abs(ref[0]).max()))


def test_q6_k_is_re_rounded_to_8_bits(tmp_path: Path) -> None:
    """Q6_K scales every 16 weights: no block-32 MatMulNBits holds it, so each weight is re-rounded to
    symmetric 8 bits (an error below half a step of amax/127 per block) and counted; the gates judge it."""
    path = write_gguf(tmp_path / "tiny-llama-Q6_K.gguf", "llama", QT.Q6_K, seed=1)
    folder = write_hf_folder(read_gguf(path), tmp_path / "hf")
    fused = build_gqa_onnx(folder.path, tmp_path / "gqa" / "model.onnx")
    with pytest.raises(ConversionError, match="lies on no Q4_1, Q4_0 or Q8_0 block grid"):
        repack_grid(fused, tmp_path / "refused.onnx", accuracy_level=0)
    counts = repack_grid(fused, tmp_path / "int4" / "model.onnx", accuracy_level=0, reround=True)
    assert counts["rerounded_int8"] == counts["int8"] == 4 * LAYERS + 1
    ours, ref = _ours(tmp_path / "int4" / "model.onnx"), _reference_run(_reference(path))
    diff = float(np.abs(ours[0] - ref[0]).max())
    # not exact (0.108 on logits up to ~20 here), but close, and the same greedy tokens
    assert 1e-3 < diff < 0.25 and ours[1] == ref[1], diff


def test_convert_slm_gguf_flag_builds_a_gated_qwen2(tmp_path: Path, capsys) -> None:
    """``convert slm --gguf FILE``: the whole chain (fp32 export, int4 grid, the gate) on another GGUF."""
    path = write_gguf(tmp_path / "tiny-qwen2-Q4_0.gguf", "qwen2", QT.Q4_0, seed=2)
    out = tmp_path / "out"
    assert main(["convert", "slm", "--target", "rpi4", "--gguf", str(path), "-o", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["source"]["file"] == path.name and report["source"]["package"] == "file"
    assert report["method"] == "gguf_grid" and report["settings"]["weights_int4"] == 4 * LAYERS + 1
    assert report["gate"]["passed"] and abs(report["gate"]["perplexity_ratio"] - 1.0) < 1e-3
    assert report["greedy_agreement"]["passed"]
    assert json.loads((out / "generation.json").read_text())["stop_token_ids"] == [2, 0]


def test_unsupported_architecture_names_the_key(tmp_path: Path) -> None:
    path = tmp_path / "mamba.gguf"
    w = gguf.GGUFWriter(str(path), "mamba")
    _header(w, "mamba")
    w.add_tensor("token_embd.weight", np.zeros((len(TOKENS), HIDDEN), np.float32))
    _finish(w)
    with pytest.raises(ConversionError) as err:
        read_gguf(path)
    assert str(err.value) == f"{path}: general.architecture = 'mamba'; expected one of llama, qwen2, phi3"


def test_partial_rotary_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "partial.gguf"
    w = gguf.GGUFWriter(str(path), "phi3")
    _header(w, "phi3")
    w.add_rope_dimension_count(HEAD_DIM // 2)
    w.add_tensor("token_embd.weight", np.zeros((len(TOKENS), HIDDEN), np.float32))
    _finish(w)
    with pytest.raises(ConversionError) as err:
        read_gguf(path)
    assert str(err.value) == (
        f"{path}: phi3.rope.dimension_count = 8; expected the head size 16 (partial rotary embeddings are not "
        "supported)"
    )


def test_rope_scaling_factors_are_an_unknown_tensor(tmp_path: Path) -> None:
    """Phi-3 128k files carry LongRoPE factors as tensors: refused by name before anything is converted."""
    path = tmp_path / "longrope.gguf"
    w = gguf.GGUFWriter(str(path), "phi3")
    _header(w, "phi3")
    w.add_tensor("rope_factors_long.weight", np.ones(HEAD_DIM // 2, np.float32))
    _finish(w)
    with pytest.raises(ConversionError) as err:
        read_gguf(path)
    assert str(err.value).startswith(
        f"{path}: unknown GGUF tensor 'rope_factors_long.weight'; expected one of token_embd.weight, "
    )


def test_unsupported_tensor_type_names_tensor_and_type(tmp_path: Path) -> None:
    path = tmp_path / "iq4.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    _header(w, "llama")
    # IQ4_NL: blocks of 32 weights in 18 bytes (an fp16 scale + 16 bytes of non-linear 4-bit codes)
    w.add_tensor("token_embd.weight", np.zeros((len(TOKENS), HIDDEN // 32 * 18), np.uint8), raw_dtype=QT.IQ4_NL)
    _finish(w)
    with pytest.raises(ConversionError) as err:
        read_gguf(path)
    assert str(err.value) == (
        f"{path}: tensor 'token_embd.weight' has type IQ4_NL; expected one of F32, F16, BF16, Q8_0, Q4_0, "
        "Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K"
    )
