"""A user's own face embedder for ``edge-deploy convert face --embedder MODEL.onnx``.

Read and check the user's ONNX model (one RGB image input, one descriptor output), write the copy the device
runs like dlib's ResNet (input ``chip``: raw 0..255 RGB at a fixed square size, the user's normalisation put
inside the graph; output [N, D] with D fixed), and check that copy against the user's model.

Every bad-input error names the file and what was expected, and is raised before anything is written.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from converters.byom.images import Layout
from converters.byom.report import licence_record
from converters.byom.source import TensorSpec, read_source
from converters.validate import OutputCheck, run_onnx
from edge.errors import InferenceError, InputError

#: Names of the shipped copy's tensors (those of dlib's export: ``converters.face.dlib_resnet``).
CHIP_INPUT = "chip"
DESCRIPTOR_OUTPUT = "descriptor"
#: Default normalisation: the raw 0..255 pixels, as dlib's ResNet takes them (its mean is inside its graph).
DEFAULT_MEAN = (0.0,)
DEFAULT_STD = (1.0,)
#: Largest chip side accepted (dlib's is 150; common face embedders take 112 or 160).
MAX_CHIP_SIZE = 1024
#: The shipped copy against the user's model on the evaluation chips: the same graph plus the normalisation.
COPY_TOLERANCE = 1e-4


@dataclass(frozen=True)
class EmbedderOptions:
    """What the user gave: the model and the flags that say how to feed it."""

    model: Path
    licence: str | None = None
    chip_size: int | None = None  # --chip-size: fixes a dynamic spatial size
    mean: tuple[float, ...] = DEFAULT_MEAN  # --chip-mean, 0..255 scale, one value or one per channel (RGB)
    std: tuple[float, ...] = DEFAULT_STD  # --chip-std


@dataclass(frozen=True)
class UserEmbedder:
    """The user's embedder as read and checked: how to feed it and what it returns."""

    options: EmbedderOptions
    sha256: str
    input_name: str
    output_name: str
    layout: Layout
    chip_size: int
    batch: int | str  # 1, or the name of a dynamic batch dimension
    descriptor_size: int  # from the output's shape, or (when that is dynamic) from a run on probe chips

    @property
    def path(self) -> Path:
        return self.options.model

    def source(self) -> dict:
        """models.json ``source`` of the embedder: the user's file, its sha256 and its licence (or 'unknown')."""
        return user_file_source(self.path, self.sha256, "onnx", self.options.licence, "--licence")

    def preprocessing(self) -> dict:
        """How a chip is fed: what models.json records in ``recognition``."""
        return {
            "chip_size": self.chip_size,
            "layout": self.layout.value,
            "channels": "RGB",
            "mean": [float(v) for v in _per_channel(self.options.mean, "--chip-mean")],
            "std": [float(v) for v in _per_channel(self.options.std, "--chip-std")],
            "scale": "0..255 pixels; the model is fed (pixel - mean) / std (inside the shipped graph)",
        }

    def normalised(self, chips: np.ndarray) -> np.ndarray:
        """uint8 [N, S, S, 3] chips as the user's model takes them (its layout, its normalisation), float32."""
        mean = _per_channel(self.options.mean, "--chip-mean")
        std = _per_channel(self.options.std, "--chip-std")
        x = (chips.astype(np.float32) - mean) / std
        return np.ascontiguousarray(x.transpose(0, 3, 1, 2) if self.layout is Layout.NCHW else x, np.float32)


def _per_channel(values: tuple[float, ...], flag: str) -> np.ndarray:
    if len(values) not in (1, 3) or not all(math.isfinite(v) for v in values):
        raise InputError(f"{flag} {','.join(f'{v:g}' for v in values)}: expected 1 or 3 finite numbers (R,G,B)")
    if flag == "--chip-std" and any(v <= 0 for v in values):
        raise InputError(f"{flag} {','.join(f'{v:g}' for v in values)}: expected numbers > 0")
    return np.broadcast_to(np.asarray(values, np.float32), (3,)).astype(np.float32)


def _layout(path: Path, spec: TensorSpec) -> Layout:
    expected = "an RGB image, [N,3,S,S] (NCHW) or [N,S,S,3] (NHWC)"
    if len(spec.shape) != 4:
        raise InputError(
            f"{path}: input {spec.name!r} has shape {spec.shape_text()}, not an image; expected {expected}"
        )
    if spec.shape[1] == 3:
        return Layout.NCHW
    if spec.shape[3] == 3:
        return Layout.NHWC
    raise InputError(
        f"{path}: input {spec.name!r} has shape {spec.shape_text()}: no axis of 3 channels; expected {expected}"
    )


def _chip_size(path: Path, spec: TensorSpec, layout: Layout, given: int | None) -> int:
    height, width = spec.shape[2:4] if layout is Layout.NCHW else spec.shape[1:3]
    if given is not None and (isinstance(given, bool) or not 1 <= given <= MAX_CHIP_SIZE):
        raise InputError(f"--chip-size {given}: expected a chip side in 1..{MAX_CHIP_SIZE} pixels")
    fixed = [d for d in (height, width) if isinstance(d, int)]
    if len(fixed) == 2 and height != width:
        raise InputError(
            f"{path}: input {spec.name!r} has shape {spec.shape_text()}: a {height}x{width} chip; expected a "
            "square chip (the alignment cuts square chips)"
        )
    if fixed and given is not None and given != fixed[0]:
        raise InputError(
            f"--chip-size {given}: {path}'s input {spec.name!r} is fixed to {fixed[0]} ({spec.shape_text()})"
        )
    if given is None and len(fixed) < 2:
        raise InputError(
            f"{path}: input {spec.name!r} has dynamic spatial size ({spec.shape_text()}); give the chip side with "
            "--chip-size S, e.g. --chip-size 112"
        )
    return int(given if given is not None else fixed[0])


def _output(path: Path, model: Any) -> tuple[str, int | None]:
    outputs = list(model.graph.output)
    shapes = []
    for vi in outputs:
        dims = vi.type.tensor_type.shape.dim
        shapes.append(tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in dims))
    text = ", ".join(f"{vi.name}={'x'.join(map(str, s)) or '?'}" for vi, s in zip(outputs, shapes, strict=True))
    expected = "one output, a 1-D descriptor per face ([N,D])"
    if len(outputs) != 1:
        raise InputError(f"{path}: {len(outputs)} outputs ({text}); expected {expected}")
    shape = shapes[0]
    if not outputs[0].type.tensor_type.HasField("shape"):
        return outputs[0].name, None  # no declared shape: the probe run says
    if len(shape) != 2:
        raise InputError(f"{path}: output {text}; expected {expected}")
    return outputs[0].name, int(shape[1]) if isinstance(shape[1], int) and shape[1] > 0 else None


def read_user_embedder(options: EmbedderOptions) -> tuple[UserEmbedder, Any]:
    """Read and check the user's embedder, and run it once on probe chips.

    Returns:
        (the UserEmbedder, its ``onnx.ModelProto``).

    Raises:
        InputError: not an ONNX model; not exactly one input; an input that is not a float32 RGB image of a
            square, fixed (or ``--chip-size``) size with a batch of 1 or a dynamic batch; bad ``--chip-mean`` /
            ``--chip-std``; not exactly one output of shape [N, D]; a model onnxruntime cannot run.
    """
    path = Path(options.model)
    source, model = read_source(path)
    if len(source.inputs) != 1:
        names = ", ".join(f"{s.name}={s.shape_text()}" for s in source.inputs)
        raise InputError(f"{path}: {len(source.inputs)} inputs ({names}); expected one input, the face chip")
    spec = source.inputs[0]
    layout = _layout(path, spec)
    if spec.dtype != np.dtype(np.float32):
        raise InputError(f"{path}: input {spec.name!r} is {spec.dtype}; expected float32 chips")
    batch = spec.shape[0]
    if isinstance(batch, int) and batch != 1:
        raise InputError(
            f"{path}: input {spec.name!r} has a fixed batch of {batch} ({spec.shape_text()}); expected 1 or a "
            "dynamic batch (a frame has any number of faces)"
        )
    size = _chip_size(path, spec, layout, options.chip_size)
    _per_channel(options.mean, "--chip-mean")
    _per_channel(options.std, "--chip-std")
    output, declared = _output(path, model)
    user = UserEmbedder(options, source.sha256, spec.name, output, layout, size, batch, declared or 0)
    measured = _probe(user)
    if declared is not None and measured != declared:
        raise InputError(f"{path}: output {output!r} declares {declared} values a face but gave {measured}")
    return UserEmbedder(options, source.sha256, spec.name, output, layout, size, batch, measured), model


def _probe(user: UserEmbedder) -> int:
    """Run the user's model on two seeded chips (one at a time with a batch of 1): its descriptor size."""
    chips = np.random.default_rng(0).integers(0, 256, (2, user.chip_size, user.chip_size, 3), dtype=np.uint8)
    outs = _run_user(user, chips)
    if outs.ndim != 2 or outs.shape[0] != 2 or outs.shape[1] < 1:
        raise InputError(
            f"{user.path}: output {user.output_name!r} gave shape {list(outs.shape)} for 2 chips; expected a 1-D "
            "descriptor per face ([N,D])"
        )
    if not np.all(np.isfinite(outs)):
        raise InputError(f"{user.path}: output {user.output_name!r} gave NaN or infinity on seeded chips")
    return int(outs.shape[1])


def _run_user(user: UserEmbedder, chips: np.ndarray, threads: int = 1) -> np.ndarray:
    x = user.normalised(chips)
    parts = [x[i : i + 1] for i in range(len(x))] if user.batch == 1 else [x]
    try:
        outs = [run_onnx(user.path, {user.input_name: part}, threads)[user.output_name] for part in parts]
    except InferenceError as exc:
        raise InputError(
            f"{exc}; expected a face embedder that runs on {user.chip_size}x{user.chip_size} chips"
        ) from None
    return np.concatenate([np.asarray(o) for o in outs])


def _normalisation_nodes(user: UserEmbedder, graph: Any) -> list:
    """Sub/Mul nodes in front of the user's input, unless the default (raw pixels) is asked for."""
    from onnx import helper, numpy_helper

    mean = _per_channel(user.options.mean, "--chip-mean")
    std = _per_channel(user.options.std, "--chip-std")
    if np.all(mean == 0) and np.all(std == 1):
        return []
    shape = (1, 3, 1, 1) if user.layout is Layout.NCHW else (1, 1, 1, 3)
    names = {
        "mean": "edge_deploy_chip_mean",
        "scale": "edge_deploy_chip_inv_std",
        "centred": "edge_deploy_chip_centred",
    }
    graph.initializer.extend(
        [
            numpy_helper.from_array(mean.reshape(shape), names["mean"]),
            numpy_helper.from_array((1.0 / std).astype(np.float32).reshape(shape), names["scale"]),
        ]
    )
    return [
        helper.make_node("Sub", [CHIP_INPUT, names["mean"]], [names["centred"]], name="edge_deploy_chip_sub"),
        helper.make_node("Mul", [names["centred"], names["scale"]], [user.input_name], name="edge_deploy_chip_mul"),
    ]


def _set_dims(value_info: Any, dims: tuple[int | str, ...]) -> None:
    shape = value_info.type.tensor_type.shape
    shape.ClearField("dim")
    for value in dims:
        dim = shape.dim.add()
        if isinstance(value, int):
            dim.dim_value = value
        else:
            dim.dim_param = value


def _tensor_names(graph: Any) -> set[str]:
    names = {v.name for v in (*graph.input, *graph.output, *graph.value_info)} | {t.name for t in graph.initializer}
    return names | {n for node in graph.node for n in (*node.input, *node.output)}


def _rename(graph: Any, old: str, new: str) -> None:
    """Rename tensor ``old`` to ``new`` everywhere in ``graph`` (not in sub-graphs: a face embedder's tensors
    of these names are not read inside an If/Loop body)."""
    for node in graph.node:
        node.input[:] = [new if n == old else n for n in node.input]
        node.output[:] = [new if n == old else n for n in node.output]
    for v in (*graph.input, *graph.output, *graph.value_info, *graph.initializer):
        if v.name == old:
            v.name = new


def _claim(graph: Any, name: str, owner: str) -> None:
    """Make ``name`` free for the tensor ``owner`` (a user tensor of that name gets a ``_user`` suffix)."""
    if owner == name or name not in _tensor_names(graph):
        return
    free = name + "_user"
    while free in _tensor_names(graph):
        free += "_"
    _rename(graph, name, free)


def write_shipped_copy(user: UserEmbedder, model: Any, out: Path) -> Path:
    """The copy the device runs: input ``chip`` (raw 0..255 RGB, [B,3,S,S] or [B,S,S,3], B = 1 or dynamic),
    the normalisation inside the graph, output ``descriptor`` [B, D]; checked with ``onnx.checker``.

    Raises:
        ConversionError: the copy is not a valid ONNX model.
    """
    import onnx

    from edge.errors import ConversionError

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    graph = copy.graph
    _claim(graph, CHIP_INPUT, user.input_name)
    _claim(graph, DESCRIPTOR_OUTPUT, user.output_name)
    prefix = _normalisation_nodes(user, graph)
    (vi,) = [v for v in graph.input if v.name == user.input_name]
    if prefix:  # the new input 'chip' feeds Sub -> Mul, whose output is the user's input tensor
        vi.name = CHIP_INPUT
        nodes = list(graph.node)
        del graph.node[:]
        graph.node.extend(prefix + nodes)
    else:
        _rename(graph, user.input_name, CHIP_INPUT)
    _rename(graph, user.output_name, DESCRIPTOR_OUTPUT)
    batch = user.batch if isinstance(user.batch, int) else "N"
    side = user.chip_size
    _set_dims(vi, (batch, 3, side, side) if user.layout is Layout.NCHW else (batch, side, side, 3))
    out_vi = graph.output[0]
    out_vi.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
    _set_dims(out_vi, (batch, user.descriptor_size))
    del graph.value_info[:]  # shapes that followed a dynamic input: onnxruntime infers them again
    try:
        onnx.checker.check_model(copy)
    except onnx.checker.ValidationError as exc:
        raise ConversionError(f"{user.path}: the shipped copy is not a valid ONNX model ({exc})") from None
    onnx.save(copy, str(out))
    return out


def check_copy(user: UserEmbedder, chips: np.ndarray, shipped: np.ndarray, threads: int = 1) -> OutputCheck:
    """The shipped copy's descriptors of real chips against the user's model's.

    Args:
        chips: uint8 [N, S, S, 3] aligned chips.
        shipped: float32 [N, D], the shipped copy's descriptors of ``chips`` (run by the device's FaceEmbedder).

    Returns:
        The check: max abs difference of the descriptors, tolerance ``COPY_TOLERANCE``.
    """
    source = _run_user(user, chips, threads) if len(chips) else np.zeros_like(shipped)
    diff = float(np.max(np.abs(shipped.astype(np.float64) - source))) if len(chips) else 0.0
    return OutputCheck(f"user embedder {user.path.name}", DESCRIPTOR_OUTPUT, tuple(shipped.shape), diff, COPY_TOLERANCE)


def user_file_source(path: Path, sha256: str, fmt: str, licence: str | None, flag: str) -> dict:
    """models.json ``source`` of a user's model file in a face folder (``--embedder``, ``--detector``): the
    file, its sha256 and format, and its licence as ``convert face``'s ``flag`` gave it (or unknown)."""
    return {
        "package": "user model",
        "version": "-",
        "file": path.name,
        "path": str(path),
        "sha256": sha256,
        "format": fmt,
        **licence_record(licence, f"edge-deploy convert face {flag}"),
    }
