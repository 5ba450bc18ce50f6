"""A ``torch.export`` program (``torch.export.save`` -> ``.pt2``) as the source of ``convert model``.

The program is loaded with ``torch.export.load``; its user inputs (placeholders) give the input names, dtypes
and shapes (a symbolic dimension is dynamic: ``--input`` fixes it). The fp32 ONNX model is the program
exported with ``torch.onnx.export(..., dynamo=True)`` at the fixed shapes; the source's outputs on the
user's data come from running the program itself in torch, so the fp32 check compares the exporter's ONNX
with torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from converters.byom.execute import join_batches
from converters.byom.source import SourceModel, TensorSpec, write_fixed_copy
from edge.digest import file_sha256
from edge.errors import ConversionError, InferenceError, InputError, require

#: The ONNX opset of exported programs (the face exporters' too).
OPSET = 18


def _torch() -> Any:
    return require("torch", "convert", "Reading a torch.export program (.pt2)")


def _input_specs(path: Path, program: Any) -> tuple[TensorSpec, ...]:
    torch = _torch()
    user_inputs = set(program.graph_signature.user_inputs)
    specs = []
    for node in program.graph.nodes:
        if node.op != "placeholder" or node.name not in user_inputs:
            continue
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            raise InputError(f"{path}: input {node.name!r} is not a tensor; only tensor inputs are supported")
        try:
            dtype = np.dtype(str(val.dtype).removeprefix("torch."))
        except TypeError:
            raise InputError(f"{path}: input {node.name!r} has dtype {val.dtype}, which numpy cannot hold") from None
        shape = tuple(int(d) if isinstance(d, int) else str(d) for d in val.shape)
        specs.append(TensorSpec(node.name, dtype, shape))
    if not specs:
        raise InputError(f"{path}: the program has no tensor inputs to feed")
    return tuple(specs)


@dataclass(frozen=True)
class Pt2Frontend:
    """A loaded ``torch.export`` program."""

    path: Path
    program: Any
    inputs: tuple[TensorSpec, ...]

    def write_fp32(self, inputs: Sequence[TensorSpec], out: Path) -> Path:
        """Export the program at the fixed shapes of ``inputs`` to ONNX, then fix the shapes in the file too.

        Raises:
            ConversionError: the exporter failed, or its graph's inputs are not the program's.
        """
        import onnx

        from converters.quiet import quiet_torch_export

        torch = _torch()
        example = tuple(torch.zeros(tuple(int(d) for d in s.shape), dtype=getattr(torch, str(s.dtype))) for s in inputs)
        exported = out.with_suffix(".export.onnx")
        try:
            with quiet_torch_export():
                torch.onnx.export(
                    self.program, example, str(exported), opset_version=OPSET, dynamo=True, external_data=False,
                    verbose=False,
                )  # fmt: skip
        except Exception as exc:  # the exporter raises many types; report them all as one error
            raise ConversionError(f"{self.path}: exporting the program to ONNX failed ({exc})") from exc
        proto = onnx.load(str(exported))
        exported.unlink()
        names = [i.name for i in proto.graph.input if i.name not in {t.name for t in proto.graph.initializer}]
        if names != [s.name for s in inputs]:
            raise ConversionError(
                f"{self.path}: the exported ONNX graph's inputs are {', '.join(names)}; expected the program's "
                f"{', '.join(s.name for s in inputs)}"
            )
        return write_fixed_copy(proto, inputs, out)

    def run(self, batches: Sequence[Mapping[str, np.ndarray]], threads: int) -> tuple[list[str], list[np.ndarray]]:
        """The program's outputs in torch on every batch."""
        torch = _torch()
        module = self.program.module()
        names = list(self.program.graph_signature.user_outputs)
        parts: list[list[np.ndarray]] = [[] for _ in names]
        saved_threads = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            with torch.no_grad():
                for i, feed in enumerate(batches):
                    args = [torch.from_numpy(np.ascontiguousarray(feed[s.name])) for s in self.inputs]
                    try:
                        out = module(*args)
                    except Exception as exc:  # whatever the user's program raises
                        raise InferenceError(f"{self.path}: the program failed in torch on batch {i} ({exc})") from exc
                    outs = [out] if isinstance(out, torch.Tensor) else list(out)
                    for part, value in zip(parts, outs, strict=True):
                        part.append(value.detach().numpy())
        finally:
            torch.set_num_threads(saved_threads)
        return names, join_batches(parts)


def read_pt2(path: Path) -> tuple[SourceModel, Pt2Frontend]:
    """Load a ``torch.export`` program and describe its inputs.

    Raises:
        InputError: not a loadable program (naming the file), or inputs that are not tensors.
        MissingDependencyError: torch is not installed.
    """
    torch = _torch()
    try:
        program = torch.export.load(str(path))
    except Exception as exc:  # zipfile, pickle and torch errors: no common narrower base
        raise InputError(
            f"{path}: a zip archive but not a torch.export program (.pt2), or a corrupt one ({type(exc).__name__}: "
            f"{exc})"
        ) from None
    inputs = _input_specs(path, program)
    outputs = tuple(program.graph_signature.user_outputs)
    return SourceModel(path, file_sha256(path), inputs, outputs, "pt2"), Pt2Frontend(path, program, inputs)
