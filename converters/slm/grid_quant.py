"""Lossless INT4/INT8 for weights that already sit on a GGUF block grid (Q4_1 / Q4_0 / Q8_0).

SmolLM2 arrives as Q4_1: in each block of 32 input features a weight is ``d * q + m`` with ``q`` in 0..15
and a per-block scale ``d`` and minimum ``m``. Rounding those values again onto a *different* 4-bit grid
(``MatMulNBitsQuantizer``'s round-to-nearest) compounds two quantizations: perplexity rose 36-48 % in our
measurements. onnxruntime's float zero points (HQQ) keep the grid but run on a slow fallback path
(2 tok/s against 18 tok/s here). So we write the original codes into a symmetric-format ``MatMulNBits``
(implied zero point 8, the fast kernels) and add the per-block offset back exactly:

    x @ W = MatMulNBits(x; q, d)  +  blocksum(x) @ C,     C[b, n] = m[b, n] + 8 * d[b, n]

where ``blocksum`` sums each block of 32 input features (Reshape + ReduceSum) and ``C`` is a small
``[K/32, N]`` float matrix. (MatMulNBits' integer zero points cannot carry Q4_1: ``-m/d`` is no integer.)
The Q8_0 LM head (tied embedding) becomes an 8-bit ``MatMulNBits`` with its own codes. The grid of every
weight is found from the fp32 values and checked to reproduce them; a weight off both grids raises
ConversionError.

Nothing is stored twice or wider than the GGUF has it: scales and minima are fp16 there, so they are
stored as fp16 + Cast (``C = m + 8d`` is a constant subgraph onnxruntime folds at load); a tied embedding
(``Gather`` along axis 1 of the LM head's weight) becomes ``GatherBlockQuantized`` over the head's 8-bit
codes. Optionally the head's ``top_k`` largest logits are recomputed exactly in fp32 (see ``_exact_head``).

Q4_0 (``w = d * (q - 8)``) is MatMulNBits' own symmetric format: codes and scales go in as they are.
Q4_K's 32-weight sub-blocks (``d * sc * q - dmin * m``) and Q5_0/Q5_1/Q5_K (q < 32) are offset grids whose
extreme codes need not occur: found from the smallest gap between a block's values, stored as 4-bit
(Q4_K) or 8-bit (5-bit codes) codes centred on the implied zero point, plus offsets as above. Q6_K (a
scale per 16 weights) and float weights lie on no block-32 grid: :func:`repack_grid` refuses them, or with
``reround=True`` (what ``convert_slm`` passes) re-rounds them to symmetric 8 bits and counts them.
"""

from __future__ import annotations

from collections.abc import Mapping
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
    """The Q4_1, Q4_0 or Q8_0 grid ``weight`` ``[K, N]`` lies on (blocks of 32 along K), or None."""
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
    grid = _symmetric_q4(blocks)
    if grid is not None:
        return grid
    grid = reround_int8(weight)
    if _check(blocks, _values(grid, blocks.shape), grid.scales.T):
        return grid
    return _gap_grid(blocks, low)


def reround_int8(weight: np.ndarray) -> GridWeight:
    """Symmetric 8-bit round-to-nearest per block of 32 (``d = amax / 127``): exact for Q8_0 weights, the
    closest MatMulNBits gets to anything else (Q6_K's 16-element sub-scales, float weights)."""
    k, n = weight.shape
    blocks = weight.reshape(k // GRID_BLOCK, GRID_BLOCK, n).astype(np.float32)
    d8 = np.abs(blocks).max(axis=1) / 127.0
    safe8 = np.where(d8 == 0, 1.0, d8)
    q8 = np.clip(np.rint(blocks / safe8[:, None]), -127, 127)
    return GridWeight(8, _codes(q8 + 128, n, k), d8.T.astype(np.float32), None)


def _values(grid: GridWeight, shape: tuple[int, ...]) -> np.ndarray:
    """The ``[K/32, 32, N]`` weight values a zero-offset grid encodes."""
    codes = grid.codes.T.reshape(shape).astype(np.float32)
    return grid.scales.T[:, None, :] * (codes - 2 ** (grid.bits - 1))


def _gap_grid(blocks: np.ndarray, low: np.ndarray) -> GridWeight | None:
    """An offset grid ``w = d * q + low`` found from the smallest gap between a block's distinct values
    (no code need be 0 or the largest): Q4_K's 32-element sub-blocks (``d * sc * q - dmin * m``, q < 16)
    as 4-bit codes, Q5_K / Q5_0 / Q5_1 (q < 32) as 8-bit codes. None when the values are not all on it."""
    nb, _, n = blocks.shape
    ordered = np.sort(blocks, axis=1)
    gaps = np.diff(ordered, axis=1)
    gaps = np.where(gaps > 0, gaps, np.inf).min(axis=1)
    d = np.where(np.isinf(gaps), 1.0, gaps).astype(np.float32)
    q = np.rint((blocks - low[:, None]) / d[:, None])
    top = int(q.max()) if q.size else 0
    if top > 255 or not _check(blocks, d[:, None] * q + low[:, None], d):
        return None
    bits = 4 if top <= 15 else 8
    # codes centred on the implied zero point, so the offset term adds back little (fp32 cancellation)
    shift = 2 ** (bits - 1) - (top + 1) // 2
    offsets = low + float((top + 1) // 2) * d
    return GridWeight(bits, _codes(q + shift, n, nb * GRID_BLOCK), d.T.astype(np.float32), offsets.astype(np.float32))


def _symmetric_q4(blocks: np.ndarray) -> GridWeight | None:
    """Q4_0: ``w = d * (q - 8)``, q in 0..15, the block's largest-magnitude value coded as q = 0 (llama.cpp
    sets ``d = max / -8``), so ``d`` is that value over -8 (negative when it is positive). This is exactly
    MatMulNBits' symmetric 4-bit format (implied zero point 8): no offsets."""
    nb, _, n = blocks.shape
    pick = np.abs(blocks).argmax(axis=1)  # [K/32, N]
    extreme = np.take_along_axis(blocks, pick[:, None], axis=1)[:, 0]
    d = extreme / -8.0
    safe = np.where(d == 0, 1.0, d)
    q = np.clip(np.rint(blocks / safe[:, None]) + 8, 0, 15)
    if not _check(blocks, d[:, None] * (q - 8), d):
        return None
    return GridWeight(4, _codes(q, n, nb * GRID_BLOCK), d.T.astype(np.float32), None)


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


def _half_if_exact(values: np.ndarray) -> np.ndarray:
    """``values`` as float16 when that loses nothing (GGUF block scales and minima are fp16), else float32."""
    half = values.astype(np.float16)
    return half if np.array_equal(half.astype(np.float32), values) else values.astype(np.float32)


class _Writer:
    """New nodes and initializers for one graph; constant subgraphs are folded by onnxruntime at load."""

    def __init__(self, onnx) -> None:
        self.onnx, self.helper = onnx, onnx.helper
        self.nodes: list = []
        self.inits: list = []

    def init(self, name: str, array: np.ndarray) -> str:
        self.inits.append(self.onnx.numpy_helper.from_array(array, name))
        return name

    def node(self, op: str, inputs: list[str], output: str, **attrs) -> str:
        self.nodes.append(self.helper.make_node(op, inputs, [output], name=output, **attrs))
        return output

    def float32(self, name: str, values: np.ndarray) -> str:
        """An fp32 tensor stored as fp16 + Cast when exact (half the bytes in the file, same numbers)."""
        stored = _half_if_exact(values)
        if stored.dtype == np.float32:
            return self.init(name, stored)
        return self.node("Cast", [self.init(f"{name}_fp16", stored)], name, to=self.onnx.TensorProto.FLOAT)

    def shape(self, name: str, dims: list[int]) -> str:
        return self.init(name, np.array(dims, np.int64))


def _replace(w: _Writer, node, grid: GridWeight, accuracy_level: int) -> str:
    """Write the nodes that replace one weight MatMul; returns the name of its fp32 scales ``[N * K/32]``."""
    name = node.name or node.output[0]
    n, k = grid.codes.shape
    weight = node.input[1]
    b_name = w.init(f"{weight}_grid_q{grid.bits}", pack(grid))
    s_name = w.float32(f"{weight}_grid_scales", grid.scales.reshape(-1))
    main_out = node.output[0] if grid.offsets is None else f"{name}_grid_main"
    w.nodes.append(
        w.helper.make_node(
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
    )
    if grid.offsets is None:
        return s_name
    # C = m + zp d (zp = 8, or 128 for 8-bit codes): stored as the fp16 minimum m; zp d comes from the scales
    zero = float(2 ** (grid.bits - 1))
    low = grid.offsets - zero * grid.scales.T
    if np.array_equal(low + zero * grid.scales.T, grid.offsets) and _half_if_exact(low).dtype == np.float16:
        d_t = w.node(
            "Transpose",
            [w.node("Reshape", [s_name, w.shape(f"{name}_grid_nk", [n, -1])], f"{name}_grid_d")],
            f"{name}_grid_dT",
            perm=[1, 0],
        )
        eight = w.node("Mul", [d_t, w.init(f"{name}_grid_eight", np.array(zero, np.float32))], f"{name}_grid_8d")
        c_name = w.node("Add", [w.float32(f"{weight}_grid_min", low), eight], f"{weight}_grid_offsets")
    else:
        c_name = w.init(f"{weight}_grid_offsets", grid.offsets)
    blocks = w.node(
        "Reshape",
        [node.input[0], w.shape(f"{name}_grid_blockshape", [0, 0, k // GRID_BLOCK, GRID_BLOCK])],
        f"{name}_grid_blocks",
    )
    sums = w.node(
        "ReduceSum", [blocks, w.init(f"{name}_grid_axes", np.array([-1], np.int64))], f"{name}_grid_sums", keepdims=0
    )
    offset = w.node("MatMul", [sums, c_name], f"{name}_grid_offset")
    w.nodes.append(w.helper.make_node("Add", [main_out, offset], [node.output[0]], name=f"{name}_grid_add"))
    return s_name


@dataclass(frozen=True)
class _Table:
    """An 8-bit ``MatMulNBits`` weight as a table of rows: codes ``[N, K/32, 32]`` (zero point 128), scales."""

    codes: str
    scales: str
    n: int
    k: int


def _scales3(w: _Writer, table: _Table) -> str:
    """The table's scales as ``[N, K/32, 1]`` (GatherBlockQuantized's layout), made once."""
    name = f"{table.codes}_scales3"
    if not any(name in n.output for n in w.nodes):
        w.node("Reshape", [table.scales, w.shape(f"{name}_shape", [table.n, table.k // GRID_BLOCK, 1])], name)
    return name


def _rows(w: _Writer, table: _Table, index: tuple[str, int], out: str) -> str:
    """``GatherBlockQuantized``: rows ``index`` (name, rank) of the 8-bit ``[N, K]`` table, dequantized
    exactly -> ``out`` of shape ``ids.shape + [K]``."""
    ids, rank = index
    blocks = f"{out}_blocks"
    w.nodes.append(
        w.helper.make_node(
            "GatherBlockQuantized",
            [table.codes, ids, _scales3(w, table)],
            [blocks],
            name=blocks,
            domain="com.microsoft",
            bits=8,
            block_size=GRID_BLOCK,
            gather_axis=0,
            quantize_axis=2,
        )
    )
    return w.node("Reshape", [blocks, w.shape(f"{out}_shape", [0] * rank + [table.k])], out)


def _exact_head(w: _Writer, head, table: _Table, top_k: int) -> None:
    """Recompute the ``top_k`` largest logits in fp32 from the exactly dequantized rows of the 8-bit head.

    ``MatMulNBits`` at accuracy level 4 rounds the hidden state to int8 per block of 32, which moves logits
    by ~0.1: enough to flip a near tie of the greedy choice. The candidates' exact logits are a
    ``[top_k, hidden]`` gather and a small MatMul per position; the other logits keep the fast values.
    """
    hidden = head.input[0]
    head.output[0] = "logits_int8"
    k_name = w.init("logits_top_k", np.array([top_k], np.int64))
    top = w.helper.make_node(
        "TopK", ["logits_int8", k_name], ["logits_top_values", "logits_top_ids"], name="logits_top"
    )
    w.nodes.append(top)
    rows = _rows(w, table, ("logits_top_ids", 3), "logits_top_rows")  # [B, S, k, H]
    column = w.node("Unsqueeze", [hidden, w.init("logits_axis", np.array([-1], np.int64))], "logits_hidden_column")
    exact = w.node("MatMul", [rows, column], "logits_top_exact4")  # [B, S, k, 1]
    exact = w.node("Squeeze", [exact, "logits_axis"], "logits_top_exact")
    w.nodes.append(
        w.helper.make_node(
            "ScatterElements", ["logits_int8", "logits_top_ids", exact], ["logits"], name="logits", axis=-1
        )
    )


def _fp32_head(w: _Writer, head, table: _Table, nodes) -> None:
    """Replace the 8-bit ``MatMulNBits`` head (in ``nodes``) by ``Gemm(x, E, transB=1)`` over the fp32 table
    ``E = (codes - 128) * scales`` ``[N, K]``, a constant subgraph of the same 8-bit codes that onnxruntime
    folds at load: the file is unchanged, the logits exact (no top-k fix-up needed).

    onnxruntime 1.32 has no fast 8-bit ``MatMulNBits`` kernel without a dot product: on a Cortex-A72 it
    dequantizes the whole table every call (458.7 M instructions a token) where the fp32 Gemm costs 12.3 M
    (``benchmarks/slm_arm_head.py``). The price is memory: the fp32 table, prepacked (113 MB; the 8-bit
    codes stay for the embedding), and a transient peak while folding at load.
    """
    onnx = w.onnx
    hidden, logits = head.input[0], head.output[0]
    nodes.remove(head)
    codes = w.node("Cast", [table.codes], "lm_head_fp32_codes", to=onnx.TensorProto.FLOAT)
    zero = w.init("lm_head_fp32_zero", np.array(float(2 ** (8 - 1)), np.float32))
    centred = w.node("Sub", [codes, zero], "lm_head_fp32_centred")
    blocks = w.node("Mul", [centred, _scales3(w, table)], "lm_head_fp32_blocks")  # [N, K/32, 32]
    e_name = w.node("Reshape", [blocks, w.shape("lm_head_fp32_nk", [table.n, table.k])], "lm_head_fp32_table")
    rows = w.node("Reshape", [hidden, w.shape("lm_head_fp32_rows_shape", [-1, table.k])], "lm_head_fp32_rows")
    flat = w.node("Gemm", [rows, e_name], "lm_head_fp32_logits", transB=1)  # [B * S, N]
    lead = w.node("Shape", [hidden], "lm_head_fp32_lead", end=-1)  # [B, S]
    shape = w.node("Concat", [lead, w.shape("lm_head_fp32_vocab", [table.n])], "lm_head_fp32_logits_shape", axis=0)
    w.nodes.append(w.helper.make_node("Reshape", [flat, shape], [logits], name="/lm_head/Gemm_fp32"))


def _head_table(nodes, initializers: dict) -> tuple[object, _Table] | None:
    """The 8-bit, zero-point-free ``MatMulNBits`` writing ``logits`` and its table, or None."""
    for node in nodes:
        attrs = {a.name: a.i for a in node.attribute}
        if node.op_type != "MatMulNBits" or list(node.output) != ["logits"] or attrs.get("bits") != 8:
            continue
        if len(node.input) > 3 and node.input[3]:
            return None  # explicit zero points: GatherBlockQuantized would need them too
        codes = initializers.get(node.input[1])
        if (
            codes is None
            or len(codes.dims) != 3
            or codes.dims[2] != GRID_BLOCK
            or attrs.get("block_size") != GRID_BLOCK
        ):
            return None
        return node, _Table(node.input[1], node.input[2], attrs["N"], attrs["K"])
    return None


def _tied_embedding(w: _Writer, graph, weight: str, table: _Table) -> bool:
    """Replace ``Transpose(Gather(weight, ids, axis=1))`` (the tied embedding reading the LM head's
    ``[hidden, vocab]`` weight) by ``GatherBlockQuantized`` over the LM head's own 8-bit codes: one copy
    of the table in the file. Returns whether the pattern was found."""
    consumers = {name: n for n in graph.node for name in n.input}
    gathers = [
        n
        for n in graph.node
        if n.op_type == "Gather" and n.input[0] == weight and any(a.name == "axis" and a.i == 1 for a in n.attribute)
    ]
    if len(gathers) != 1:
        return False
    gather = gathers[0]
    transpose = consumers.get(gather.output[0])
    perm = [list(a.ints) for a in transpose.attribute if a.name == "perm"] if transpose is not None else []
    if transpose is None or transpose.op_type != "Transpose" or perm != [[1, 2, 0]]:
        return False
    _rows(w, table, (gather.input[1], 2), transpose.output[0])
    graph.node.remove(gather)
    graph.node.remove(transpose)
    return True


def repack_grid(
    fp32_path: Path,
    out_path: Path,
    accuracy_level: int,
    levels: Mapping[str, int] | None = None,
    exact_top_k: int = 0,
    reround: bool = False,
    fp32_head: bool = False,
) -> dict[str, int]:
    """Rewrite every weight MatMul of a (rank-3 activation) decoder as exact block-grid MatMulNBits.

    Args:
        fp32_path: the exported fp32 model (weights dequantized from the GGUF).
        out_path: where to write the model.
        accuracy_level: MatMulNBits accuracy level (profile ``quant.int4_accuracy_level``).
        levels: other accuracy levels by projection (``{"qkv_proj": 0}``: MatMuls whose node name
            has ``/qkv_proj``); the rest use ``accuracy_level``.
        exact_top_k: recompute this many largest logits of the 8-bit LM head in fp32 (0: off).
        reround: a weight on no grid (Q6_K, float) is re-rounded to symmetric 8 bits (:func:`reround_int8`)
            instead of refused; the gates judge it.
        fp32_head: compute the 8-bit LM head as an fp32 ``Gemm`` over its codes dequantized at load
            (:func:`_fp32_head`; profile ``quant.lm_head = 'fp32'``) instead of ``MatMulNBits``;
            ``exact_top_k`` is then moot (the logits are exact).

    Returns:
        How many weights went to 4 and to 8 bits (re-rounded ones included), how many were re-rounded, and
        whether the tied embedding now reads the 8-bit codes, and with a head changed, ``exact_top_k`` or
        ``fp32_head`` (1):
        ``{"int4": .., "int8": .., "rerounded_int8": .., "embedding_int8": 0 or 1}``.

    Raises:
        ConversionError: a weight lies on no grid and ``reround`` is off.
    """
    onnx = require("onnx", "convert", "rewriting the ONNX graph")
    from onnx import helper, numpy_helper

    model = onnx.load(str(fp32_path))
    graph = model.graph
    inits = {init.name: init for init in graph.initializer}
    w = _Writer(onnx)
    kept, grids, counts = [], {}, {"int4": 0, "int8": 0, "rerounded_int8": 0, "embedding_int8": 0}
    for node in graph.node:
        weight = inits.get(node.input[1]) if node.op_type == "MatMul" else None
        if weight is None or len(weight.dims) != 2:
            kept.append(node)
            continue
        grid, rerounded = _grid_or_reround(numpy_helper.to_array(weight), reround)
        if grid is None:
            raise ConversionError(
                f"{fp32_path}: weight {weight.name!r} of {node.name!r} lies on no Q4_1, Q4_0 or Q8_0 "
                "block grid; expected weights dequantized from such a GGUF (use the 'rtn' INT4 method instead)"
            )
        counts["rerounded_int8"] += rerounded
        level = next((v for k, v in (levels or {}).items() if f"/{k}" in node.name), accuracy_level)
        grids[weight.name] = (grid, _replace(w, node, grid, level))
        counts["int4" if grid.bits == 4 else "int8"] += 1
    del graph.node[:]
    graph.node.extend(kept)
    for name, (grid, scales) in grids.items():
        if grid.bits == 8 and grid.offsets is None:
            n, k = grid.codes.shape
            counts["embedding_int8"] += _tied_embedding(w, graph, name, _Table(f"{name}_grid_q8", scales, n, k))
    head = _head_table(w.nodes, {i.name: i for i in w.inits})
    if head is not None and fp32_head:
        _fp32_head(w, *head, w.nodes)
        counts["fp32_head"] = 1
    elif head is not None and exact_top_k > 0:
        _exact_head(w, *head, exact_top_k)
        counts["exact_top_k"] = exact_top_k
    graph.node.extend(w.nodes)
    graph.initializer.extend(w.inits)
    # a tied weight can still feed a Gather (an untied embedding); keep whatever a node still reads
    still_read = {name for n in graph.node for name in n.input}
    keep = [i for i in graph.initializer if i.name not in grids or i.name in still_read]
    del graph.initializer[:]
    graph.initializer.extend(keep)
    _sort_topologically(graph)
    if not any(op.domain == "com.microsoft" for op in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    Path(out_path).parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(out_path))
    return counts


def _grid_or_reround(weight: np.ndarray, reround: bool) -> tuple[GridWeight | None, bool]:
    grid = find_grid(weight)
    if grid is not None or not reround or weight.shape[0] % GRID_BLOCK:
        return grid, False
    return reround_int8(weight), True


def refine_nbits(
    path: Path, levels: Mapping[str, int] | None = None, exact_top_k: int = 0, fp32_head: bool = False
) -> dict[str, int]:
    """Apply per-projection accuracy levels and the exact top-k (or fp32, :func:`_fp32_head`) head to a
    ``MatMulNBits`` graph in place (the INT8 weight-only route: onnxruntime's quantizer wrote it).

    Returns:
        ``{"fp32_projections": how many nodes got another level, "exact_top_k": k or 0, "fp32_head": 0 or 1}``.
    """
    onnx = require("onnx", "convert", "rewriting the ONNX graph")
    model = onnx.load(str(path))
    graph = model.graph
    changed = 0
    for node in graph.node:
        level = next((v for key, v in (levels or {}).items() if f"/{key}" in node.name), None)
        if node.op_type == "MatMulNBits" and level is not None:
            for attr in node.attribute:
                if attr.name == "accuracy_level" and attr.i != level:
                    attr.i, changed = level, changed + 1
    w = _Writer(onnx)
    head = _head_table(graph.node, {i.name: i for i in graph.initializer})
    if head is not None and fp32_head:
        _fp32_head(w, *head, graph.node)
    elif head is not None and exact_top_k > 0:
        _exact_head(w, *head, exact_top_k)
    if w.nodes:
        graph.node.extend(w.nodes)
        graph.initializer.extend(w.inits)
        _sort_topologically(graph)
    onnx.save(model, str(path))
    fp32 = int(head is not None and fp32_head)
    return {
        "fp32_projections": changed,
        "exact_top_k": exact_top_k if head is not None and not fp32 else 0,
        "fp32_head": fp32,
    }


def _sort_topologically(graph) -> None:
    """Order nodes so each comes after the producers of its inputs (ONNX requires it)."""
    produced_by = {out: n for n in graph.node for out in n.output if out}
    done, order = set(), []

    def visit(node) -> None:
        stack = [(node, False)]
        while stack:
            current, expanded = stack.pop()
            if id(current) in done:
                continue
            if expanded:
                done.add(id(current))
                order.append(current)
                continue
            stack.append((current, True))
            for name in current.input:
                producer = produced_by.get(name)
                if producer is not None and id(producer) not in done:
                    stack.append((producer, False))

    for node in list(graph.node):
        visit(node)
    nodes = [type(n)() for n in order]
    for new, old in zip(nodes, order, strict=True):
        new.CopyFrom(old)
    del graph.node[:]
    graph.node.extend(nodes)
