"""The user's model: read and check it, name its inputs, and fix dynamic input shapes from ``--input``.

Every error names the model file (or the ``--input`` value) and what was expected.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edge.digest import file_sha256
from edge.errors import ConversionError, InputError

#: One protobuf file holds less than 2 GiB; larger ONNX models keep their weights as external data.
MAX_MODEL_BYTES = 2**31 - 1

#: ``--input NAME=DIMxDIM...``: a name, then positive whole dimensions joined by 'x'.
_INPUT_SPEC = re.compile(r"^(?P<name>[^=]+)=(?P<dims>[1-9][0-9]*(?:x[1-9][0-9]*)*)$")


@dataclass(frozen=True)
class TensorSpec:
    """One graph input: its name, element type and shape (a dimension is an int, or a str when dynamic)."""

    name: str
    dtype: np.dtype
    shape: tuple[int | str, ...]

    @property
    def dynamic(self) -> bool:
        return any(not isinstance(d, int) for d in self.shape)

    def shape_text(self) -> str:
        return "x".join(str(d) for d in self.shape) if self.shape else "scalar"


@dataclass(frozen=True)
class SourceModel:
    """The user's model as read: where it is, its sha256, its inputs and output names."""

    path: Path
    sha256: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[str, ...]
    format: str = "onnx"

    def input_names(self) -> str:
        return ", ".join(i.name for i in self.inputs)


def parse_input_specs(values: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """``["x=1x3x224x224", ...]`` -> ``{"x": (1, 3, 224, 224)}``.

    Raises:
        InputError: a value not of the form NAME=DIMxDIM..., or a name given twice.
    """
    out: dict[str, tuple[int, ...]] = {}
    for value in values:
        match = _INPUT_SPEC.match(value.strip())
        if match is None:
            raise InputError(
                f"--input {value!r}: expected NAME=DIMxDIM... with positive whole dimensions, e.g. input=1x3x224x224"
            )
        name = match["name"]
        if name in out:
            raise InputError(f"--input {value!r}: input {name!r} is given twice")
        out[name] = tuple(int(d) for d in match["dims"].split("x"))
    return out


def _load_proto(path: Path) -> Any:
    import onnx

    if not path.is_file():
        raise InputError(f"{path}: is a folder; expected an ONNX model file" if path.is_dir() else
                         f"{path}: the model file does not exist")  # fmt: skip
    try:
        model = onnx.load(str(path))
    except Exception as exc:  # protobuf's DecodeError, onnx's external-data errors: no common narrower base
        raise InputError(f"{path}: not an ONNX model, or a corrupt one ({type(exc).__name__}: {exc})") from None
    if model.ir_version == 0 or not model.graph.node:
        raise InputError(f"{path}: not an ONNX model, or a corrupt one (no IR version or no graph nodes)")
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "invalid"
        raise InputError(f"{path}: not a valid ONNX model ({first})") from None
    return model


def _dims(value_info: Any) -> tuple[int | str, ...]:
    dims: list[int | str] = []
    for d in value_info.type.tensor_type.shape.dim:
        if d.HasField("dim_value") and d.dim_value > 0:
            dims.append(int(d.dim_value))
        else:
            dims.append(d.dim_param or "?")
    return tuple(dims)


def _graph_inputs(path: Path, model: Any) -> tuple[TensorSpec, ...]:
    from onnx import helper

    initializers = {t.name for t in model.graph.initializer}
    specs = []
    for vi in model.graph.input:
        if vi.name in initializers:
            continue
        if not vi.type.HasField("tensor_type"):
            raise InputError(f"{path}: input {vi.name!r} is not a tensor; only tensor inputs are supported")
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type))
        specs.append(TensorSpec(vi.name, dtype, _dims(vi)))
    if not specs:
        raise InputError(f"{path}: the model has no inputs to feed")
    return tuple(specs)


def read_source(path: Path) -> tuple[SourceModel, Any]:
    """Read and check an ONNX model.

    Args:
        path: the user's ``.onnx`` file.

    Returns:
        (the SourceModel, the loaded ``onnx.ModelProto``).

    Raises:
        InputError: missing file, not ONNX or corrupt, invalid graph, or no tensor inputs.
    """
    path = Path(path)
    model = _load_proto(path)
    inputs = _graph_inputs(path, model)
    outputs = tuple(o.name for o in model.graph.output)
    return SourceModel(path, file_sha256(path), inputs, outputs), model


def _fixed_shape(source: SourceModel, spec: TensorSpec, given: tuple[int, ...] | None) -> tuple[int, ...]:
    if given is None:
        if spec.dynamic:
            raise InputError(
                f"{source.path}: input {spec.name!r} has dynamic shape {spec.shape_text()}; give its shape with "
                f"--input {spec.name}=" + "x".join(str(d) if isinstance(d, int) else "N" for d in spec.shape)
            )
        return tuple(int(d) for d in spec.shape)
    if len(given) != len(spec.shape):
        raise InputError(
            f"--input {spec.name}={'x'.join(map(str, given))}: {len(given)} dimensions, but the model's input "
            f"{spec.name!r} has {len(spec.shape)} ({spec.shape_text()}) in {source.path}"
        )
    for axis, (want, have) in enumerate(zip(given, spec.shape, strict=True)):
        if isinstance(have, int) and have != want:
            raise InputError(
                f"--input {spec.name}={'x'.join(map(str, given))}: dimension {axis} is fixed to {have} in "
                f"{source.path} ({spec.shape_text()})"
            )
    return given


def resolve_inputs(source: SourceModel, given: Mapping[str, tuple[int, ...]]) -> tuple[TensorSpec, ...]:
    """The model's inputs with every shape fixed: from ``given`` (``--input``) or the model itself.

    Raises:
        InputError: an ``--input`` naming no input; a dynamic input without ``--input``; a given shape of
            the wrong rank or conflicting with a fixed dimension.
    """
    names = {s.name for s in source.inputs}
    for name in given:
        if name not in names:
            raise InputError(
                f"--input {name}: {source.path} has no input {name!r}; its inputs are {source.input_names()}"
            )
    return tuple(TensorSpec(s.name, s.dtype, _fixed_shape(source, s, given.get(s.name))) for s in source.inputs)


def write_fixed_copy(model: Any, inputs: Sequence[TensorSpec], out: Path) -> Path:
    """Save ``model`` with its graph inputs' shapes set to ``inputs`` (the fp32 model we ship and quantize).

    Output and intermediate shapes that depended on a dynamic input are cleared so onnxruntime infers them.
    """
    import onnx

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    shapes = {s.name: s.shape for s in inputs}
    for vi in copy.graph.input:
        if vi.name not in shapes:
            continue
        dims = vi.type.tensor_type.shape.dim
        for dim, value in zip(dims, shapes[vi.name], strict=True):
            dim.Clear()
            dim.dim_value = int(value)
    del copy.graph.value_info[:]
    for vi in copy.graph.output:
        for dim in vi.type.tensor_type.shape.dim:
            if not dim.HasField("dim_value"):
                dim.Clear()
    if copy.ByteSize() >= MAX_MODEL_BYTES:
        raise ConversionError(
            f"{out.name}: the model is {copy.ByteSize() / 2**30:.1f} GiB; models of 2 GiB or more (ONNX external "
            "data) are not supported by convert model yet"
        )
    onnx.save(copy, str(out))
    return out
