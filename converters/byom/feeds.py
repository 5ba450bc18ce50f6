"""The user's calibration and evaluation tensors: one ``.npz`` file each, one array per model input
(or a folder of images: ``converters.byom.images``).

Each array holds N samples stacked on axis 0: for a model input of shape ``B x d1 x ... x dk`` (after
``--input``) the array's shape is ``N x d1 x ... x dk`` with N a multiple of B, and its dtype is the input's.
The model is fed ``N / B`` batches of B. Every input gets the same N. Floating-point data must be finite.
"""

from __future__ import annotations

import hashlib
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from converters.byom.source import TensorSpec
from edge.digest import file_sha256
from edge.errors import InputError


@dataclass(frozen=True)
class Samples:
    """Tensors read from one ``.npz`` file, checked against the model's inputs."""

    path: Path
    sha256: str
    arrays: dict[str, np.ndarray]
    count: int
    #: For an image folder (``converters.byom.images``): how the images became tensors.
    images: dict | None = None

    def batches(self, inputs: Sequence[TensorSpec]) -> list[dict[str, np.ndarray]]:
        """The feeds, one dict per batch, in file order."""
        batch = int(inputs[0].shape[0])
        return [{s.name: self.arrays[s.name][i : i + batch] for s in inputs} for i in range(0, self.count, batch)]

    def to_dict(self) -> dict:
        out = {"file": str(self.path), "sha256": self.sha256, "samples": self.count}
        return {**out, "kind": "images", "preprocessing": self.images} if self.images else out


def _open_npz(path: Path, what: str) -> dict[str, np.ndarray]:
    if not path.is_file():
        raise InputError(
            f"{what} {path}: no such file or folder; expected a .npz with one array per model input, or a folder of "
            "images"
        )
    try:
        data = np.load(path, allow_pickle=False)
        if not isinstance(data, np.lib.npyio.NpzFile):
            raise InputError(f"{what} {path}: a single .npy array; expected a .npz with one array per model input")
        with data:
            return {name: data[name] for name in data.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise InputError(f"{what} {path}: not a readable .npz file ({exc})") from None


def _expected(spec: TensorSpec) -> str:
    rest = "x".join(str(d) for d in spec.shape[1:])
    return f"Nx{rest}" if rest else "N"


def _check_array(path: Path, what: str, spec: TensorSpec, arr: np.ndarray) -> int:
    """The number of samples in ``arr``, after checking its dtype, shape and values against ``spec``."""
    where = f"{what} {path}: array {spec.name!r}"
    if arr.dtype != spec.dtype:
        raise InputError(f"{where} has dtype {arr.dtype}; expected {spec.dtype} (the model's input {spec.name!r})")
    batch = int(spec.shape[0]) if spec.shape else 1
    shape_text = "x".join(map(str, arr.shape)) or "scalar"
    if not spec.shape or arr.ndim != len(spec.shape) or tuple(arr.shape[1:]) != tuple(spec.shape[1:]):
        raise InputError(
            f"{where} has shape {shape_text}; expected {_expected(spec)} with N a multiple of {batch} "
            f"(samples stacked on axis 0; the model's input {spec.name!r} is {spec.shape_text()})"
        )
    if arr.shape[0] == 0:
        raise InputError(f"{where} holds no samples (shape {shape_text}); expected at least {batch}")
    if arr.shape[0] % batch:
        raise InputError(
            f"{where} holds {arr.shape[0]} samples; expected a multiple of {batch}, the batch of the model's "
            f"input {spec.name!r} ({spec.shape_text()})"
        )
    if np.issubdtype(arr.dtype, np.floating) and not np.isfinite(arr).all():
        bad = int((~np.isfinite(arr)).sum())
        raise InputError(f"{where} has {bad} NaN or infinite values; expected finite numbers")
    return int(arr.shape[0])


def read_samples(path: Path, inputs: Sequence[TensorSpec], what: str) -> Samples:
    """Read and check one ``.npz`` of model inputs.

    Args:
        path: the file.
        inputs: the model's inputs with fixed shapes (``source.resolve_inputs``).
        what: how messages name it, e.g. ``"--calib"``.

    Returns:
        The Samples.

    Raises:
        InputError: missing or unreadable file; a missing or extra array; wrong dtype or shape; no samples;
            a different sample count per input; NaN or infinite values.
    """
    path = Path(path)
    arrays = _open_npz(path, what)
    names = [s.name for s in inputs]
    missing = [n for n in names if n not in arrays]
    if missing:
        found = ", ".join(sorted(arrays)) or "no arrays"
        raise InputError(
            f"{what} {path}: no array named {', '.join(repr(m) for m in missing)}; expected one array per model "
            f"input ({', '.join(names)}); the file has {found}"
        )
    extra = sorted(set(arrays) - set(names))
    if extra:
        raise InputError(
            f"{what} {path}: arrays {', '.join(repr(e) for e in extra)} are no input of the model "
            f"(its inputs are {', '.join(names)})"
        )
    counts = {s.name: _check_array(path, what, s, arrays[s.name]) for s in inputs}
    if len(set(counts.values())) > 1:
        text = ", ".join(f"{n}: {c}" for n, c in counts.items())
        raise InputError(f"{what} {path}: the arrays hold different numbers of samples ({text}); expected the same N")
    return Samples(path, file_sha256(path), {n: arrays[n] for n in names}, counts[names[0]])


def _sample_digests(samples: Samples) -> list[bytes]:
    out = []
    for i in range(samples.count):
        digest = hashlib.sha256()
        for name in sorted(samples.arrays):
            digest.update(np.ascontiguousarray(samples.arrays[name][i]).tobytes())
        out.append(digest.digest())
    return out


def shared_samples(calib: Samples, evaluation: Samples) -> int:
    """How many evaluation samples also appear, byte for byte, in the calibration data."""
    seen = set(_sample_digests(calib))
    return sum(d in seen for d in _sample_digests(evaluation))


def check_disjoint(calib: Samples, evaluation: Samples) -> int:
    """Refuse evaluation data that is the calibration data; return how many samples they share.

    Raises:
        InputError: the two files are the same bytes, or every evaluation sample is a calibration sample.
    """
    if calib.sha256 == evaluation.sha256:
        raise InputError(
            f"--eval {evaluation.path} is the same data as --calib {calib.path} (sha256 {calib.sha256[:16]}...); "
            "the gate needs evaluation data disjoint from the calibration data"
        )
    shared = shared_samples(calib, evaluation)
    if shared == evaluation.count:
        raise InputError(
            f"--eval {evaluation.path}: all {shared} samples are also in --calib {calib.path}; the gate needs "
            "evaluation data disjoint from the calibration data"
        )
    return shared
