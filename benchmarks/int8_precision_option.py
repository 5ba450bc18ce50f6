"""What onnxruntime's ``session.x64quantprecision=1`` costs on *this* CPU: the fused INT8 face embedder, both ways.

``edge.cpu`` sets the option only on x86 without VNNI, where it stops the u8s8 kernels saturating. This script
is the measurement behind leaving it off elsewhere: onnxruntime sessions over the rpi4 INT8 embedder
(``.onnx``, all graph optimisations, 1 thread) with and without the option, and fp32 for scale, interleaved
one chip at a time, CPU time per call (``time.process_time``, so other jobs on a shared machine count less);
and the largest descriptor difference between the two INT8 sessions.

    .venv/bin/python -m benchmarks run int8_precision_option [--rounds 30]

Models: the race's cached fp32 folder and rpi4 INT8 build (``benchmarks/harness/face_speed_models.py``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

NAME = "int8_precision_option"
SUMMARY = "What session.x64quantprecision=1 costs the fused INT8 embedder on this CPU"
#: the docs/benchmarks.md sections it writes (none: it prints its figures)
SECTIONS = ()


def _session(path: Path, precise: bool):
    import onnxruntime as ort

    from edge.cpu import X64_QUANT_PRECISION

    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = 1, 1
    if precise:
        options.add_session_config_entry(X64_QUANT_PRECISION, "1")
    return ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args(argv)
    from benchmarks.harness.face_speed_models import CACHE, build_fp32, build_int8, eval_photos, real_chips
    from benchmarks.harness.report import machine_line
    from converters.face.quantize import DEFAULT_CALIBRATION_COUNT
    from edge.face import models as face_models
    from edge.profiles import load_profile

    CACHE.mkdir(parents=True, exist_ok=True)
    fp32_dir = build_fp32(CACHE)
    folder, _ = build_int8(fp32_dir, load_profile("rpi4"), CACHE, DEFAULT_CALIBRATION_COUNT, lambda _line: None)
    report = json.loads((folder / "quant_report.json").read_text(encoding="utf-8"))
    int8 = folder / report["onnx_files"]["embedder"]["file"]
    fp32 = face_models.read_models_folder(fp32_dir).model_path(face_models.FaceModel.EMBEDDER.role)
    chips = real_chips(fp32_dir, eval_photos(), 8).transpose(0, 3, 1, 2).astype(np.float32)  # NCHW, raw 0..255
    sessions = {"fp32": _session(fp32, False), "int8, defaults": _session(int8, False),
                "int8, x64quantprecision=1": _session(int8, True)}  # fmt: skip
    times: dict[str, list[float]] = {name: [] for name in sessions}
    out: dict[str, list[np.ndarray]] = {name: [] for name in sessions}
    for _round in range(args.rounds):
        for chip in chips:
            for name, session in sessions.items():
                start = time.process_time()
                got = session.run(None, {"chip": chip[None]})[0]
                times[name].append(time.process_time() - start)
                out[name].append(got)
    diff = np.abs(np.concatenate(out["int8, defaults"]) - np.concatenate(out["int8, x64quantprecision=1"])).max()
    fp32_ms = statistics.median(times["fp32"]) * 1e3
    print(f"`.venv/bin/python -m benchmarks run int8_precision_option --rounds {args.rounds}` — {machine_line()}\n")
    print("| session | ms of CPU a face (median) | vs fp32 |\n|---|---:|---:|")
    for name, t in times.items():
        ms = statistics.median(t) * 1e3
        print(f"| {name} | {ms:.2f} | {ms / fp32_ms:.2f}x |")
    print(f"\nmax |descriptor difference| between the two INT8 sessions: {diff:.2e} ({len(chips)} chips)")
    return 0
