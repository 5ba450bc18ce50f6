"""Lossless GGUF-grid MatMulNBits: grid detection, packing, and a tiny graph run in onnxruntime."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from converters.slm.grid_quant import find_grid, pack, repack_grid
from edge.errors import ConversionError

K, N = 64, 8


def q4_1_weight(rng: np.random.Generator) -> np.ndarray:
    """[K, N] values on a Q4_1 grid: per block of 32 along K, d * q + m with q in 0..15 (0 and 15 present)."""
    q = rng.integers(0, 16, size=(K // 32, 32, N)).astype(np.float32)
    q[:, 0, :], q[:, 1, :] = 0, 15
    d = rng.uniform(0.01, 0.1, size=(K // 32, 1, N)).astype(np.float16).astype(np.float32)
    m = rng.uniform(-0.5, 0.0, size=(K // 32, 1, N)).astype(np.float16).astype(np.float32)
    return (d * q + m).reshape(K, N)


def q8_0_weight(rng: np.random.Generator) -> np.ndarray:
    q = rng.integers(-127, 128, size=(K // 32, 32, N)).astype(np.float32)
    q[:, 0, :] = 127
    d = rng.uniform(0.001, 0.01, size=(K // 32, 1, N)).astype(np.float16).astype(np.float32)
    return (d * q).reshape(K, N)


def test_finds_q4_1_grid_and_offsets() -> None:
    w = q4_1_weight(np.random.default_rng(0))
    grid = find_grid(w)
    assert grid is not None and grid.bits == 4
    codes = grid.codes.T.reshape(K // 32, 32, N).astype(np.float32)
    scales = grid.scales.T[:, None, :]
    rebuilt = scales * (codes - 8) + grid.offsets[:, None, :]
    np.testing.assert_allclose(rebuilt.reshape(K, N), w, atol=1e-6)


def test_finds_q8_0_grid() -> None:
    grid = find_grid(q8_0_weight(np.random.default_rng(1)))
    assert grid is not None and grid.bits == 8 and grid.offsets is None


def test_finds_q4_0_grid_as_symmetric_codes() -> None:
    """A weight quantized by gguf-py's Q4_0 (llama.cpp's reference code) is MatMulNBits' own format."""
    from gguf import GGMLQuantizationType
    from gguf import quants as gguf_quants

    rows = np.random.default_rng(4).normal(size=(N, K)).astype(np.float32)  # GGUF rows: [N, K]
    q4_0 = gguf_quants.quantize(rows, GGMLQuantizationType.Q4_0)
    w = gguf_quants.dequantize(q4_0, GGMLQuantizationType.Q4_0).T  # [K, N]
    grid = find_grid(np.ascontiguousarray(w))
    assert grid is not None and grid.bits == 4 and grid.offsets is None
    codes = grid.codes.T.reshape(K // 32, 32, N).astype(np.float32)
    np.testing.assert_array_equal((grid.scales.T[:, None, :] * (codes - 8)).reshape(K, N), w)


def _rebuilt(grid) -> np.ndarray:
    codes = grid.codes.T.reshape(K // 32, 32, N).astype(np.float32)
    zero = 2 ** (grid.bits - 1)
    return (grid.scales.T[:, None, :] * (codes - zero) + grid.offsets[:, None, :]).reshape(K, N)


@pytest.mark.parametrize(("top", "bits"), [(15, 4), (31, 8)])
def test_finds_an_offset_grid_whose_extreme_codes_are_unused(top: int, bits: int) -> None:
    """Q4_K / Q5_K sub-blocks: ``d * q - m`` with q below 16 (32), where neither 0 nor the top code need occur."""
    rng = np.random.default_rng(6)
    q = rng.integers(2, top - 2, size=(K // 32, 32, N)).astype(np.float32)
    d = (rng.integers(1, 64, size=(K // 32, 1, N)) * np.float32(np.float16(3e-4))).astype(np.float32)
    m = (rng.integers(0, 64, size=(K // 32, 1, N)) * np.float32(np.float16(1e-3))).astype(np.float32)
    w = (d * q - m).reshape(K, N)
    grid = find_grid(w)
    assert grid is not None and grid.bits == bits and grid.offsets is not None
    np.testing.assert_allclose(_rebuilt(grid), w, rtol=0, atol=1e-6)


def test_off_grid_weight_is_none() -> None:
    assert find_grid(np.random.default_rng(2).normal(size=(K, N)).astype(np.float32)) is None


def test_pack_low_nibble_first() -> None:
    w = q4_1_weight(np.random.default_rng(3))
    grid = find_grid(w)
    packed = pack(grid)
    assert packed.shape == (N, K // 32, 16) and packed.dtype == np.uint8
    assert packed[0, 0, 0] == grid.codes[0, 0] | (grid.codes[0, 1] << 4)


def _graph(path: Path, weights: list[np.ndarray]) -> None:
    nodes, inits, prev = [], [], "x"
    for i, w in enumerate(weights):
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"y{i}"], name=f"mm{i}"))
        prev = f"y{i}"
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "seq", K])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [1, "seq", N])],
        inits,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def _run(path: Path, x: np.ndarray) -> np.ndarray:
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


def test_repacked_graph_matches_fp32(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    w8 = q8_0_weight(rng)
    w4 = q4_1_weight(rng)
    square = np.concatenate([w4] * (K // N), axis=1)  # [K, K] still on the grid (blocks along K)
    fp32, out = tmp_path / "fp32.onnx", tmp_path / "grid.onnx"
    _graph(fp32, [square, w8])
    counts = repack_grid(fp32, out, accuracy_level=0)
    assert counts == {"int4": 1, "int8": 1, "rerounded_int8": 0, "embedding_int8": 0}
    model = onnx.load(str(out))
    ops = Counter(n.op_type for n in model.graph.node)
    # offsets: Reshape + ReduceSum + MatMul + Add; C = Cast(fp16 minimum) + 8 * scales (Reshape, Transpose,
    # Mul, Add), folded by onnxruntime at load; the two scale tensors and the minimum are stored as fp16 + Cast
    assert ops == {
        "MatMulNBits": 2,
        "Reshape": 2,
        "ReduceSum": 1,
        "MatMul": 1,
        "Add": 2,
        "Cast": 3,
        "Transpose": 1,
        "Mul": 1,
    }
    halves = [i.name for i in model.graph.initializer if i.data_type == TensorProto.FLOAT16]
    assert sorted(halves) == ["w0_grid_min_fp16", "w0_grid_scales_fp16", "w1_grid_scales_fp16"]
    x = rng.normal(size=(1, 3, K)).astype(np.float32)
    np.testing.assert_allclose(_run(out, x), _run(fp32, x), rtol=1e-4, atol=1e-4)


def _tied_graph(path: Path, table: np.ndarray, hidden: np.ndarray) -> None:
    """ids -> tied embedding (Gather axis 1 on the head's [K, V] weight + Transpose) -> MatMul -> LM head."""
    nodes = [
        helper.make_node("Gather", ["head", "input_ids"], ["cols"], name="/embed_tokens/Gather", axis=1),
        helper.make_node("Transpose", ["cols"], ["x"], name="/embed_tokens/Transpose", perm=[1, 2, 0]),
        helper.make_node("MatMul", ["x", "w_hidden"], ["h"], name="/layers.0/mlp/down_proj/MatMul"),
        helper.make_node("MatMul", ["h", "head"], ["logits"], name="/lm_head/MatMul"),
    ]
    inits = [numpy_helper.from_array(table, "head"), numpy_helper.from_array(hidden, "w_hidden")]
    graph = helper.make_graph(
        nodes,
        "tied",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, "seq"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, "seq", table.shape[1]])],
        inits,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def test_tied_embedding_reads_the_head_codes_and_top_logits_are_exact(tmp_path: Path) -> None:
    rng = np.random.default_rng(6)
    vocab = 4 * N
    table = np.concatenate([q8_0_weight(rng) for _ in range(vocab // N)], axis=1)  # [K, vocab] Q8_0
    hidden = np.concatenate([q4_1_weight(rng)] * (K // N), axis=1)  # [K, K] Q4_1
    fp32, out = tmp_path / "fp32.onnx", tmp_path / "grid.onnx"
    _tied_graph(fp32, table, hidden)
    counts = repack_grid(fp32, out, accuracy_level=4, levels={"down_proj": 0}, exact_top_k=4)
    assert counts == {"int4": 1, "int8": 1, "rerounded_int8": 0, "embedding_int8": 1, "exact_top_k": 4}
    model = onnx.load(str(out))
    ops = Counter(n.op_type for n in model.graph.node)
    assert ops["GatherBlockQuantized"] == 2 and ops["TopK"] == 1 and ops["ScatterElements"] == 1
    assert ops["Gather"] == 0 and "head" not in {i.name for i in model.graph.initializer}  # one copy of the table
    levels = {n.name: a.i for n in model.graph.node for a in n.attribute if a.name == "accuracy_level"}
    assert levels == {"/layers.0/mlp/down_proj/MatMul_Q4": 0, "/lm_head/MatMul_Q8": 4}
    ids = rng.integers(0, vocab, size=(1, 5)).astype(np.int64)
    sess = {p: ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]) for p in (fp32, out)}
    ref, got = (sess[p].run(None, {"input_ids": ids})[0] for p in (fp32, out))
    np.testing.assert_array_equal(got.argmax(-1), ref.argmax(-1))
    top = np.argsort(-got, axis=-1)[..., :4]
    np.testing.assert_allclose(np.take_along_axis(got, top, -1), np.take_along_axis(ref, top, -1), rtol=1e-5, atol=1e-5)


def test_fp32_head_is_a_gemm_over_the_shared_codes(tmp_path: Path) -> None:
    """quant.lm_head = 'fp32': the head is Gemm(x, E, transB=1) with E folded at load from the same 8-bit codes
    the embedding reads (one table in the file, no MatMulNBits or top-k fix-up for the head), logits = fp32."""
    rng = np.random.default_rng(7)
    vocab = 4 * N
    table = np.concatenate([q8_0_weight(rng) for _ in range(vocab // N)], axis=1)  # [K, vocab] Q8_0
    hidden = np.concatenate([q4_1_weight(rng)] * (K // N), axis=1)
    fp32, out = tmp_path / "fp32.onnx", tmp_path / "grid.onnx"
    _tied_graph(fp32, table, hidden)
    counts = repack_grid(fp32, out, accuracy_level=4, levels={"down_proj": 0}, exact_top_k=4, fp32_head=True)
    assert counts == {"int4": 1, "int8": 1, "rerounded_int8": 0, "embedding_int8": 1, "fp32_head": 1}
    model = onnx.load(str(out))
    ops = Counter(n.op_type for n in model.graph.node)
    assert ops["MatMulNBits"] == 1 and ops["Gemm"] == 1 and ops["TopK"] == 0 and ops["ScatterElements"] == 0
    assert ops["GatherBlockQuantized"] == 1  # the embedding
    nodes = {o: n for n in model.graph.node for o in n.output}
    gemm = next(n for n in model.graph.node if n.op_type == "Gemm")
    assert {a.name: a.i for a in gemm.attribute} == {"transB": 1}
    assert nodes["logits"].op_type == "Reshape" and nodes["logits"].input[0] == gemm.output[0]
    # E <- Reshape <- Mul <- Sub <- Cast <- the 8-bit codes, the very initializer the embedding gathers from
    chain, name = [], gemm.input[1]
    while name in nodes:
        chain.append(nodes[name].op_type)
        name = nodes[name].input[0]
    assert chain == ["Reshape", "Mul", "Sub", "Cast"]
    embedding = next(n for n in model.graph.node if n.op_type == "GatherBlockQuantized")
    assert name == embedding.input[0] == "head_grid_q8"
    inits = {i.name: tuple(i.dims) for i in model.graph.initializer}
    assert inits[name] == (vocab, K // 32, 32) and not any(d in ((K, vocab), (vocab, K)) for d in inits.values())
    ids = rng.integers(0, vocab, size=(1, 5)).astype(np.int64)
    sess = {p: ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]) for p in (fp32, out)}
    ref, got = (sess[p].run(None, {"input_ids": ids})[0] for p in (fp32, out))
    assert got.shape == ref.shape == (1, 5, vocab)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)  # every logit, not only the top ones


def test_off_grid_weight_is_refused(tmp_path: Path) -> None:
    fp32 = tmp_path / "fp32.onnx"
    _graph(fp32, [np.random.default_rng(5).normal(size=(K, N)).astype(np.float32)])
    with pytest.raises(ConversionError) as err:
        repack_grid(fp32, tmp_path / "out.onnx", accuracy_level=4)
    assert str(err.value) == (
        f"{fp32}: weight 'w0' of 'mm0' lies on no Q4_1, Q4_0 or Q8_0 block grid; expected weights "
        "dequantized from such a GGUF (use the 'rtn' INT4 method instead)"
    )
