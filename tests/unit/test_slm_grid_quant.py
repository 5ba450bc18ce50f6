"""Lossless GGUF-grid MatMulNBits: grid detection, packing, and a tiny graph run in onnxruntime."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from converters.slm.grid_quant import find_grid, pack, repack_grid  # noqa: E402
from edge.errors import ConversionError  # noqa: E402

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
    assert counts == {"int4": 1, "int8": 1}
    ops = Counter(n.op_type for n in onnx.load(str(out)).graph.node)
    assert ops == {"MatMulNBits": 2, "Reshape": 1, "ReduceSum": 1, "MatMul": 1, "Add": 1}
    x = rng.normal(size=(1, 3, K)).astype(np.float32)
    np.testing.assert_allclose(_run(out, x), _run(fp32, x), rtol=1e-4, atol=1e-4)


def test_off_grid_weight_is_refused(tmp_path: Path) -> None:
    fp32 = tmp_path / "fp32.onnx"
    _graph(fp32, [np.random.default_rng(5).normal(size=(K, N)).astype(np.float32)])
    with pytest.raises(ConversionError) as err:
        repack_grid(fp32, tmp_path / "out.onnx", accuracy_level=4)
    assert str(err.value) == (
        f"{fp32}: weight 'w0' of 'mm0' lies on neither a Q4_1 nor a Q8_0 block grid; expected weights "
        "dequantized from a GGUF (use the 'rtn' INT4 method instead)"
    )
