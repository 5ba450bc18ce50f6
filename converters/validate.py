"""Check a converted model against its source: run both on the same seeded inputs, collect *every* output
that is off, and raise one error that lists them all (the optimum-onnx way)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edge.errors import InferenceError, ValidationError


@dataclass(frozen=True)
class OutputCheck:
    """How one output of a converted model compares with its source."""

    model: str
    output: str
    shape: tuple[int, ...]
    max_abs_diff: float
    tolerance: float

    @property
    def ok(self) -> bool:
        return bool(self.max_abs_diff <= self.tolerance)

    def to_dict(self) -> dict:
        return {
            "model": self.model,
            "output": self.output,
            "shape": list(self.shape),
            "max_abs_diff": float(self.max_abs_diff),
            "tolerance": self.tolerance,
            "ok": self.ok,
        }


def run_onnx(path: Path, feeds: Mapping[str, np.ndarray], threads: int = 1) -> dict[str, np.ndarray]:
    """Run an ONNX model once on the CPU and return its outputs by name.

    Raises:
        InferenceError: naming the file when onnxruntime cannot load or run it.
    """
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    try:
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        return dict(zip(names, session.run(names, dict(feeds)), strict=True))
    except Exception as exc:  # onnxruntime raises its own untyped exceptions
        raise InferenceError(f"{path}: onnxruntime could not run the model ({exc})") from exc


def compare_outputs(
    model: str,
    converted: Mapping[str, np.ndarray],
    reference: Mapping[str, np.ndarray],
    tolerance: float,
) -> list[OutputCheck]:
    """Compare outputs by name; a missing output or a shape mismatch counts as an infinite difference."""
    checks = []
    for name, ref in reference.items():
        got = converted.get(name)
        if got is None or got.shape != ref.shape:
            diff = float("inf")
            shape = tuple(ref.shape)
        else:
            diff = float(np.max(np.abs(got.astype(np.float64) - ref.astype(np.float64)))) if ref.size else 0.0
            shape = tuple(ref.shape)
        checks.append(OutputCheck(model, name, shape, diff, tolerance))
    return checks


def check_against_source(
    model: str,
    onnx_path: Path,
    source_fn: Callable[[Mapping[str, np.ndarray]], Mapping[str, np.ndarray]],
    feeds: Mapping[str, np.ndarray],
    tolerance: float,
) -> list[OutputCheck]:
    """Run the converted ONNX model and the source function on the same inputs; return every comparison."""
    return compare_outputs(model, run_onnx(onnx_path, feeds), source_fn(feeds), tolerance)


def raise_if_off(checks: list[OutputCheck], what: str) -> None:
    """Raise one ValidationError listing every output whose difference exceeds its tolerance."""
    bad = [c for c in checks if not c.ok]
    if not bad:
        return
    lines = [
        f"  {c.model}: output {c.output!r} shape {list(c.shape)} max |diff| {c.max_abs_diff:.3g} "
        f"> tolerance {c.tolerance:g}"
        for c in bad
    ]
    raise ValidationError(f"{what}: {len(bad)} output(s) differ from the source model:\n" + "\n".join(lines))
