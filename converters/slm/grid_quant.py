"""Lossless INT4/INT8 for weights that already sit on a GGUF block grid (Q4_1 / Q8_0).

SmolLM2 arrives as Q4_1: in each block of 32 input features a weight is ``d * q + m`` with ``q`` in 0..15
and a per-block scale ``d`` and minimum ``m``. Rounding those values again onto a *different* 4-bit grid
(``MatMulNBitsQuantizer``'s round-to-nearest) compounds two quantizations: perplexity rose 36-48 % in our
measurements. onnxruntime's float zero points (HQQ) keep the grid but run on a slow fallback path
(2 tok/s against 18 tok/s here). So we write the original codes into a symmetric-format ``MatMulNBits``
(implied zero point 8, the fast kernels) and add the per-block offset back exactly:

    x @ W = MatMulNBits(x; q, d)  +  blocksum(x) @ C,     C[b, n] = m[b, n] + 8 * d[b, n]

where ``blocksum`` sums each block of 32 input features (Reshape + ReduceSum) and ``C`` is a small
``[K/32, N]`` float matrix. The Q8_0 LM head (tied embedding) becomes an 8-bit ``MatMulNBits`` with its
own codes. The grid of every weight is found from the fp32 values and checked to reproduce them; a weight
off both grids raises ConversionError.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edge.errors import ConversionError, require

GRID_BLOCK = 32
_REL_TOL = 1e-4


@dataclass(frozen=True)
class GridWeight:
    """A weight ``[K, N]`` as block codes: ``w = scale * (code - zero) + offset`` per block of K."""

    bits: int
    codes: np.ndarray  # uint8 [N, K]
    scales: np.ndarray  # float32 [N, K // 32]
    offsets: np.ndarray | None  # float32 [K // 32, N], None when the grid has no offset


def _check(weight_blocks: np.ndarray, recon: np.ndarray, scale: np.ndarray) -> bool:
    err = np.abs(recon - weight_blocks).max(axis=1)
    return bool(np.all(err <= _REL_TOL * np.abs(scale) + 1e-7))


def find_grid(weight: np.ndarray) -> GridWeight | None:
    """The Q4_1 or Q8_0 grid ``weight`` ``[K, N]`` lies on (blocks of 32 along K), or None."""
    k, n = weight.shape
    if k % GRID_BLOCK:
        return None
    blocks = weight.reshape(k // GRID_BLOCK, GRID_BLOCK, n).astype(np.float32)
    low, high = blocks.min(axis=1), blocks.max(axis=1)
    d = (high - low) / 15.0
    safe = np.where(d == 0, 1.0, d)
    q = np.clip(np.rint((blocks - low[:, None]) / safe[:, None]), 0, 15)
    if _check(blocks, d[:, None] * q + low[:, None], d):
        offsets = low + 8.0 * d
        return GridWeight(4, _codes(q, n, k), d.T.astype(np.float32), offsets.astype(np.float32))
    amax = np.abs(blocks).max(axis=1)
    d8 = amax / 127.0
    safe8 = np.where(d8 == 0, 1.0, d8)
    q8 = np.clip(np.rint(blocks / safe8[:, None]), -127, 127)
    if _check(blocks, d8[:, None] * q8, d8):
        return GridWeight(8, _codes(q8 + 128, n, k), d8.T.astype(np.float32), None)
    return None


def _codes(q: np.ndarray, n: int, k: int) -> np.ndarray:
    """[K/32, 32, N] block codes -> uint8 [N, K]."""
    return q.transpose(2, 0, 1).reshape(n, k).astype(np.uint8)


def pack(grid: GridWeight) -> np.ndarray:
    """MatMulNBits' ``B`` layout: uint8 ``[N, K/32, 32 * bits / 8]``, low nibble first for 4 bits."""
    n, k = grid.codes.shape
    codes = grid.codes.reshape(n, k // GRID_BLOCK, GRID_BLOCK)
    if grid.bits == 8:
        return np.ascontiguousarray(codes)
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)


def _replace(graph, node, grid: GridWeight, accuracy_level: int, onnx, helper) -> list:
    """The nodes and initializers that replace one weight MatMul."""
    name = node.name or node.output[0]
    n, k = grid.codes.shape
    b_name, s_name = f"{node.input[1]}_grid_q{grid.bits}", f"{node.input[1]}_grid_scales"
    inits = [
        onnx.numpy_helper.from_array(pack(grid), b_name),
        onnx.numpy_helper.from_array(grid.scales.reshape(-1), s_name),
    ]
    main_out = node.output[0] if grid.offsets is None else f"{name}_grid_main"
    nodes = [
        helper.make_node(
            "MatMulNBits",
            [node.input[0], b_name, s_name],
            [main_out],
            name=f"{name}_Q{grid.bits}",
            domain="com.microsoft",
            K=k,
            N=n,
            bits=grid.bits,
            block_size=GRID_BLOCK,
            accuracy_level=accuracy_level,
        )
    ]
    if grid.offsets is not None:
        c_name, shape_name = f"{node.input[1]}_grid_offsets", f"{name}_grid_blockshape"
        axes_name = f"{name}_grid_axes"
        inits += [
            onnx.numpy_helper.from_array(grid.offsets, c_name),
            onnx.numpy_helper.from_array(np.array([0, 0, k // GRID_BLOCK, GRID_BLOCK], np.int64), shape_name),
            onnx.numpy_helper.from_array(np.array([-1], np.int64), axes_name),
        ]
        nodes += [
            helper.make_node("Reshape", [node.input[0], shape_name], [f"{name}_grid_blocks"]),
            helper.make_node("ReduceSum", [f"{name}_grid_blocks", axes_name], [f"{name}_grid_sums"], keepdims=0),
            helper.make_node("MatMul", [f"{name}_grid_sums", c_name], [f"{name}_grid_offset"]),
            helper.make_node("Add", [main_out, f"{name}_grid_offset"], [node.output[0]]),
        ]
    return [nodes, inits]


def repack_grid(fp32_path: Path, out_path: Path, accuracy_level: int) -> dict[str, int]:
    """Rewrite every weight MatMul of a (rank-3 activation) decoder as exact block-grid MatMulNBits.

    Args:
        fp32_path: the exported fp32 model (weights dequantized from the GGUF).
        out_path: where to write the model.
        accuracy_level: MatMulNBits accuracy level (profile ``quant.int4_accuracy_level``).

    Returns:
        How many weights went to 4 and to 8 bits: ``{"int4": .., "int8": ..}``.

    Raises:
        ConversionError: a weight lies on neither grid.
    """
    onnx = require("onnx", "convert", "rewriting the ONNX graph")
    from onnx import helper, numpy_helper

    model = onnx.load(str(fp32_path))
    graph = model.graph
    inits = {init.name: init for init in graph.initializer}
    new_nodes, counts, used = [], {"int4": 0, "int8": 0}, set()
    for node in graph.node:
        weight = inits.get(node.input[1]) if node.op_type == "MatMul" else None
        if weight is None or len(weight.dims) != 2:
            new_nodes.append(node)
            continue
        grid = find_grid(numpy_helper.to_array(weight))
        if grid is None:
            raise ConversionError(
                f"{fp32_path}: weight {weight.name!r} of {node.name!r} lies on neither a Q4_1 nor a Q8_0 "
                "block grid; expected weights dequantized from a GGUF (use the 'rtn' INT4 method instead)"
            )
        nodes, extra = _replace(graph, node, grid, accuracy_level, onnx, helper)
        new_nodes += nodes
        graph.initializer.extend(extra)
        used.add(weight.name)
        counts["int4" if grid.bits == 4 else "int8"] += 1
    del graph.node[:]
    graph.node.extend(new_nodes)
    # a tied weight can feed a Gather too (the embedding); keep whatever a node still reads
    still_read = {name for n in graph.node for name in n.input}
    keep = [i for i in graph.initializer if i.name not in used or i.name in still_read]
    del graph.initializer[:]
    graph.initializer.extend(keep)
    if not any(op.domain == "com.microsoft" for op in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    Path(out_path).parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(out_path))
    return counts
