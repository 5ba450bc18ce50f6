"""TFLite -> ONNX for small float CNNs (MediaPipe's BlazeFace): a translator of the few ops they use.

Why not tf2onnx: its ``--tflite`` path imports TensorFlow (a side venv of ~2 GB with its own numpy/onnx
pins, as onnx2tf needs) and has no DENSIFY kernel, which the full-range BlazeFace's sparse weights need.
Translating the ~12 op types these nets use into ``onnx.helper`` nodes is short, and every model is then
checked against LiteRT on real photos (``converters.face.blazeface.export_blazeface_onnx``).

How: the graph is read from the flatbuffer with the ``tflite`` package (ops, tensor shapes, options). The
values of every tensor that does not depend on the input (weights, including the float16 -> float32
``DEQUANTIZE`` and sparse -> dense ``DENSIFY`` results) are taken from LiteRT itself: the model is run once
with builtin kernels and every tensor kept, so no sparse format is decoded here. Those ops fold away.
Activations run in NCHW (ONNX's convolution layout): the NHWC input is transposed once, 4-D tensors are
transposed back only where an op depends on the layout (RESHAPE).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from edge.errors import ConversionError, MissingDependencyError

OPSET = 17
_NHWC_TO_NCHW = (0, 3, 1, 2)
_NCHW_TO_NHWC = (0, 2, 3, 1)
#: Ops whose output is computed from constants only; their results are read from LiteRT and folded.
_FOLDABLE = frozenset({"DEQUANTIZE", "DENSIFY"})


def _import_tflite():
    try:
        import tflite
    except ImportError as exc:
        raise MissingDependencyError(
            "reading a .tflite graph needs the 'tflite' package: pip install 'edge-deploy[convert]'"
        ) from exc
    return tflite


@dataclass
class _Graph:
    """The ONNX graph being built, and what is known about each TFLite tensor."""

    sub: Any  # tflite.SubGraph (the tflite package is imported lazily)
    values: dict[int, np.ndarray]  # constant tensors (weights), by TFLite tensor index
    nodes: list = field(default_factory=list)
    initializers: list = field(default_factory=list)
    nchw: set[int] = field(default_factory=set)  # activations held in NCHW
    _count: int = 0

    def name(self, index: int) -> str:
        return f"t{index}"

    def shape(self, index: int) -> tuple[int, ...]:
        return tuple(int(d) for d in self.sub.Tensors(index).ShapeAsNumpy())

    def fresh(self, stem: str) -> str:
        self._count += 1
        return f"{stem}_{self._count}"

    def const(self, stem: str, array: np.ndarray | np.generic) -> str:
        from onnx import numpy_helper

        name = self.fresh(stem)
        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def node(self, op: str, inputs: list[str], output: str, **attrs) -> str:
        from onnx import helper

        self.nodes.append(helper.make_node(op, inputs, [output], name=self.fresh(op.lower()), **attrs))
        return output


def _options(tflite, op, cls_name: str):
    table = op.BuiltinOptions()
    options = getattr(tflite, cls_name)()
    options.Init(table.Bytes, table.Pos)
    return options


def _same_pads(in_hw: tuple[int, ...], kernel: tuple[int, ...], stride: tuple[int, int], dilation=(1, 1)) -> list:
    """TensorFlow's SAME padding as ONNX pads [top, left, bottom, right] (the extra pixel at the end)."""
    begin, end = [], []
    for size, k, s, d in zip(in_hw, kernel, stride, dilation, strict=True):
        out = -(-size // s)
        total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
        begin.append(total // 2)
        end.append(total - total // 2)
    return begin + end


def _activation(g: _Graph, tflite, fused: int, value: str, output: str) -> str:
    kinds = tflite.ActivationFunctionType
    if fused == kinds.NONE:
        return g.node("Identity", [value], output)
    if fused == kinds.RELU:
        return g.node("Relu", [value], output)
    if fused == kinds.RELU6:
        return g.node("Clip", [value, g.const("zero", np.float32(0)), g.const("six", np.float32(6))], output)
    raise ConversionError(f"fused activation {fused} is not supported; expected NONE, RELU or RELU6")


def _conv(g: _Graph, tflite, op, depthwise: bool) -> None:
    x, w, b = (op.Inputs(i) for i in range(3))
    out = op.Outputs(0)
    opts = _options(tflite, op, "DepthwiseConv2DOptions" if depthwise else "Conv2DOptions")
    weights = g.values[w]
    if depthwise:  # [1, kh, kw, C * m] -> [C * m, 1, kh, kw], one group per input channel
        kernel = np.transpose(weights, (3, 0, 1, 2))
        group = g.shape(x)[3]
    else:  # [O, kh, kw, I] -> [O, I, kh, kw]
        kernel = np.transpose(weights, _NHWC_TO_NCHW)
        group = 1
    stride = (opts.StrideH(), opts.StrideW())
    dilation = (opts.DilationHFactor(), opts.DilationWFactor())
    k_hw = kernel.shape[2:]
    if opts.Padding() == tflite.Padding.SAME:
        pads = _same_pads(g.shape(x)[1:3], k_hw, stride, dilation)
    else:
        pads = [0, 0, 0, 0]
    inputs = [g.name(x), g.const("w", kernel.astype(np.float32))]
    if b >= 0:
        inputs.append(g.const("b", g.values[b].astype(np.float32)))
    conv = g.node(
        "Conv", inputs, g.fresh("conv"), strides=list(stride), dilations=list(dilation), pads=pads, group=group
    )
    _activation(g, tflite, opts.FusedActivationFunction(), conv, g.name(out))
    g.nchw.add(out)


def _operand(g: _Graph, index: int, rank4_nchw: bool) -> str:
    """An input of an elementwise op: an activation as is, a constant laid out for NCHW."""
    if index not in g.values:
        return g.name(index)
    value = g.values[index].astype(np.float32)
    if rank4_nchw and value.ndim == 4:
        value = np.transpose(value, _NHWC_TO_NCHW)
    elif rank4_nchw and value.ndim == 1 and value.size > 1:
        value = value.reshape(1, -1, 1, 1)
    return g.const("c", value)


def _add(g: _Graph, tflite, op) -> None:
    a, b, out = op.Inputs(0), op.Inputs(1), op.Outputs(0)
    opts = _options(tflite, op, "AddOptions")
    four = len(g.shape(out)) == 4
    added = g.node("Add", [_operand(g, a, four), _operand(g, b, four)], g.fresh("add"))
    _activation(g, tflite, opts.FusedActivationFunction(), added, g.name(out))
    if four:
        g.nchw.add(out)


def _relu(g: _Graph, tflite, op) -> None:
    g.node("Relu", [g.name(op.Inputs(0))], g.name(op.Outputs(0)))
    if op.Inputs(0) in g.nchw:
        g.nchw.add(op.Outputs(0))


def _pad(g: _Graph, tflite, op) -> None:
    x, pads, out = op.Inputs(0), op.Inputs(1), op.Outputs(0)
    p = g.values[pads].astype(np.int64)  # [4, 2] in NHWC
    order = _NHWC_TO_NCHW if x in g.nchw else range(len(p))
    onnx_pads = [int(p[i, 0]) for i in order] + [int(p[i, 1]) for i in order]
    g.node("Pad", [g.name(x), g.const("pads", np.asarray(onnx_pads, np.int64))], g.name(out), mode="constant")
    if x in g.nchw:
        g.nchw.add(out)


def _max_pool(g: _Graph, tflite, op) -> None:
    x, out = op.Inputs(0), op.Outputs(0)
    opts = _options(tflite, op, "Pool2DOptions")
    kernel = (opts.FilterHeight(), opts.FilterWidth())
    stride = (opts.StrideH(), opts.StrideW())
    pads = _same_pads(g.shape(x)[1:3], kernel, stride) if opts.Padding() == tflite.Padding.SAME else [0, 0, 0, 0]
    pooled = g.node("MaxPool", [g.name(x)], g.fresh("pool"), kernel_shape=list(kernel), strides=list(stride), pads=pads)
    _activation(g, tflite, opts.FusedActivationFunction(), pooled, g.name(out))
    g.nchw.add(out)


def _resize_bilinear(g: _Graph, tflite, op) -> None:
    x, out = op.Inputs(0), op.Outputs(0)
    opts = _options(tflite, op, "ResizeBilinearOptions")
    if opts.AlignCorners():
        mode = "align_corners"
    elif opts.HalfPixelCenters():
        mode = "half_pixel"
    else:
        mode = "asymmetric"
    n, h, w, c = g.shape(out)
    sizes = g.const("sizes", np.asarray([n, c, h, w], np.int64))
    g.node("Resize", [g.name(x), "", "", sizes], g.name(out), mode="linear", coordinate_transformation_mode=mode)
    g.nchw.add(out)


def _depth_to_space(g: _Graph, tflite, op) -> None:
    opts = _options(tflite, op, "DepthToSpaceOptions")
    # TensorFlow's channel order is ONNX's DCR mode.
    g.node("DepthToSpace", [g.name(op.Inputs(0))], g.name(op.Outputs(0)), blocksize=opts.BlockSize(), mode="DCR")
    g.nchw.add(op.Outputs(0))


def _nhwc(g: _Graph, index: int) -> str:
    """Tensor ``index`` in TFLite's own layout (transposed back if it is held in NCHW)."""
    if index not in g.nchw:
        return g.name(index)
    return g.node("Transpose", [g.name(index)], g.fresh("nhwc"), perm=list(_NCHW_TO_NHWC))


def _reshape(g: _Graph, tflite, op) -> None:
    x, out = op.Inputs(0), op.Outputs(0)
    shape = g.const("shape", np.asarray(g.shape(out), np.int64))
    g.node("Reshape", [_nhwc(g, x), shape], g.name(out))


def _concatenation(g: _Graph, tflite, op) -> None:
    opts = _options(tflite, op, "ConcatenationOptions")
    inputs = [op.Inputs(i) for i in range(op.InputsLength())]
    out = op.Outputs(0)
    axis = opts.Axis() % len(g.shape(out))
    if all(i in g.nchw for i in inputs):
        axis = _NHWC_TO_NCHW.index(axis)
        g.nchw.add(out)
    names = [g.name(i) if all(j in g.nchw for j in inputs) else _nhwc(g, i) for i in inputs]
    joined = g.node("Concat", names, g.fresh("concat"), axis=axis)
    _activation(g, tflite, opts.FusedActivationFunction(), joined, g.name(out))


_HANDLERS: dict[str, Callable] = {
    "CONV_2D": lambda g, t, op: _conv(g, t, op, depthwise=False),
    "DEPTHWISE_CONV_2D": lambda g, t, op: _conv(g, t, op, depthwise=True),
    "ADD": _add,
    "RELU": _relu,
    "PAD": _pad,
    "MAX_POOL_2D": _max_pool,
    "RESIZE_BILINEAR": _resize_bilinear,
    "DEPTH_TO_SPACE": _depth_to_space,
    "RESHAPE": _reshape,
    "CONCATENATION": _concatenation,
}
#: TFLite ops the translator handles (besides the folded DEQUANTIZE and DENSIFY).
SUPPORTED_OPS = tuple(sorted(_HANDLERS))


def _op_name(tflite, model, op) -> str:
    code = model.OperatorCodes(op.OpcodeIndex())
    builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
    return tflite.opcode2name(builtin)


def _check_float(tflite, path: Path, sub, ops: list, names: list[str], values: dict[int, np.ndarray]) -> None:
    """Refuse quantized graphs: every activation must be float32, every (folded) weight a float."""
    for op, name in zip(ops, names, strict=True):
        if name in _FOLDABLE:
            continue
        for k in range(op.OutputsLength()):
            index = op.Outputs(k)
            if sub.Tensors(index).Type() != tflite.TensorType.FLOAT32:
                raise ConversionError(
                    f"{path}: {name} writes {sub.Tensors(index).Name().decode()!r} as TFLite type "
                    f"{sub.Tensors(index).Type()}; expected float32 (quantized models are not supported)"
                )
    for index, value in values.items():
        if value.dtype.kind not in "fi" or (value.dtype.kind == "i" and value.ndim == 4):
            raise ConversionError(
                f"{path}: constant {sub.Tensors(index).Name().decode()!r} is {value.dtype}; "
                "expected float weights (quantized models are not supported)"
            )


def _constant_values(path: Path, sub) -> dict[int, np.ndarray]:
    """Every tensor LiteRT computes without the input (weights, dequantized and densified), by index."""
    try:
        from ai_edge_litert.interpreter import Interpreter, OpResolverType
    except ImportError as exc:
        raise MissingDependencyError(
            "reading a .tflite model's weights needs LiteRT: pip install 'edge-deploy[device]'"
        ) from exc

    try:
        with warnings.catch_warnings():  # keeping every tensor is what we want here, not a debugging slip
            warnings.simplefilter("ignore", UserWarning)
            interp = Interpreter(
                model_path=str(path),
                experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
                experimental_preserve_all_tensors=True,
            )
        interp.allocate_tensors()
        detail = interp.get_input_details()[0]
        interp.set_tensor(detail["index"], np.zeros(detail["shape"], detail["dtype"]))
        interp.invoke()
    except (ValueError, RuntimeError) as exc:
        raise ConversionError(f"{path}: LiteRT cannot run the model ({exc})") from exc
    inputs = {sub.Inputs(i) for i in range(sub.InputsLength())}
    values = {}
    for i in range(sub.TensorsLength()):
        if i in inputs:
            continue
        try:
            values[i] = np.array(interp.get_tensor(i))
        except ValueError:  # tensors with no data (e.g. optional inputs)
            continue
    return values


def tflite_to_onnx(src: Path, dst: Path) -> Path:
    """Translate a float TFLite CNN into an ONNX model with the same input and output names and shapes.

    Args:
        src: the ``.tflite`` file (one subgraph, one float32 NHWC input).
        dst: where to write the ``.onnx`` (its folder must exist).

    Returns:
        ``dst``.

    Raises:
        ConversionError: the file does not parse, or uses an op the translator does not handle (all are
            named, with the supported ones).
        MissingDependencyError: the ``tflite`` package, onnx or LiteRT is missing.
    """
    tflite = _import_tflite()
    from onnx import TensorProto, checker, helper

    src, dst = Path(src), Path(dst)
    data = src.read_bytes()
    try:
        model = tflite.Model.GetRootAsModel(data, 0)
        sub = model.Subgraphs(0)
        ops = [sub.Operators(i) for i in range(sub.OperatorsLength())]
        names = [_op_name(tflite, model, op) for op in ops]
    except Exception as exc:  # the flatbuffer reader raises whatever it hits on a damaged file
        raise ConversionError(f"{src}: not a readable TFLite model ({exc})") from exc
    unknown = sorted({n for n in names if n not in _HANDLERS and n not in _FOLDABLE})
    if unknown:
        raise ConversionError(
            f"{src}: TFLite ops {', '.join(unknown)} are not supported; expected only {', '.join(SUPPORTED_OPS)}"
        )
    if sub.InputsLength() != 1:
        raise ConversionError(f"{src}: {sub.InputsLength()} inputs; expected one image input")
    all_values = _constant_values(src, sub)
    produced = {op.Outputs(0) for op in ops}
    # Constants: stored tensors (not produced by an op) and outputs of foldable ops; activations are the rest.
    constant = {i for i in all_values if i not in produced}
    for op, name in zip(ops, names, strict=True):
        if name in _FOLDABLE:
            constant.add(op.Outputs(0))
    g = _Graph(sub, {i: all_values[i] for i in constant})
    _check_float(tflite, src, sub, ops, names, g.values)
    x = sub.Inputs(0)
    in_shape = g.shape(x)
    in_name = sub.Tensors(x).Name().decode()
    g.node("Transpose", [in_name], g.name(x), perm=list(_NHWC_TO_NCHW))
    g.nchw.add(x)
    for op, name in zip(ops, names, strict=True):
        if name not in _FOLDABLE:
            _HANDLERS[name](g, tflite, op)
    outputs = []
    for k in range(sub.OutputsLength()):
        index = sub.Outputs(k)
        out_name = sub.Tensors(index).Name().decode()
        g.node("Identity", [_nhwc(g, index)], out_name)
        outputs.append(helper.make_tensor_value_info(out_name, TensorProto.FLOAT, list(g.shape(index))))
    graph = helper.make_graph(
        g.nodes,
        src.stem,
        [helper.make_tensor_value_info(in_name, TensorProto.FLOAT, list(in_shape))],
        outputs,
        g.initializers,
    )
    onnx_model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="edge-deploy tflite frontend"
    )
    onnx_model.ir_version = 8
    checker.check_model(onnx_model, full_check=True)
    dst.write_bytes(onnx_model.SerializeToString())
    return dst
