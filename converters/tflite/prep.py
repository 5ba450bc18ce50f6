"""Getting an ONNX model and onnx2tf's working directory ready for a conversion (see ``converters.tflite.convert``).

* ``fixed_input_shape``: the NCHW shape, batch 1, to convert at.
* ``explicit_maxpool_padding``: onnx2tf pads MaxPool with 0.0 under ``-oiqt``; we make padding explicit.
* ``write_sample_data``: the file onnx2tf would otherwise download, written from real data.
* ``reduce_l2_as_sum_square``: onnx2tf fails on a ReduceL2 with an ``axes`` input; we rewrite it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from edge.errors import ConversionError, InputError, require

#: The file onnx2tf downloads from GitHub unless it finds it in its working directory.
SAMPLE_DATA_FILE = "calibration_image_sample_data_20x128x128x3_float32.npy"


def _onnx_input_shape(onnx_path: Path, input_name: str) -> tuple[int | None, ...]:
    onnx = require("onnx", "convert", "Reading an ONNX model before TFLite conversion")
    try:
        model = onnx.load(str(onnx_path), load_external_data=False)
    except Exception as exc:  # protobuf raises DecodeError and others: all mean "not an ONNX model"
        raise ConversionError(f"{onnx_path}: not a readable ONNX model ({type(exc).__name__}: {exc})") from exc
    if any(i.data_location == onnx.TensorProto.EXTERNAL for i in model.graph.initializer):
        raise InputError(f"{onnx_path}: keeps its weights in external data files; expected one self-contained file")
    inits = {i.name for i in model.graph.initializer}
    inputs = {i.name: i for i in model.graph.input if i.name not in inits}
    if input_name not in inputs:
        raise InputError(f"{onnx_path}: has no input {input_name!r}; its inputs are {sorted(inputs)}")
    if len(inputs) != 1:
        raise InputError(f"{onnx_path}: has inputs {sorted(inputs)}; TFLite conversion takes one-input models")
    dims = inputs[input_name].type.tensor_type.shape.dim
    return tuple(d.dim_value if d.HasField("dim_value") else None for d in dims)


def fixed_input_shape(onnx_path: Path, input_name: str, input_shape: tuple[int, ...] | None) -> tuple[int, ...]:
    """The NCHW shape to convert at: ``input_shape``, or the ONNX input's with a dynamic batch set to 1.

    Raises:
        ConversionError: the file is not a readable ONNX model.
        InputError: no such input, not 4-D, dynamic H/W without ``input_shape``, or a shape that does not fit.
    """
    onnx_shape = _onnx_input_shape(onnx_path, input_name)
    shape = tuple(input_shape) if input_shape is not None else (1, *onnx_shape[1:])
    if len(onnx_shape) != 4 or len(shape) != 4:
        raise InputError(f"{onnx_path}: input {input_name!r} has shape {list(onnx_shape)}; expected 4-D NCHW")
    if any(d is None for d in shape):
        raise InputError(
            f"{onnx_path}: input {input_name!r} has dynamic dimensions {list(onnx_shape)}; "
            "pass input_shape=(1, C, H, W) to convert at a fixed size"
        )
    fixed = tuple(int(d) for d in shape if d is not None)
    if len(fixed) != 4 or fixed[0] != 1 or any(d < 1 for d in fixed):
        raise InputError(f"input_shape = {list(shape)}; expected (1, C, H, W) with positive sizes")
    for want, have in zip(onnx_shape, fixed, strict=True):
        if want is not None and want != have:
            raise InputError(f"input_shape = {list(shape)} does not fit the model's {list(onnx_shape)}")
    return fixed


def write_sample_data(work_dir: Path, samples: np.ndarray | None = None) -> Path:
    """Write the file onnx2tf reads (and would otherwise download) from its working directory.

    Without ``samples``: 20 real photo crops, float32 [20, 128, 128, 3] in 0..1 like the original, from
    scikit-image's bundled photos (astronaut, coffee, chelsea, rocket, immunohistochemistry), four per
    photo, resized with area interpolation; onnx2tf only runs its check inference on them. With
    ``samples`` (NHWC at the model's input size): those, which onnx2tf then also calibrates on.
    """
    path = Path(work_dir) / SAMPLE_DATA_FILE
    if samples is not None:
        np.save(path, np.ascontiguousarray(samples, dtype=np.float32))
        return path
    skdata = require("skimage.data", "convert", "Writing onnx2tf's sample data")
    cv2 = require("cv2", "device", "Writing onnx2tf's sample data")
    crops = []
    for name in ("astronaut", "coffee", "chelsea", "rocket", "immunohistochemistry"):
        img = getattr(skdata, name)()[..., :3]
        h, w = img.shape[:2]
        s = min(h, w)
        half = s // 2
        for y, x, side in ((0, 0, s), (h - half, w - half, half), (0, w - half, half), ((h - s) // 2, (w - s) // 2, s)):
            crops.append(cv2.resize(img[y : y + side, x : x + side], (128, 128), interpolation=cv2.INTER_AREA))
    np.save(path, np.stack(crops).astype(np.float32) / 255.0)
    return path


def _pool_attrs(onnx: Any, node: Any) -> dict[str, Any]:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _edge_pads(attrs: dict[str, Any], in_shape: list[int], out_shape: list[int]) -> list[int] | None:
    """ONNX Pad ``pads`` that make a MaxPool's padding (and ceil-mode overhang) explicit, or None if none."""
    kernel, rank = attrs["kernel_shape"], len(attrs["kernel_shape"])
    strides = attrs.get("strides", [1] * rank)
    pads = list(attrs.get("pads", [0] * 2 * rank))
    for axis in range(rank):
        size, out = in_shape[2 + axis], out_shape[2 + axis]
        # the ceil-mode overhang: what the last window reaches past the padded input
        pads[rank + axis] += max(0, (out - 1) * strides[axis] + kernel[axis] - (size + pads[axis] + pads[rank + axis]))
    return [0, 0, *pads[:rank], 0, 0, *pads[rank:]] if any(pads) else None


def explicit_maxpool_padding(model_path: Path, input_name: str, nchw: tuple[int, ...]) -> int:
    """Rewrite, in place, every padded or ceil-mode MaxPool as an edge-mode Pad and an unpadded MaxPool.

    onnx2tf pads MaxPool inputs with the dtype's minimum, but with 0.0 whenever ``-oiqt`` is given (its
    workaround for onnx2tf issue 444) - in the float graph too, which is wrong after PReLU: MTCNN's ONet
    differed from ONNX by 1.4e-2 in fp32. Replicating the edge is exact for max pooling (every window that
    reaches into the padding also holds the edge value it replicates) and quantizes without a range
    problem. Only for ``model_path``'s copy: shapes are inferred at ``nchw``.

    Returns:
        How many MaxPool nodes were rewritten.
    """
    onnx = require("onnx", "convert", "Preparing an ONNX model for onnx2tf")
    model = onnx.load(str(model_path))
    graph_input = next(i for i in model.graph.input if i.name == input_name)
    for dim, value in zip(graph_input.type.tensor_type.shape.dim, nchw, strict=True):
        dim.Clear()
        dim.dim_value = value
    inferred = onnx.shape_inference.infer_shapes(model).graph
    shapes = {
        v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in [*inferred.value_info, *inferred.input]
    }
    nodes, rewritten = [], 0
    for node in model.graph.node:
        attrs = _pool_attrs(onnx, node)
        shape_in, shape_out = shapes.get(node.input[0] if node.input else ""), shapes.get(node.output[0])
        plain = node.op_type != "MaxPool" or any(d != 1 for d in attrs.get("dilations", [1]))
        if plain or attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET") or not shape_in or not shape_out:
            nodes.append(node)
            continue
        pads = _edge_pads(attrs, shape_in, shape_out)
        if pads is not None:
            name = f"{node.output[0]}__edge_pad"
            model.graph.initializer.append(onnx.numpy_helper.from_array(np.array(pads, np.int64), f"{name}_pads"))
            nodes.append(onnx.helper.make_node("Pad", [node.input[0], f"{name}_pads"], [name], mode="edge", name=name))
            node.input[0] = name
            rewritten += 1
        for attr in node.attribute:
            if attr.name == "ceil_mode":
                attr.i = 0
            elif attr.name == "pads":
                attr.ints[:] = [0] * len(attr.ints)
        nodes.append(node)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    onnx.save(model, str(model_path))
    return rewritten


def reduce_l2_as_sum_square(model_path: Path) -> int:
    """Rewrite, in place, every ReduceL2 as ReduceSumSquare then Sqrt (the same function, the same inputs and
    attributes: both take ``axes`` as an attribute before opset 18 and as an input from it).

    onnx2tf 1.29.24 converts ReduceL2 to ``tf.norm`` and hands it the axis read from an ``axes`` input as a
    numpy integer, which ``tf.norm`` refuses ("'axis' must be None, an integer, or a tuple of 2 unique
    integers, got 1"): the L2 normalisation at the end of a sentence encoder (all-MiniLM-L6-v2). Only for a
    copy of the model that onnx2tf is given.

    Returns:
        How many ReduceL2 nodes were rewritten.
    """
    onnx = require("onnx", "convert", "Preparing an ONNX model for onnx2tf")
    model = onnx.load(str(model_path))
    nodes, rewritten = [], 0
    for node in model.graph.node:
        if node.op_type != "ReduceL2" or node.domain not in ("", "ai.onnx"):
            nodes.append(node)
            continue
        squares = f"{node.output[0]}__sum_square"
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        name = f"{node.name}__sum_square"
        nodes.append(onnx.helper.make_node("ReduceSumSquare", list(node.input), [squares], name=name, **attrs))
        nodes.append(onnx.helper.make_node("Sqrt", [squares], [node.output[0]], name=f"{node.name}__sqrt"))
        rewritten += 1
    if rewritten:
        del model.graph.node[:]
        model.graph.node.extend(nodes)
        onnx.save(model, str(model_path))
    return rewritten
