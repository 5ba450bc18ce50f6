"""Compile stage: ONNX -> ORT format, with the offline optimisations that are safe for the target's CPU.

'Fixed' optimisation bakes platform-specific layouts into the file, so the target platform is passed: an
ARM build never gets x86's NCHWc layout. The browser gets no ORT-format model. The converter is
onnxruntime's own (``python -m onnxruntime.tools.convert_onnx_models_to_ort``), run as a tool.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from converters.tools import log_tail, run_tool
from edge.errors import ConversionError
from edge.profiles import Arch, TargetProfile

#: Seconds one converter run may take (all the face nets together take a few seconds).
ORT_TIMEOUT_S = 900.0


def ort_target_platform(profile: TargetProfile) -> str:
    """The ``--target_platform`` of ORT-format builds for ``profile`` ("arm" or "amd64").

    Raises:
        ConversionError: for a profile without ORT-format builds (the browser).
    """
    platform = {Arch.AARCH64: "arm", Arch.X86_64: "amd64"}.get(profile.cpu.arch)
    if platform is None:
        raise ConversionError(
            f"{profile.source}: cpu.arch = '{profile.cpu.arch.value}' has no ORT-format build; ship the .onnx"
        )
    return platform


def to_ort_format(model_in: Path, out_dir: Path, profile: TargetProfile) -> Path:
    """Convert one model to ORT format for the profile's CPU; see ``to_ort_format_all``."""
    return to_ort_format_all([model_in], out_dir, profile)[0]


def to_ort_format_all(
    models: Sequence[Path],
    out_dir: Path,
    profile: TargetProfile,
    *,
    timeout_s: float = ORT_TIMEOUT_S,
    python: Path | None = None,
) -> list[Path]:
    """Convert models to ORT format for the profile's CPU, in one converter run (its start-up dominates).

    Args:
        models: .onnx files (distinct names).
        out_dir: where the .ort files go (created).
        profile: decides the target platform.
        timeout_s: seconds the converter may run.
        python: the interpreter whose onnxruntime converts (default: this one).

    Returns:
        The .ort files, in the order of ``models``.

    Raises:
        ConversionError: for the browser profile, or when the converter fails or runs past ``timeout_s``
            (quoting its output), or writes no file for a model.
    """
    platform = ort_target_platform(profile)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="edort-") as tmp:
        src_dir = Path(tmp) / "src"
        src_dir.mkdir()
        for model in models:
            shutil.copy(model, src_dir / Path(model).name)
        cmd = [python or sys.executable, "-m", "onnxruntime.tools.convert_onnx_models_to_ort"]
        cmd += ["--optimization_style", "Fixed", "--target_platform", platform, "--output_dir", tmp, src_dir]
        names = ", ".join(Path(m).name for m in models)
        done = run_tool(cmd, timeout_s, f"ORT-format conversion of {names} for {platform}", ConversionError)
        targets = []
        for model in models:
            produced = Path(tmp) / (Path(model).stem + ".ort")
            if not produced.is_file():
                raise ConversionError(
                    f"{model}: the ORT-format converter wrote no {produced.name}; it said:\n"
                    + log_tail(done.stdout + done.stderr)
                )
            targets.append(out_dir / produced.name)
            shutil.copy(produced, targets[-1])
    return targets
