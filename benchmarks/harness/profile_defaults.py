"""Each profile's default face folder as the benchmarks build it: what ``edge-deploy convert face --target NAME``
with no options ships (its precision, its ``runtime.face_detector`` on its ``runtime.face_detector_runtime``, and
with ``face_formats = "tflite"`` its embedder's TFLite twin on LiteRT), made from the race's cached builds
(``face_speed_models``) and cached beside them in ``.cache/bench``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from benchmarks.harness.face_speed_models import CACHE, build_fp32, build_int8
from edge.errors import ConversionError
from edge.profiles import Arch, ModelFormats, Precision, TargetProfile, load_all, load_profile
from edge.progress import ProgressFn


def pi_profiles() -> list[str]:
    """The shipped profiles of 64-bit ARM boards (the Pis and generic aarch64), by name."""
    return [p.name for p in load_all() if p.cpu.arch is Arch.AARCH64]


def describe(profile: TargetProfile) -> str:
    """What the default folder runs, for a row label: precision, detector (its runtime), embedder format."""
    r = profile.runtime
    parts = [r.precision.value.upper(), f"{r.face_detector.value} on {r.face_detector_runtime.value}"]
    if r.face_formats is ModelFormats.TFLITE:
        parts.append("embedder on LiteRT")
    return ", ".join(parts)


def _base(profile: TargetProfile, progress: ProgressFn) -> Path:
    """The profile's precision over the race's fp32 folder; with ``face_formats = "tflite"`` the INT8 copy that
    runs its embedder's twin (``arm_frames.with_litert_embedder``)."""
    from converters.face.quantize import DEFAULT_CALIBRATION_COUNT

    fp32 = build_fp32(CACHE, progress)
    precision = profile.runtime.precision
    if precision is Precision.FP32:
        return fp32
    if precision is not Precision.INT8:
        raise ConversionError(f"{profile.name}: runtime.precision = {precision.value!r}; the race builds fp32 or int8")
    int8, _ = build_int8(fp32, profile, CACHE, DEFAULT_CALIBRATION_COUNT, progress)
    if profile.runtime.face_formats is not ModelFormats.TFLITE:
        return int8
    from benchmarks.harness.arm_frames import with_litert_embedder
    from benchmarks.harness.face_speed_models import race_models

    twin = race_models(profile, DEFAULT_CALIBRATION_COUNT, progress).tflite["int8"]
    return with_litert_embedder(int8, twin, progress)


def default_folder(name: str, progress: ProgressFn) -> Path:
    """Profile ``name``'s default face folder (module docstring), built once."""
    from converters.face.blazeface import add_profile_detector
    from edge.face.models import read_models_folder

    profile = load_profile(name)
    r = profile.runtime
    base = _base(profile, progress)
    folder = base.with_name(f"{base.name}-default-{r.face_detector.value}-{r.face_detector_runtime.value}")
    if folder.is_dir() and read_models_folder(folder).detector is r.face_detector:  # named by its settings
        return folder
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(base, tmp)
    add_profile_detector(tmp, r.face_detector, progress, r.face_detector_runtime.value)
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    return folder
