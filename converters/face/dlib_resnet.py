"""dlib's face-embedding ResNet rebuilt in torch from the records of ``dlib_reader``, exported to ONNX fp32.

ONNX contract (what ``edge.face.embed.FaceEmbedder`` feeds):

* input ``chip``: float32 [N, 3, 150, 150], RGB, raw pixel values 0..255 of an aligned face chip
  (``dlib.get_face_chip(img, shape, 150, 0.25)``);
* output ``descriptor``: float32 [N, 128], dlib's face descriptor (not normalised; same person when the
  Euclidean distance is below 0.6).

dlib's input layer subtracts the mean colour and divides by 256: that is inside the graph (Sub, Mul by
1/256, which is exact). Every affine (inference-time batch norm) follows a convolution and is folded into
it, so the graph is plain Sub/Mul/Conv/Relu/MaxPool/AveragePool/Pad/Add/ReduceMean/Reshape/Gemm, ready for
INT8 quantization. The model's metadata records its source and the distance threshold.

dlib's ``add_prev`` adds tensors of different shapes by zero-padding the smaller one at the end of each
dimension (tt::add). That happens in the downsampling blocks, where the shortcut has half the channels and,
at 8x8 -> 3x3 / 4x4, a larger image than the residual branch: it becomes a Pad with constant pads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from converters.face.dlib_reader import DlibFaceNet, DlibLayer, LayerKind, read_dlib_face_net
from converters.validate import check_against_source, raise_if_off
from edge.errors import ConversionError, require

#: The dynamo exporter's native opset: asking it for 17 fails on Pad ("No Adapter To Version 17").
OPSET = 18
INPUT_NAME = "chip"
OUTPUT_NAME = "descriptor"
#: Largest max-abs difference allowed between onnxruntime and the torch rebuild after export.
EXPORT_TOLERANCE = 1e-5

_Shape = tuple[int, int, int]  # (channels, rows, cols)


@dataclass(frozen=True)
class Step:
    """One operation of the rebuilt network, with the shape it produces.

    Attributes:
        kind: ``conv``, ``relu``, ``max_pool``, ``avg_pool``, ``global_avg_pool``, ``tag``,
            ``skip``, ``add`` or ``fc``.
        shape: (channels, rows, cols) after the step; (outputs, 1, 1) after ``fc``.
        tag: the tag a ``tag``/``skip``/``add`` step sets or reads.
        arrays: float32 parameters (conv ``weight``/``bias`` with the affine folded in; fc ``weight``
            [out, in]).
        kernel, stride, padding: (y, x) for conv and pools.
        pad_self, pad_tag: for ``add``, zero padding (channels, rows, cols) added at the end of the current
            tensor and of the tagged one so both reach ``shape``.
    """

    kind: str
    shape: _Shape
    tag: int | None = None
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    kernel: tuple[int, int] = (0, 0)
    stride: tuple[int, int] = (1, 1)
    padding: tuple[int, int] = (0, 0)
    pad_self: _Shape = (0, 0, 0)
    pad_tag: _Shape = (0, 0, 0)


def _out_side(side: int, kernel: int, stride: int, padding: int, what: str) -> int:
    out = (side + 2 * padding - kernel) // stride + 1
    if out < 1:
        raise ConversionError(f"{what}: a {kernel}x{kernel}/{stride} window does not fit {side} pixels")
    return out


def _spatial(shape: _Shape, layer: DlibLayer, channels: int) -> _Shape:
    (ky, kx), (sy, sx), (py, px) = layer.pair("kernel"), layer.pair("stride"), layer.pair("padding")
    what = f"{layer.kind.value} layer {layer.index}"
    return (channels, _out_side(shape[1], ky, sy, py, what), _out_side(shape[2], kx, sx, px, what))


def _conv_step(layer: DlibLayer, affine: DlibLayer | None, shape: _Shape) -> Step:
    weight, bias = layer.params["weight"], layer.params["bias"]
    if weight.shape[1] != shape[0]:
        raise ConversionError(
            f"con_ layer {layer.index}: filters take {weight.shape[1]} channels, its input has {shape[0]}"
        )
    if affine is not None:
        gamma, beta = affine.params["gamma"], affine.params["beta"]
        if gamma.shape[0] != weight.shape[0]:
            raise ConversionError(
                f"affine_ layer {affine.index}: {gamma.shape[0]} channels after a con_ layer of "
                f"{weight.shape[0]} filters"
            )
        weight = weight * gamma[:, None, None, None]
        bias = bias * gamma + beta
    return Step(
        "conv",
        _spatial(shape, layer, weight.shape[0]),
        arrays={"weight": weight.astype(np.float32), "bias": bias.astype(np.float32)},
        kernel=layer.pair("kernel"),
        stride=layer.pair("stride"),
        padding=layer.pair("padding"),
    )


def _add_step(layer: DlibLayer, shape: _Shape, tagged: _Shape) -> Step:
    out = tuple(max(a, b) for a, b in zip(shape, tagged, strict=True))
    return Step(
        "add",
        out,  # type: ignore[arg-type]
        tag=layer.tag,
        pad_self=tuple(o - a for o, a in zip(out, shape, strict=True)),  # type: ignore[arg-type]
        pad_tag=tuple(o - b for o, b in zip(out, tagged, strict=True)),  # type: ignore[arg-type]
    )


def _pool_step(layer: DlibLayer, shape: _Shape) -> Step:
    kind = "max_pool" if layer.kind is LayerKind.MAX_POOL else "avg_pool"
    if layer.pair("kernel") == (0, 0):  # dlib's avg_pool_everything
        if kind != "avg_pool":
            raise ConversionError(f"max_pool layer {layer.index}: a whole-image max pool is not supported")
        return Step("global_avg_pool", (shape[0], 1, 1))
    return Step(
        kind,
        _spatial(shape, layer, shape[0]),
        kernel=layer.pair("kernel"),
        stride=layer.pair("stride"),
        padding=layer.pair("padding"),
    )


def plan_network(net: DlibFaceNet) -> list[Step]:
    """Turn dlib's layers into steps with static shapes, folding every affine into the conv below it.

    Args:
        net: the network read by ``read_dlib_face_net``.

    Returns:
        The steps from the normalised input to the descriptor.

    Raises:
        ConversionError: when shapes do not fit together or a tag is used before it is set.
    """
    shape: _Shape = (3, *net.input_size)
    tags: dict[int | None, _Shape] = {}
    steps: list[Step] = []
    layers = list(net.layers)
    i = 0
    while i < len(layers):
        layer = layers[i]
        i += 1
        if layer.kind is LayerKind.CON:
            affine = layers[i] if i < len(layers) and layers[i].kind is LayerKind.AFFINE else None
            i += affine is not None
            steps.append(_conv_step(layer, affine, shape))
        elif layer.kind is LayerKind.AFFINE:
            raise ConversionError(f"affine_ layer {layer.index} does not follow a con_ layer; cannot fold it")
        elif layer.kind is LayerKind.RELU:
            steps.append(Step("relu", shape))
        elif layer.kind in (LayerKind.MAX_POOL, LayerKind.AVG_POOL):
            steps.append(_pool_step(layer, shape))
        elif layer.kind is LayerKind.TAG:
            tags[layer.tag] = shape
            steps.append(Step("tag", shape, tag=layer.tag))
        elif layer.kind in (LayerKind.SKIP, LayerKind.ADD_PREV):
            if layer.tag not in tags:
                raise ConversionError(f"{layer.kind.value} uses tag{layer.tag}, which is not set below it")
            if layer.kind is LayerKind.SKIP:
                steps.append(Step("skip", tags[layer.tag], tag=layer.tag))
            else:
                steps.append(_add_step(layer, shape, tags[layer.tag]))
        elif layer.kind is LayerKind.FC:
            steps.append(_fc_step(layer, shape))
        shape = steps[-1].shape
    return steps


def _fc_step(layer: DlibLayer, shape: _Shape) -> Step:
    weight = layer.params["weight"]  # [in, out]
    inputs = shape[0] * shape[1] * shape[2]
    if weight.shape[0] != inputs:
        raise ConversionError(f"fc_ layer {layer.index}: takes {weight.shape[0]} inputs, gets {inputs}")
    return Step("fc", (weight.shape[1], 1, 1), arrays={"weight": np.ascontiguousarray(weight.T)})


def build_torch_embedder(net: DlibFaceNet):
    """Build a torch ``nn.Module`` computing dlib's descriptor from raw RGB chips.

    Args:
        net: the network read by ``read_dlib_face_net``.

    Returns:
        An eval-mode module: float32 [N, 3, rows, cols] in 0..255 -> float32 [N, 128].
    """
    torch = require("torch", "convert", "Rebuilding dlib's face ResNet")
    module_class = _module_class(torch)
    return module_class(plan_network(net), net.input_mean).eval()


def _step_module(torch, step: Step):
    """The torch module of a step that has one (conv, relu, pools, fc); None for tag/skip/add."""
    nn = torch.nn
    if step.kind == "conv":
        weight = torch.from_numpy(step.arrays["weight"])
        conv = nn.Conv2d(weight.shape[1], weight.shape[0], step.kernel, step.stride, step.padding)
        conv.weight.data.copy_(weight)
        conv.bias.data.copy_(torch.from_numpy(step.arrays["bias"]))
        return conv
    if step.kind == "max_pool":
        return nn.MaxPool2d(step.kernel, step.stride, step.padding)
    if step.kind == "avg_pool":
        # dlib's average pooling leaves padding out of the mean (cuDNN COUNT_EXCLUDE_PADDING)
        return nn.AvgPool2d(step.kernel, step.stride, step.padding, count_include_pad=False)
    if step.kind == "global_avg_pool":
        return nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(1))
    if step.kind == "fc":
        weight = torch.from_numpy(step.arrays["weight"])
        linear = nn.Linear(weight.shape[1], weight.shape[0], bias=False)
        linear.weight.data.copy_(weight)
        return linear
    if step.kind == "relu":
        return nn.ReLU()
    return None


def _module_class(torch):
    """Define the embedder module (torch is imported lazily, so the class is built here)."""
    nn = torch.nn
    functional = torch.nn.functional
    module: Any = nn.Module  # torch is a parameter here, so the base class is a value to the type checker

    def pad_end(x, pads: _Shape):
        if not any(pads):
            return x
        dc, dy, dx = pads
        return functional.pad(x, (0, dx, 0, dy, 0, dc))

    class DlibEmbedder(module):
        """Raw RGB chips [N, 3, H, W] (0..255) -> dlib face descriptors [N, 128]."""

        def __init__(self, steps: list[Step], mean: tuple[float, float, float]) -> None:
            super().__init__()
            self.steps = steps
            self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).reshape(1, 3, 1, 1))
            self.layers = nn.ModuleList(
                [m if (m := _step_module(torch, s)) is not None else nn.Identity() for s in steps]
            )

        def forward(self, chip):
            x = (chip - self.mean) * (1.0 / 256.0)  # dlib: (pixel - avg) / 256, exact in float32
            tags = {}
            for step, layer in zip(self.steps, self.layers, strict=True):
                if step.kind == "tag":
                    tags[step.tag] = x
                elif step.kind == "skip":
                    x = tags[step.tag]
                elif step.kind == "add":
                    x = pad_end(x, step.pad_self) + pad_end(tags[step.tag], step.pad_tag)
                else:
                    x = layer(x)
            return x

    return DlibEmbedder


def export_dlib_embedder(dat_path: Path, out_path: Path) -> Path:
    """Convert dlib's face-recognition ResNet (.dat) to one ONNX fp32 file with a dynamic batch.

    After export, onnxruntime and the torch rebuild run on the same seeded chips and must agree to
    ``EXPORT_TOLERANCE`` (the proof against dlib itself is in the integration tests).

    Args:
        dat_path: ``dlib_face_recognition_resnet_model_v1.dat``.
        out_path: where to write the .onnx file (its folder is created).

    Returns:
        ``out_path``.

    Raises:
        ConversionError: if the .dat cannot be read or the export fails.
        ValidationError: if onnxruntime's output differs from the torch rebuild.
    """
    torch = require("torch", "convert", "Exporting dlib's face ResNet to ONNX")
    net = read_dlib_face_net(Path(dat_path))
    module = build_torch_embedder(net)
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    dummy = torch.zeros((2, 3, *net.input_size), dtype=torch.float32)
    batch = torch.export.Dim("batch", min=1, max=4096)
    try:
        # dynamo, not the legacy exporter: the legacy one leaves each Pad's pads as an unfolded
        # Slice/Transpose/Cast chain; dynamo writes them as constants.
        torch.onnx.export(
            module,
            (dummy,),
            str(out_path),
            input_names=[INPUT_NAME],
            output_names=[OUTPUT_NAME],
            dynamic_shapes=({0: batch},),
            opset_version=OPSET,
            dynamo=True,
            external_data=False,
            verbose=False,
        )
    except Exception as exc:  # the exporter raises many unrelated types
        raise ConversionError(f"{out_path}: torch.onnx.export of {dat_path} failed ({exc})") from exc
    _add_metadata(out_path, net)
    _check_export(module, out_path, net.input_size)
    return out_path


def _add_metadata(onnx_path: Path, net: DlibFaceNet) -> None:
    onnx = require("onnx", "convert", "Writing the ONNX model's metadata")
    model = onnx.load(str(onnx_path))
    rows, cols = net.input_size
    entries = {
        "edge_deploy.source": net.path.name,
        "edge_deploy.input": f"{INPUT_NAME}: float32 [N,3,{rows},{cols}] RGB 0..255",
        "edge_deploy.output": f"{OUTPUT_NAME}: float32 [N,128] dlib face descriptor",
        "edge_deploy.distance_threshold": f"{net.distance_threshold:.6g}",
    }
    onnx.helper.set_model_props(model, entries)
    model.doc_string = "dlib face recognition ResNet (dlib_face_recognition_resnet_model_v1), CC0-1.0"
    onnx.save(model, str(onnx_path))


def _check_export(module, onnx_path: Path, size: tuple[int, int]) -> None:
    torch = require("torch", "convert", "Checking the exported dlib face ResNet")
    chips = np.random.default_rng(0).integers(0, 256, size=(3, 3, *size)).astype(np.float32)

    def reference(feeds):
        with torch.no_grad():
            return {OUTPUT_NAME: module(torch.from_numpy(feeds[INPUT_NAME])).numpy()}

    feeds = {INPUT_NAME: chips}
    checks = check_against_source("dlib-resnet29", onnx_path, reference, feeds, EXPORT_TOLERANCE)
    raise_if_off(checks, f"{onnx_path}: ONNX export of dlib's face ResNet")
