"""The face speed race: dlib's ``compute_face_descriptor`` against our embedder on ORT and LiteRT, fp32 and INT8.

All contenders run in one process, on the same real aligned chips (cut by the fp32 device pipeline from
the evaluation photos), at batch 1, in interleaved rounds: each round runs every contender over every
chip, starting one contender later than the round before, so drift on a shared machine hits all alike.
Our contenders run at 1 and 2 threads; dlib at whatever it uses (measured: process CPU time over wall
time). Before any timing, every contender's descriptors are compared with dlib's on every chip, so the
speed reported is that of a correct model; the first call (and the load) is reported apart. Then model
sizes, and the peak RSS of a fresh process per variant that loads the full pipeline and runs it on photos.

    .venv/bin/python -m benchmarks run face_speed                # full run: docs/benchmarks.md + docs/img
    .venv/bin/python -m benchmarks run face_speed --quick        # a smoke run; prints, writes no docs

Models are built once and cached under ``.cache/bench/`` (``benchmarks/harness/face_speed_models.py``).
Host side: imports converters; nothing here runs on the device.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from benchmarks.harness.face_speed_models import (
    CACHE,
    RaceModels,
    eval_photos,
    race_models,
    real_chips,
    rss_child,
)
from benchmarks.harness.procstat import thread_count
from benchmarks.harness.rounds import interleaved
from edge.face.types import DLIB_SAME_PERSON_THRESHOLD
from edge.profiles import TargetProfile, load_profile

NAME = "face_speed"
SUMMARY = "Face descriptor speed: dlib against ours on ORT and LiteRT, fp32 and INT8"
#: the docs/benchmarks.md sections it writes
SECTIONS = ("face-speed",)

DLIB = "dlib"
#: Our contenders: (name, runtime, precision, key of the model file in RaceModels).
OURS = (
    ("ORT fp32", "onnxruntime", "fp32", "onnx_fp32"),
    ("ORT INT8", "onnxruntime", "int8", "onnx_int8"),
    ("LiteRT fp32", "litert", "fp32", "tflite:fp32"),
    ("LiteRT INT8", "litert", "int8", "tflite:int8"),
)
#: Fresh processes per peak-RSS variant; the median is reported (allocator and page-cache noise).
RSS_REPEATS = 3
#: CPU flags that decide whether x86 has fast INT8 dot products.
INT8_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")


@dataclass
class Contender:
    """One runner of the race: a name, a thread count, and a call from one chip to one descriptor."""

    name: str
    runtime: str
    precision: str
    threads: int | None  # None: dlib, which picks its own
    describe: Callable[[np.ndarray], np.ndarray]
    close: Callable[[], None]
    model: Path
    load_ms: float = 0.0
    first_ms: float = 0.0
    times_ms: list[float] = field(default_factory=list)
    cpu_s: float = 0.0
    wall_s: float = 0.0
    threads_started: int = 0

    @property
    def label(self) -> str:
        return self.name if self.threads is None else f"{self.name} ×{self.threads}"


def _dlib_contender(path: Path) -> Contender:
    import dlib

    encoder = dlib.face_recognition_model_v1(str(path))

    def describe(chip: np.ndarray) -> np.ndarray:
        return np.asarray(encoder.compute_face_descriptor(chip), dtype=np.float32)

    return Contender(DLIB, "dlib", "fp32", None, describe, lambda: None, path)


def _ours_contender(name: str, runtime: str, precision: str, path: Path, threads: int) -> Contender:
    """Our embedder through ``edge.runtime.open_model`` (what the device uses), one chip per call."""
    from converters.tflite.convert import dequantize, quantize
    from edge.runtime import open_model

    model = open_model(path, threads=threads, backend=runtime)
    spec, out = model.inputs[0], model.outputs[0]
    nhwc = runtime == "litert"  # onnx2tf turned the input to NHWC

    def describe(chip: np.ndarray) -> np.ndarray:
        x = chip[None].astype(np.float32) if nhwc else chip.transpose(2, 0, 1)[None].astype(np.float32)
        if spec.quantization is not None:
            x = quantize(x, *spec.quantization, spec.dtype)
        y = model.run({spec.name: x})[out.name]
        return (dequantize(y, *out.quantization) if out.quantization is not None else y)[0].astype(np.float32)

    return Contender(name, runtime, precision, threads, describe, model.close, path)


def _model_file(models: RaceModels, key: str) -> Path:
    if key.startswith("tflite:"):
        return models.tflite[key.split(":", 1)[1]]
    return getattr(models, key)


def open_contenders(models: RaceModels, dlib_model: Path, threads: tuple[int, ...], chip: np.ndarray):
    """Load every contender and time its load and its first call (on ``chip``) apart from the race."""
    makers = [lambda: _dlib_contender(dlib_model)]
    for t in threads:
        for name, runtime, precision, key in OURS:
            path = _model_file(models, key)
            makers.append(lambda n=name, r=runtime, p=precision, f=path, t=t: _ours_contender(n, r, p, f, t))
    contenders = []
    for make in makers:
        before = thread_count()
        t0 = time.perf_counter()
        c = make()
        t1 = time.perf_counter()
        c.describe(chip)
        c.load_ms, c.first_ms = (t1 - t0) * 1e3, (time.perf_counter() - t1) * 1e3
        c.threads_started = thread_count() - before
        contenders.append(c)
    return contenders


def agreement(ref: np.ndarray, got: np.ndarray) -> dict:
    """How far ``got`` descriptors are from dlib's ``ref`` ([N, 128] each), and whether decisions agree.

    Decisions: for every pair of chips, "same person" when the Euclidean distance is below dlib's 0.6;
    ``flips`` lists the pairs decided otherwise than dlib, with both distances.
    """
    ref64, got64 = ref.astype(np.float64), got.astype(np.float64)
    norms = np.linalg.norm(ref64, axis=1) * np.linalg.norm(got64, axis=1)
    cos = np.sum(ref64 * got64, 1) / np.maximum(norms, 1e-30)
    pairs = list(itertools.combinations(range(len(ref)), 2))
    flips = []
    for i, j in pairs:
        d_ref, d_got = np.linalg.norm(ref64[i] - ref64[j]), np.linalg.norm(got64[i] - got64[j])
        if (d_ref < DLIB_SAME_PERSON_THRESHOLD) != (d_got < DLIB_SAME_PERSON_THRESHOLD):
            flips.append({"chips": [i, j], "dlib_distance": float(d_ref), "distance": float(d_got)})
    agree = len(pairs) - len(flips)
    return {
        "chips": len(ref),
        "max_abs_diff": float(np.max(np.abs(ref64 - got64))),
        "max_distance": float(np.max(np.linalg.norm(ref64 - got64, axis=1))),
        "mean_cosine": float(np.mean(cos)),
        "min_cosine": float(np.min(cos)),
        "pairs": len(pairs),
        "decision_agreement": agree / len(pairs) if pairs else 1.0,
        "flips": flips,
    }


def gate(c: Contender, agree: dict, profile: TargetProfile, quant_passed: bool) -> tuple[bool, str]:
    """The accuracy bar a contender must pass for its speed to count, and why it passed or failed.

    fp32: every descriptor within ``embed_max_abs_diff_fp32`` of dlib's. INT8: mean cosine to dlib and
    same/different decisions at least the profile's INT8 thresholds; ORT INT8 also needs the build's own gate.
    """
    t = profile.thresholds
    if c.name == DLIB:
        return True, "reference"
    if c.precision == "fp32":
        ok = agree["max_abs_diff"] <= t.embed_max_abs_diff_fp32
        return ok, f"max|diff| {'<=' if ok else '>'} {t.embed_max_abs_diff_fp32:g}"
    problems = []
    if agree["mean_cosine"] < t.embed_mean_cosine:
        problems.append(f"cos {agree['mean_cosine']:.5f} < {t.embed_mean_cosine:g}")
    if agree["decision_agreement"] < t.embed_decision_agreement:
        problems.append(f"decisions {agree['decision_agreement']:.4f} < {t.embed_decision_agreement:g}")
    if c.runtime == "onnxruntime" and not quant_passed:
        problems.append("quantize_face_models gate failed")
    return not problems, "; ".join(
        problems
    ) or f"cos >= {t.embed_mean_cosine:g}, decisions >= {t.embed_decision_agreement:g}"


def check_all(contenders: list[Contender], chips: np.ndarray, profile: TargetProfile, quant_passed: bool) -> dict:
    """Every contender's descriptors on every chip against dlib's (contenders[0])."""
    outputs = {c.label: np.stack([c.describe(chip) for chip in chips]) for c in contenders}
    ref = outputs[contenders[0].label]
    result = {}
    for c in contenders:
        agree = agreement(ref, outputs[c.label])
        agree["gate_passed"], agree["gate"] = gate(c, agree, profile, quant_passed)
        result[c.label] = agree
    return result


def race(contenders: list[Contender], chips: np.ndarray, rounds: int, progress: Callable[[str], None]) -> None:
    """Interleaved rounds; each chip's time goes into ``times_ms``, CPU and wall time add up per contender."""
    for r, order in interleaved(contenders, rounds):
        for c in order:
            cpu0, wall0 = time.process_time(), time.perf_counter()
            for chip in chips:
                t0 = time.perf_counter_ns()
                c.describe(chip)
                c.times_ms.append((time.perf_counter_ns() - t0) / 1e6)
            c.cpu_s += time.process_time() - cpu0
            c.wall_s += time.perf_counter() - wall0
        progress(f"round {r + 1}/{rounds} done")


def speed_rows(contenders: list[Contender], checks: dict) -> list[dict]:
    """One row per contender: median ms per chip (quartiles), ratios to dlib and to fp32 on the same runtime."""
    med = {c.label: statistics.median(c.times_ms) for c in contenders}
    dlib_ms = med[contenders[0].label]
    rows = []
    for c in contenders:
        q1, _, q3 = statistics.quantiles(c.times_ms, n=4)
        twin = next(
            (o for o in contenders if o.runtime == c.runtime and o.threads == c.threads and o.precision == "fp32"), c
        )
        rows.append(
            {
                "label": c.label,
                "name": c.name,
                "runtime": c.runtime,
                "precision": c.precision,
                "threads": c.threads,
                "model": str(c.model),
                "load_ms": c.load_ms,
                "first_ms": c.first_ms,
                "ms": med[c.label],
                "q1": q1,
                "q3": q3,
                "samples": len(c.times_ms),
                "cpu_per_wall": c.cpu_s / c.wall_s if c.wall_s else 0.0,
                "threads_started": c.threads_started,
                "speedup_vs_dlib": dlib_ms / med[c.label],
                "vs_fp32": med[c.label] / med[twin.label],
                **{k: v for k, v in checks[c.label].items()},
            }
        )
    return rows


def sizes(models: RaceModels, dlib_model: Path) -> dict:
    """Bytes of every embedder file and of the whole fp32 and INT8 model folders."""
    from edge.face import models as face_models

    def folder_total(folder: Path) -> int:
        return sum(e.size for e in face_models.read_models_folder(folder).entries.values())

    embedder = {
        "dlib .dat": dlib_model.stat().st_size,
        "ONNX fp32": models.onnx_fp32.stat().st_size,
        "ONNX INT8 (QDQ)": models.onnx_int8.stat().st_size,
        "ORT format INT8 (shipped)": models.ort_int8.stat().st_size,
        "TFLite fp32": models.tflite["fp32"].stat().st_size,
        "TFLite INT8": models.tflite["int8"].stat().st_size,
        "TFLite INT8 float I/O": models.tflite["int8_float_io"].stat().st_size,
    }
    return {
        "embedder": embedder,
        "folder_fp32": folder_total(models.fp32_dir),
        "folder_int8": folder_total(models.int8_dir),
    }


def peak_rss(models: RaceModels, photos: list[np.ndarray], chips: np.ndarray, threads: int, progress) -> dict:
    """Peak RSS (KiB) of a fresh process per variant that loads its pipeline and runs it on ``photos``.

    Also, apart, processes that load only the embedder and describe ``chips``: what the model itself costs.
    """
    photos_npz, chips_npz = CACHE / "rss_photos.npz", CACHE / "rss_chips.npz"
    np.savez(photos_npz, **{f"p{i:03d}": p for i, p in enumerate(photos)})
    np.savez(chips_npz, **{f"c{i:03d}": c for i, c in enumerate(chips)})
    variants = {
        "baseline (the pipeline's imports, no model)": (["baseline"], photos_npz),
        "fp32 pipeline (ONNX)": (["pipeline", "--folder", str(models.fp32_dir)], photos_npz),
        "INT8 pipeline (shipped ORT files)": (["pipeline", "--folder", str(models.int8_dir)], photos_npz),
        "dlib (face_recognition's pipeline)": (["dlib"], photos_npz),
        "embedder only, fp32 ONNX": (["embedder", "--model", str(models.onnx_fp32)], chips_npz),
        "embedder only, INT8 (shipped ORT file)": (["embedder", "--model", str(models.ort_int8)], chips_npz),
    }
    out = {}
    for name, (args, npz) in variants.items():
        progress(f"peak RSS: {name} ({RSS_REPEATS} processes)")
        runs = [rss_child(args, npz, threads) for _ in range(RSS_REPEATS)]
        peaks = sorted(r["vmhwm_kib"] for r in runs)
        out[name] = {**runs[0], "vmhwm_kib": peaks[len(peaks) // 2], "vmhwm_runs_kib": peaks}
    return out


def cpu_int8_note() -> str:
    """Which fast-INT8 flags this CPU reports in /proc/cpuinfo (they decide ORT's and XNNPACK's int8 kernels)."""
    try:
        flags = next(
            (
                line.split(":", 1)[1].split()
                for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("flags")
            ),
            [],
        )
    except OSError:
        return "CPU flags unknown (/proc/cpuinfo unreadable)."
    found = [f for f in INT8_FLAGS if f in flags]
    has_avx2 = "avx2" in flags
    if found:
        return (
            f"This host's CPU reports {', '.join(found)}: it has INT8 dot-product instructions, which ORT's and "
            "XNNPACK's int8 kernels use, so INT8 can beat fp32 here (see 'time vs fp32'); on an AVX2-only host "
            "it gains little."
        )
    return f"This host's CPU reports no VNNI ({'AVX2' if has_avx2 else 'no AVX2'}): INT8 gains little over fp32 here."


def dlib_threads_note(rows: list[dict]) -> str:
    """What dlib ran on: its build flags, the threads its load and first call started, its CPU / wall time."""
    import dlib

    blas = getattr(dlib, "DLIB_USE_BLAS", "?")
    env = {k: os.environ[k] for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OMP_NUM_THREADS") if k in os.environ}
    return (
        f"dlib {dlib.__version__} (dlib-bin), built with DLIB_USE_BLAS={blas}; loading it and its first "
        f"descriptor started {rows[0]['threads_started']} thread(s) in this process, and its CPU time / wall time "
        f"in the race was {rows[0]['cpu_per_wall']:.2f} (at most 1.0 for one thread; less when the machine is "
        f"shared). {_dlib_thread_verdict(rows[0])} Environment left as found: "
        f"{env or 'no OPENBLAS_*/OMP_* variable set'}."
    )


def _dlib_thread_verdict(row: dict) -> str:
    if row["threads_started"] == 0 and row["cpu_per_wall"] <= 1.1:
        return "So dlib runs on the calling thread only: one row, comparable with our 1-thread rows."
    return "So dlib uses more than one thread here: compare it with our 2-thread rows."


def run_race(profile: TargetProfile, rounds: int, n_chips: int, rss_photos: int, calibration: int, progress) -> dict:
    """Build or reuse the models, check, race, measure sizes and peak RSS; return everything as a dict."""
    from converters.face.reference import dlib_model_path

    models = race_models(profile, calibration, progress)
    photos = eval_photos()
    chips = real_chips(models.fp32_dir, photos, n_chips)
    progress(f"{len(chips)} real chips; loading {1 + 2 * len(OURS)} contenders")
    dlib_model = dlib_model_path("embedder")
    contenders = open_contenders(models, dlib_model, (1, 2), chips[0])
    try:
        q = models.quant_report
        checks = check_all(contenders, chips, profile, q["passed"])
        progress(f"descriptors checked against dlib on {len(chips)} chips; racing {rounds} rounds")
        race(contenders, chips, rounds, progress)
        rows = speed_rows(contenders, checks)
    finally:
        for c in contenders:
            c.close()
    e = q["embedder"]
    gate_text = (
        f"{'passed' if q['passed'] else 'FAILED: ' + '; '.join(q['failures'])} (embedder cosine to fp32 mean "
        f"{e['cosine_mean']:.5f}, decisions agree {e['decisions']['agreement']:.4f} of {e['decisions']['pairs']} "
        f"pairs on the evaluation set; {q['calibration']['images']} calibration images)"
    )
    return {
        "params": {
            "rounds": rounds,
            "chips": len(chips),
            "rss_photos": rss_photos,
            "rss_threads": 1,
            "target": profile.name,
            "calibration": calibration,
            "load": os.getloadavg()[0],
            "cores": len(os.sched_getaffinity(0)),
        },
        "speed": rows,
        "sizes": sizes(models, dlib_model),
        "rss": peak_rss(models, [rgb for _n, rgb in photos[:rss_photos]], chips, 1, progress),
        "dlib_note": dlib_threads_note(rows),
        "int8_source": f"converters.face.quantize.quantize_face_models(..., {profile.name}, int8) (static QDQ, "
        f"{q['settings']['embedder']['calibration']} calibration)",
        "quant_gate": gate_text,
        "cpu_note": cpu_int8_note(),
    }


def main(argv: list[str] | None = None) -> int:
    from benchmarks.harness import face_speed_report as report
    from benchmarks.harness.report import machine_line, publish

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10, help="interleaved rounds (default 10)")
    parser.add_argument("--chips", type=int, default=20, help="real chips per round (default 20)")
    parser.add_argument("--rss-photos", type=int, default=12, help="photos the peak-RSS processes run on")
    parser.add_argument("--target", default="rpi4", help="profile of the INT8 build and its gate (default rpi4)")
    parser.add_argument("--calibration", type=int, default=200, help="calibration images of the INT8 build")
    parser.add_argument("--quick", action="store_true", help="2 rounds, 6 chips, 3 photos; prints, writes no docs")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.chips, args.rss_photos = 2, 6, 3
    if min(args.rounds, args.chips, args.rss_photos) < 1 or args.chips < 2:
        parser.error("--rounds and --rss-photos must be >= 1 and --chips >= 2")
    start = time.perf_counter()

    def progress(msg: str) -> None:
        print(f"[{time.perf_counter() - start:6.1f} s] {msg}", file=sys.stderr, flush=True)

    result = run_race(load_profile(args.target), args.rounds, args.chips, args.rss_photos, args.calibration, progress)
    command = ".venv/bin/python -m benchmarks run face_speed" + "".join(
        f" --{k} {v}" for k, v in (("rounds", args.rounds), ("chips", args.chips), ("rss-photos", args.rss_photos))
    )
    if args.target != "rpi4" or args.calibration != 200:
        command += f" --target {args.target} --calibration {args.calibration}"
    md = report.markdown(result, command, machine_line(), "img/face_speed.png")
    _, result["goals"] = report.goals(result["speed"], result["sizes"], result["rss"])
    publish("face_speed", md, result, CACHE, None if args.quick else lambda png: report.plot(result["speed"], png))
    return 0
