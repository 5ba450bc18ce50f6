"""Executed-instruction counts of device code under emulated Cortex-A cores.

The TCG plugin ``scripts/arm/insncount.c`` (built by ``scripts/arm/build_plugin.sh``) counts every executed
AArch64 instruction, the FP/AdvSIMD (NEON) ones and the SDOT/UDOT ones apart, for the whole run and for
regions the guest marks. The guest runs with one compute thread, ``PYTHONHASHSEED=0`` and no address
randomisation (``setarch x86_64 -R``).

Per inference, regions rather than differences of whole runs: a whole run of Python + onnxruntime varied
by up to 3 M instructions (0.5 %) from one run to the next on a loaded machine; a marked steady-state
inference by ~1e-4 of its total, a first inference by up to ~1 %, SDOT/UDOT counts not at all (what
varies is address-dependent code such as memcpy, memset and malloc). ``scripts/arm/run_model.py --mark``
marks an empty region 0 (the marks' own cost, ~7-9 k instructions), the first inference (region 1) and k
steady-state inferences (region 2) with a syscall no kernel has; the plugin sees it through QEMU's
syscall callback. ``measure_model`` counts twice
and reports how far the two steady-state totals are apart (``repeat_noise``).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from converters.arm.guest import DEFAULT_CACHE, SCRIPTS, ArmGuest
from converters.tools import run_tool
from edge.errors import InferenceError, InputError
from edge.runtime import ModelFormat, detect_format

DEFAULT_PLUGIN = DEFAULT_CACHE / "libinsncount.so"
RUN_MODEL = SCRIPTS / "run_model.py"
_FIELDS = ("total", "simd", "vector", "sdot", "udot")


def build_plugin(out: Path = DEFAULT_PLUGIN, timeout_s: float = 300) -> Path:
    """Build the counting TCG plugin with ``scripts/arm/build_plugin.sh`` (quick when it is up to date).

    Raises:
        InferenceError: the build failed or timed out (with the end of its output).
    """
    script = SCRIPTS / "build_plugin.sh"
    run_tool(["bash", script, out], timeout_s, f"{script.name} {out}", InferenceError)
    return out


@dataclass(frozen=True)
class InsnCounts:
    """Executed guest instructions, as counted by ``scripts/arm/insncount.c``.

    ``simd`` is every instruction that works on the FP/AdvSIMD (NEON) register file: data processing
    (vector, scalar AdvSIMD and scalar FP) and FP/SIMD loads and stores; ``vector`` the AdvSIMD vector data
    processing part of it; ``sdot``/``udot`` the Armv8.2 dot-product instructions (vector and by element).
    """

    total: int
    simd: int
    vector: int
    sdot: int
    udot: int

    def __sub__(self, other: InsnCounts) -> InsnCounts:
        return InsnCounts(*(a - b for a, b in zip(self.astuple(), other.astuple(), strict=True)))

    def astuple(self) -> tuple[int, int, int, int, int]:
        return (self.total, self.simd, self.vector, self.sdot, self.udot)

    @property
    def simd_share(self) -> float:
        return self.simd / self.total if self.total else 0.0


_COUNTS_LINE = re.compile(r"insncount: (all|region \d+) total (\d+) simd (\d+) vector (\d+) sdot (\d+) udot (\d+)")


@dataclass(frozen=True)
class RunCounts:
    """The counts of one run: the whole run and each region the guest marked (by region number)."""

    whole: InsnCounts
    regions: dict[int, InsnCounts]


def parse_counts(log_text: str, source: str = "plugin log") -> RunCounts:
    """The counts the plugin wrote at exit.

    Raises:
        InferenceError: when the log has no whole-run line (the guest died before exit, or no plugin ran).
    """
    found = _COUNTS_LINE.findall(log_text)
    whole = [InsnCounts(*map(int, f[1:])) for f in found if f[0] == "all"]
    if len(whole) != 1:
        raise InferenceError(
            f"{source}: expected one 'insncount: all total N simd N vector N sdot N udot N' line, found {len(whole)}"
        )
    regions = {int(f[0].split()[1]): InsnCounts(*map(int, f[1:])) for f in found if f[0] != "all"}
    return RunCounts(whole[0], regions)


def count_instructions(
    guest: ArmGuest,
    script: Path,
    args: Sequence[str] = (),
    plugin: Path | None = None,
    timeout: float | None = None,
) -> RunCounts:
    """Run a guest script under the counting plugin and return its counts (whole run and marked regions).

    Args:
        guest: the emulated machine (its CPU model decides which kernels run).
        script: the script, as a host path.
        args: its arguments.
        plugin: the built plugin; default ``.cache/arm/libinsncount.so`` (``scripts/arm/build_plugin.sh``).
        timeout: seconds; default the guest's.

    Raises:
        InputError: the plugin is not built; InferenceError: the guest failed or wrote no counts.
    """
    plugin = Path(plugin) if plugin else DEFAULT_PLUGIN
    if not plugin.is_file():
        raise InputError(f"{plugin}: TCG plugin not found; build it with scripts/arm/build_plugin.sh")
    return counted_run(
        guest,
        lambda log: guest.run(script, args, timeout=timeout, plugin=plugin, plugin_log=log),
        f"{Path(script).name} on {guest.cpu.value}",
    )


def counted_run(guest: ArmGuest, run: Callable[[Path], object], source: str) -> RunCounts:
    """Call ``run(log)`` (a guest run under the counting plugin writing to ``log``, a fresh file in the guest's
    /tmp) and parse its counts; the log is removed whatever happens. ``source`` names the run in errors.

    Raises:
        InferenceError: the plugin wrote no (or malformed) counts.
    """
    log = guest.rootfs / "tmp" / f"insncount-{os.getpid()}-{time.monotonic_ns()}.log"
    try:
        run(log)
        text = log.read_text(encoding="utf-8") if log.is_file() else ""
    finally:
        log.unlink(missing_ok=True)
    return parse_counts(text, source)


@dataclass(frozen=True)
class ModelCost:
    """Instructions of one model on one core: the whole run, the first and one steady-state inference."""

    model: str
    cpu: str
    backend: str
    whole: InsnCounts
    first: InsnCounts
    steady: InsnCounts
    repeat_noise: int  # |difference| of the steady-state totals of two identical counted runs

    def to_dict(self) -> dict:
        out = {"model": self.model, "cpu": self.cpu, "backend": self.backend, "repeat_noise": self.repeat_noise}
        for part in ("whole", "first", "steady"):
            out[part] = dict(zip(_FIELDS, getattr(self, part).astuple(), strict=True))
        return out


def _inference_counts(run: RunCounts, k: int, source: str) -> tuple[InsnCounts, InsnCounts]:
    if not {0, 1, 2} <= set(run.regions):
        raise InferenceError(f"{source}: the plugin saw regions {sorted(run.regions)}; expected 0, 1 and 2")
    empty = run.regions[0]
    first = run.regions[1] - empty
    steady = InsnCounts(*(round(v / k) for v in (run.regions[2] - empty).astuple()))
    return first, steady


def measure_model(
    guest: ArmGuest,
    model: Path,
    backend: str | None = None,
    k: int = 2,
    plugin: Path | None = None,
    input_npy: Path | None = None,
    inputs_npz: Path | None = None,
) -> ModelCost:
    """The executed instructions of one model: first and steady-state inference (see the module doc).

    Args:
        guest: the emulated machine, prepared (``converters.arm.guest.prepare_guest``).
        model: .onnx, .ort or .tflite file (host path).
        backend: ``"onnxruntime"`` or ``"litert"``; None picks from the file's bytes.
        k: steady-state inferences to average over (>= 1).
        plugin: the counting plugin (default ``.cache/arm/libinsncount.so``).
        input_npy: the first input's value (.npy); default seeded random values.
        inputs_npz: every input's value (.npz, an array per input name; the first rows, as many as the
            model's batch), e.g. a ``convert model --eval`` file.

    Raises:
        InputError: k < 1 or no plugin; InferenceError: a guest run failed or marked no regions.
    """
    if k < 1:
        raise InputError(f"k = {k}; expected at least 1 steady-state inference")
    args = ["--model", str(Path(model).resolve()), "--runs", str(1 + k), "--mark"]
    args += ["--backend", backend] if backend else []
    args += ["--input", str(Path(input_npy).resolve())] if input_npy else []
    args += ["--inputs", str(Path(inputs_npz).resolve())] if inputs_npz else []
    guest.run(RUN_MODEL, args)  # warm-up: byte-code of every module is written now
    source = f"{Path(model).name} on {guest.cpu.value}"
    runs = [count_instructions(guest, RUN_MODEL, args, plugin) for _ in range(2)]
    (first, steady), (_, steady_again) = (_inference_counts(r, k, source) for r in runs)
    used = backend or ("litert" if detect_format(Path(model)) is ModelFormat.TFLITE else "onnxruntime")
    noise = abs(steady.total - steady_again.total)
    return ModelCost(Path(model).name, guest.cpu.value, used, runs[0].whole, first, steady, noise)
