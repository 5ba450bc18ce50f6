"""``edge-deploy bench``: latency statistics of one model on this board, MLPerf SingleStream style.

One query at a time: the first inference is timed and reported apart (it pays for lazy initialisation),
then ``warmup`` untimed runs, then timed runs until both ``count`` runs and ``min_duration_s`` seconds are
done. Reported: p50/p90/p99/mean/std/min/max latency, throughput, the process's peak RSS and the SoC
state (temperature, clock, throttling) before and after. The PNG plot lives in ``edge.bench_plot``.
"""

from __future__ import annotations

import json
import math
import resource
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from edge.board import BoardInfo, SocState, read_soc_state
from edge.cpu import Int8Kernels, int8_kernels
from edge.digest import file_sha256
from edge.errors import InputError
from edge.runtime.base import Model, TensorSpec

SCHEMA_VERSION = 1
PERCENTILES = (50, 90, 99)


# --- inputs ----------------------------------------------------------------------------------------------


def parse_shape_overrides(items: Iterable[str]) -> dict[str, tuple[int, ...]]:
    """Parse ``["input=1x3x150x150", ...]`` into ``{"input": (1, 3, 150, 150)}``.

    Raises:
        InputError: for an item that is not ``NAME=D1xD2x...`` with positive whole numbers, or a name
            given twice.
    """
    shapes: dict[str, tuple[int, ...]] = {}
    for item in items:
        name, sep, dims = item.partition("=")
        name = name.strip()
        try:
            shape = tuple(int(d) for d in dims.strip().lower().split("x"))
        except ValueError:
            shape = ()
        if not sep or not name or not shape or min(shape) < 1:
            raise InputError(f"shape {item!r}: expected NAME=D1xD2x... with whole numbers >= 1, e.g. input=1x3x150x150")
        if name in shapes:
            raise InputError(f"shape {item!r}: input {name!r} is given twice")
        shapes[name] = shape
    return shapes


def resolve_shape(spec: TensorSpec, override: tuple[int, ...] | None = None) -> tuple[int, ...]:
    """The concrete shape to feed ``spec``: its fixed dims, dynamic ones from ``override``.

    Raises:
        InputError: if the override contradicts a fixed dim or has the wrong rank, or a dynamic dim is
            left unresolved (telling the user how to pass it).
    """
    if override is not None:
        if len(override) != len(spec.shape) or any(
            isinstance(want, int) and want != got for want, got in zip(spec.shape, override, strict=False)
        ):
            raise InputError(
                f"shape {spec.name}={'x'.join(map(str, override))} does not fit input {spec.name!r} {spec.describe()}"
            )
        return override
    if not spec.is_static:
        example = "x".join(str(d) if isinstance(d, int) else "1" for d in spec.shape)
        raise InputError(
            f"input {spec.name!r} {spec.describe()} has dynamic dimensions; pass its shape, e.g. "
            f"--shape {spec.name}={example}"
        )
    return tuple(int(d) for d in spec.shape)  # type: ignore[arg-type]


def _random_tensor(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if np.issubdtype(dtype, np.floating):
        return rng.random(size=shape, dtype=np.float32).astype(dtype)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        # small non-negative values: valid token ids, indices and quantized pixels alike
        return rng.integers(max(info.min, 0), min(info.max, 100) + 1, size=shape).astype(dtype)
    raise InputError(f"cannot make random data of dtype {dtype.name}; supported: bool, ints, floats")


@dataclass(frozen=True)
class BenchTarget:
    """What ``bench PATH`` times: a model file, and the ``.npz`` whose first batch feeds it (None: random)."""

    model: Path
    inputs_npz: Path | None = None

    def describe(self) -> str:
        return f"the first batch of {self.inputs_npz}" if self.inputs_npz else "seeded random values"


def bench_target(path: Path) -> BenchTarget:
    """``path`` as a model file, or a ``convert model`` folder: the file its models.json ships, fed the first
    batch of the evaluation ``.npz`` its report.json names when that file is here (on a device it is not:
    random values then). Reads JSON only, so it works with the device extra.

    Raises:
        InputError: a folder without models.json, or whose models.json lists other than one model file.
    """
    path = Path(path)
    if not path.is_dir():
        return BenchTarget(path)
    try:
        models = json.loads((path / "models.json").read_text(encoding="utf-8")).get("models")
    except (OSError, ValueError, AttributeError) as exc:
        raise InputError(f"{path}: a folder without a readable models.json ({exc}); give a model file") from exc
    files = [m.get("file") for m in models if isinstance(m, dict)] if isinstance(models, list) else []
    if len(files) != 1 or not isinstance(files[0], str):
        raise InputError(
            f"{path / 'models.json'}: lists {len(files)} models ({', '.join(map(str, files))}); bench times one: give "
            "its file, or a convert model folder"
        )
    try:
        evaluation = json.loads((path / "report.json").read_text(encoding="utf-8"))["evaluation"]["file"]
    except (OSError, ValueError, KeyError, TypeError):
        evaluation = None
    npz = Path(evaluation) if isinstance(evaluation, str) and evaluation.endswith(".npz") else None
    return BenchTarget(path / files[0], npz if npz is not None and npz.is_file() else None)


def make_inputs(
    specs: Iterable[TensorSpec],
    shapes: Mapping[str, tuple[int, ...]] | None = None,
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """Seeded random inputs matching ``specs`` (floats in [0, 1), integers in [0, 100]).

    Args:
        specs: the model's inputs (``model.inputs``).
        shapes: shapes for inputs with dynamic dims (see ``parse_shape_overrides``).
        seed: the random seed; the same seed gives the same tensors.

    Raises:
        InputError: for a shape given for an unknown input, or an unresolved dynamic dim.
    """
    specs = tuple(specs)
    shapes = dict(shapes or {})
    unknown = sorted(set(shapes) - {s.name for s in specs})
    if unknown:
        raise InputError(
            f"shape given for unknown input {unknown[0]!r}; the model's inputs are {', '.join(s.name for s in specs)}"
        )
    rng = np.random.default_rng(seed)
    return {s.name: _random_tensor(rng, resolve_shape(s, shapes.get(s.name)), s.dtype) for s in specs}


# --- the result ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LatencyStats:
    """Summary of the timed runs, in milliseconds (std is the population standard deviation)."""

    p50: float
    p90: float
    p99: float
    mean: float
    std: float
    min: float
    max: float

    @classmethod
    def of(cls, latencies_ms: np.ndarray) -> LatencyStats:
        """Compute the summary of ``latencies_ms`` (linear-interpolated percentiles)."""
        p50, p90, p99 = (float(v) for v in np.percentile(latencies_ms, PERCENTILES))
        return cls(
            p50=p50,
            p90=p90,
            p99=p99,
            mean=float(latencies_ms.mean()),
            std=float(latencies_ms.std()),
            min=float(latencies_ms.min()),
            max=float(latencies_ms.max()),
        )


@dataclass(frozen=True)
class BenchResult:
    """One benchmark run: what ran, how, and how long it took."""

    model_path: Path
    model_sha256: str
    model_bytes: int
    backend: str
    threads: int
    inputs: tuple[TensorSpec, ...]
    feed_shapes: dict[str, tuple[int, ...]]
    count: int
    runs: int
    warmup: int
    min_duration_s: float
    first_ms: float
    stats: LatencyStats
    duration_s: float
    throughput_per_s: float
    peak_rss_mb: float
    soc_before: SocState
    soc_after: SocState
    latencies_ms: np.ndarray = field(repr=False)
    board: BoardInfo | None = None
    int8_kernels: Int8Kernels | None = None  # what INT8 arithmetic this CPU gets (edge.cpu)

    def to_dict(self, include_samples: bool = False) -> dict[str, Any]:
        """A JSON-ready view (``--json``); ``include_samples`` adds every timed latency."""
        out: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "model": {"path": str(self.model_path), "sha256": self.model_sha256, "bytes": self.model_bytes},
            "backend": self.backend,
            "threads": self.threads,
            "board": self.board.to_dict() if self.board else None,
            "int8_kernels": self.int8_kernels.to_dict() if self.int8_kernels else None,
            "inputs": [{**s.to_dict(), "fed_shape": list(self.feed_shapes[s.name])} for s in self.inputs],
            "count": self.count,
            "runs": self.runs,
            "warmup": self.warmup,
            "min_duration_s": self.min_duration_s,
            "first_inference_ms": self.first_ms,
            "latency_ms": dict(self.stats.__dict__),
            "duration_s": self.duration_s,
            "throughput_per_s": self.throughput_per_s,
            "peak_rss_mb": self.peak_rss_mb,
            "soc_before": self.soc_before.to_dict(),
            "soc_after": self.soc_after.to_dict(),
        }
        if include_samples:
            out["latencies_ms"] = [float(v) for v in self.latencies_ms]
        return out

    def to_table(self) -> str:
        """A plain-text report for the terminal."""
        s = self.stats
        feeds = ", ".join(f"{s.name} {s.dtype.name} {self.feed_shapes[s.name]}" for s in self.inputs)
        board = "unknown"
        if self.board is not None:
            name = self.board.profile.name if self.board.profile else "no profile"
            board = f"{self.board.model or 'no device tree'} ({name}, {self.board.source})"
        rows = [
            ("model", f"{self.model_path} ({self.model_bytes / 1e6:.2f} MB, sha256 {self.model_sha256[:12]})"),
            ("board", board),
            ("backend", f"{self.backend}, {self.threads} thread{'s' if self.threads != 1 else ''}"),
            ("INT8 kernels", self.int8_kernels.describe() if self.int8_kernels else "not detected"),
            ("inputs", feeds),
            ("first inference", f"{s_ms(self.first_ms)} (reported apart)"),
            ("timed runs", f"{self.runs} after {self.warmup} warm-up, {self.duration_s:.2f} s"),
            ("latency p50/p90/p99", f"{s_ms(s.p50)} / {s_ms(s.p90)} / {s_ms(s.p99)}"),
            ("latency mean +- std", f"{s_ms(s.mean)} +- {s_ms(s.std)}"),
            ("latency min/max", f"{s_ms(s.min)} / {s_ms(s.max)}"),
            ("throughput", f"{self.throughput_per_s:.1f} inferences/s"),
            ("peak RSS", f"{self.peak_rss_mb:.1f} MB"),
            ("SoC before", _soc_text(self.soc_before)),
            ("SoC after", _soc_text(self.soc_after)),
        ]
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)

    def plot_png(self, path: Path) -> Path:
        """Write a latency histogram + CDF to ``path`` (drawn with OpenCV); see ``edge.bench_plot``."""
        from edge.bench_plot import plot_latencies

        return plot_latencies(self, Path(path))


def s_ms(value: float) -> str:
    """A latency in ms with about 3 significant digits: ``0.00912 ms``, ``1.23 ms``, ``123 ms``."""
    decimals = 0 if value >= 100 else min(5, 2 - math.floor(math.log10(value))) if value > 0 else 3
    return f"{value:.{decimals}f} ms"


def _soc_text(state: SocState) -> str:
    temp = f"{state.temperature_c:.1f} C" if state.temperature_c is not None else "temperature n/a"
    clock = f"{state.cpu_mhz:.0f} MHz" if state.cpu_mhz is not None else "clock n/a"
    if state.throttled is None:
        thr = "throttling n/a"
    else:
        thr = f"throttled {hex(state.throttled.raw)} ({', '.join(state.throttled.flags) or 'none'})"
    return f"{temp}, {clock}, {thr}"


# --- the run ---------------------------------------------------------------------------------------------


def peak_rss_mb() -> float:
    """This process's peak resident set size so far, in MB (the model, runtime and everything before)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 1e6 if sys.platform == "darwin" else peak * 1024 / 1e6  # bytes on macOS, KiB on Linux


def _check_options(count: object, min_duration_s: object, warmup: object) -> None:
    for key, value in (("count", count), ("warmup", warmup)):
        low = 1 if key == "count" else 0
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise InputError(f"{key} = {value!r}; expected a whole number >= {low}")
    if isinstance(min_duration_s, bool) or not isinstance(min_duration_s, (int, float)) or min_duration_s < 0:
        raise InputError(f"min_duration_s = {min_duration_s!r}; expected a number of seconds >= 0")


def timed_loop(call: Callable[[], object], count: int, min_ns: int) -> tuple[list[int], int]:
    """Time ``count`` calls, then more until ``min_ns`` have passed; return (per-call ns, total ns).

    Kept lean (preallocated list, local names): on a 10-microsecond model every 100 ns is 1 %.
    """
    clock = time.perf_counter_ns
    samples = [0] * count
    start = clock()
    for i in range(count):
        t0 = clock()
        call()
        samples[i] = clock() - t0
    while clock() - start < min_ns:
        t0 = clock()
        call()
        samples.append(clock() - t0)
    return samples, clock() - start


def run_bench(
    model: Model,
    inputs: Mapping[str, np.ndarray],
    count: int = 100,
    min_duration_s: float = 0.0,
    warmup: int = 10,
    board: BoardInfo | None = None,
    sysfs_root: Path = Path("/"),
) -> BenchResult:
    """Benchmark ``model`` on ``inputs``, one query at a time.

    Args:
        model: a loaded model (``edge.runtime.open_model``).
        inputs: the feeds, e.g. from ``make_inputs(model.inputs, shapes, seed)``.
        count: at least this many timed runs.
        min_duration_s: and at least this long (timed runs continue until both are met).
        warmup: untimed runs after the first inference.
        board: the detected board, carried into the report.
        sysfs_root: where to read SoC state from (a fake tree in tests).

    Returns:
        The result; ``to_dict()``, ``to_table()`` and ``plot_png()`` report it.

    Raises:
        InputError: for bad options or feeds that do not fit the model.
        InferenceError: if the runtime fails.
    """
    _check_options(count, min_duration_s, warmup)
    call = model.prepare(inputs)
    soc_before = read_soc_state(sysfs_root)
    clock = time.perf_counter_ns
    t0 = clock()
    call()
    first_ms = (clock() - t0) / 1e6
    for _ in range(warmup):
        call()
    samples, duration_ns = timed_loop(call, count, int(min_duration_s * 1e9))
    duration_s = duration_ns / 1e9
    soc_after = read_soc_state(sysfs_root)
    latencies = np.asarray(samples, dtype=np.float64) / 1e6
    path = Path(model.path)
    return BenchResult(
        model_path=path,
        model_sha256=file_sha256(path),
        model_bytes=path.stat().st_size,
        backend=model.backend,
        threads=model.threads,
        inputs=tuple(model.inputs),
        feed_shapes={name: tuple(v.shape) for name, v in inputs.items()},
        count=count,
        runs=len(samples),
        warmup=warmup,
        min_duration_s=float(min_duration_s),
        first_ms=first_ms,
        stats=LatencyStats.of(latencies),
        duration_s=duration_s,
        throughput_per_s=len(samples) / duration_s,
        peak_rss_mb=peak_rss_mb(),
        soc_before=soc_before,
        soc_after=soc_after,
        latencies_ms=latencies,
        board=board,
        int8_kernels=int8_kernels(),
    )
