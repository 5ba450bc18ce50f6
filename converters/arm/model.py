"""A passed ``convert model`` folder on an emulated Pi core, against the gate's arithmetic on the host.

The guest runs the file the folder ships (models.json: an INT8 ``.ort``, or fp32) with the device runtime
(``scripts/arm/run_model.py --inputs --save``) on the first batch of the folder's evaluation data; the host
runs what the gate ran on the same batch: the INT8 ``.onnx`` beside the ``.ort`` with onnxruntime's graph
optimisations off (QDQ as dequantize -> float op -> quantize, whatever INT8 kernels the host has), or the
fp32 file. ``compare`` says how far the two are apart per output: max |difference| against the host output's
largest magnitude, and the smallest cosine between the rows (one row per sample).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from converters.arm.cost import RUN_MODEL
from converters.arm.guest import ArmGuest
from converters.package.user_model import ModelFolder, read_model_folder
from edge.cosine import row_cosines
from edge.errors import InputError


@dataclass(frozen=True)
class OutputComparison:
    """One output of the guest against the host."""

    name: str
    shape: tuple[int, ...]
    max_abs_diff: float
    max_abs_host: float
    min_row_cosine: float

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def compare(host: dict[str, np.ndarray], guest: dict[str, np.ndarray]) -> list[OutputComparison]:
    """Each output of ``host`` against the same-named one of ``guest``.

    Raises:
        InputError: the two do not have the same outputs and shapes.
    """
    if sorted(host) != sorted(guest) or any(host[k].shape != guest[k].shape for k in host):
        shapes = ({k: v.shape for k, v in host.items()}, {k: v.shape for k, v in guest.items()})
        raise InputError(f"host outputs {shapes[0]} != guest outputs {shapes[1]}; expected the same model's")
    out = []
    for name in sorted(host):
        h, g = host[name].astype(np.float64), guest[name].astype(np.float64)
        cos = float(row_cosines(h, g).min()) if h.ndim >= 1 and h.shape[0] else 1.0
        diff = float(np.max(np.abs(h - g))) if h.size else 0.0
        out.append(OutputComparison(name, tuple(h.shape), diff, float(np.max(np.abs(h))) if h.size else 0.0, cos))
    return out


def gate_files(model: ModelFolder) -> tuple[Path, Path, Path]:
    """(the shipped file, the file the gate ran, the evaluation .npz) of a read, passed folder."""
    shipped = model.folder / model.models["models"][0]["file"]
    gated = shipped.with_suffix(".onnx") if shipped.suffix == ".ort" else shipped
    return shipped, gated, evaluation_file(model)


def evaluation_file(model: ModelFolder) -> Path:
    """The ``.npz`` a read folder's gate was evaluated on (report.json ``evaluation.file``).

    Raises:
        InputError: it is not a ``.npz``, or not on this host.
    """
    evaluation = Path(str(model.report.get("evaluation", {}).get("file", "")))
    if evaluation.suffix != ".npz" or not evaluation.is_file():
        raise InputError(
            f"{model.folder}: its evaluation data {evaluation} is not a .npz here; expected convert model's --eval file"
        )
    return evaluation


def check_model_folder(folder: Path | ModelFolder, guest: ArmGuest, work: Path) -> list[OutputComparison]:
    """Run a passed ``convert model`` folder's shipped file in ``guest`` and the gate's arithmetic on the host
    on the first batch of its evaluation data; compare (see the module doc). ``folder`` may be one
    ``read_model_folder`` already read (and hashed), to check it on several cores without reading it again.

    Raises:
        InputError: not a passed folder, or its evaluation data is not a .npz on this host.
        InferenceError: the guest run failed.
    """
    from edge.runtime import first_batch, open_model
    from edge.runtime.base import LoadOptions
    from edge.runtime.ort_session import Optimization

    passed = folder if isinstance(folder, ModelFolder) else read_model_folder(Path(folder))  # gate passed, unchanged
    shipped, gated, evaluation = gate_files(passed)
    work = Path(work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    out = work / f"{guest.cpu.value}-{shipped.stem}.npz"
    guest.run(RUN_MODEL, ["--model", str(shipped.resolve()), "--runs", "1", "--inputs", str(evaluation.resolve()),
                          "--save", str(out)])  # fmt: skip
    with np.load(out, allow_pickle=False) as data:
        emulated = {k: data[k] for k in data.files}
    with open_model(gated, threads=1, options=LoadOptions(Optimization.NONE)) as model, np.load(evaluation) as data:
        host = {k: np.asarray(v) for k, v in model.run(first_batch(str(evaluation), model.inputs, data)).items()}
    comparisons = compare(host, emulated)
    (work / f"{guest.cpu.value}-{shipped.stem}.json").write_text(
        json.dumps([c.to_dict() for c in comparisons], indent=2) + "\n", encoding="utf-8"
    )
    return comparisons
