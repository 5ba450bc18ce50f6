"""llama.cpp in the emulated Pi: executed instructions per token of ``llama-bench``, the ARM race's peer.

``scripts/arm/build_llama_cpp.sh`` cross-builds a static aarch64 ``llama-bench`` from the pinned
llama-cpp-python sdist, once per core: ``-march=armv8-a`` for the Cortex-A72 (Pi 4) and
``-march=armv8.2-a+dotprod+fp16`` for the Cortex-A76 (Pi 5). It runs single-threaded under the counting
TCG plugin with no warm-up and one repetition; llama-bench marks no regions, so a cost is the difference of
two whole runs over the tokens they differ by (model loading and start-up cancel):

- decode: ``-p 0 -n N`` (N tokens generated one by one from an empty context), (count(N2) - count(N1)) / (N2 - N1);
- prefill: ``-p P -n 0`` (one batch of P prompt tokens), (count(P2) - count(P1)) / (P2 - P1).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from converters.arm.cost import InsnCounts, RunCounts, counted_run
from converters.arm.guest import DEFAULT_CACHE, SCRIPTS, ArmGuest, CpuModel
from converters.tools import run_tool
from edge.errors import InferenceError, InputError

LLAMA_CPP_VERSION = "0.3.36"  # the llama-cpp-python sdist scripts/arm/build_llama_cpp.sh pins
LLAMA_CACHE = DEFAULT_CACHE / "llama.cpp"
#: The -march each emulated core's build uses (what a distribution would build for that Pi).
MARCH_OF_CPU = {CpuModel.CORTEX_A72: "armv8-a", CpuModel.CORTEX_A76: "armv8.2-a+dotprod+fp16"}


def build_llama_bench(cache: Path = LLAMA_CACHE, timeout_s: float = 7200) -> Path:
    """Build (or reuse) both aarch64 llama-bench binaries with ``scripts/arm/build_llama_cpp.sh``.

    Returns:
        The cache folder.

    Raises:
        InferenceError: the build failed or timed out (with the end of its output).
    """
    script = SCRIPTS / "build_llama_cpp.sh"
    run_tool(["bash", script, cache], timeout_s, f"{script.name} {cache}", InferenceError)
    return cache


def llama_bench_binary(cpu: CpuModel, cache: Path = LLAMA_CACHE) -> Path:
    """The built llama-bench for ``cpu``'s core.

    Raises:
        InputError: it is not built (run scripts/arm/build_llama_cpp.sh).
    """
    binary = Path(cache) / f"{LLAMA_CPP_VERSION}-{MARCH_OF_CPU[cpu]}" / "llama-bench"
    if not binary.is_file():
        raise InputError(f"{binary}: not built; run scripts/arm/build_llama_cpp.sh")
    return binary


def count_llama_bench(guest: ArmGuest, gguf: Path, prompt: int, gen: int, plugin: Path) -> RunCounts:
    """One whole ``llama-bench -t 1 -r 1 --no-warmup -p prompt -n gen`` run under the counting plugin.

    Raises:
        InferenceError: the run failed or the plugin wrote no counts.
    """
    binary = llama_bench_binary(guest.cpu)
    args = ["-m", str(Path(gguf).resolve()), "-t", "1", "-r", "1", "--no-warmup", "-p", str(prompt), "-n", str(gen)]
    return counted_run(
        guest,
        lambda log: guest.run_program(binary, args, plugin=plugin, plugin_log=log, timeout=3600),
        f"llama-bench on {guest.cpu.value}",
    )


@dataclass(frozen=True)
class LlamaCost:
    """llama.cpp's instructions per token on one core (whole-run differences, see the module doc)."""

    cpu: str
    march: str
    decode_tokens: tuple[int, int]
    prefill_tokens: tuple[int, int]
    decode: InsnCounts
    prefill: InsnCounts


def per_token(small: RunCounts, large: RunCounts, tokens: int) -> InsnCounts:
    """(whole run of ``large`` - whole run of ``small``) / ``tokens``, field by field."""
    return InsnCounts(*(round(v / tokens) for v in (large.whole - small.whole).astuple()))


def measure_llama_cpp(
    guest: ArmGuest, gguf: Path, plugin: Path, decode: tuple[int, int] = (2, 10), prefill: tuple[int, int] = (8, 40)
) -> LlamaCost:
    """llama.cpp's decode and prefill instructions per token on ``guest``'s core, single thread.

    Args:
        guest: the emulated machine (a prepared rootfs; the binary is static, the rootfs gives /proc).
        gguf: the model file.
        plugin: the counting plugin.
        decode: the two generation lengths counted.
        prefill: the two prompt lengths counted.

    Raises:
        InputError: a pair is not increasing or llama-bench is not built; InferenceError: a run failed.
    """
    for name, (a, b) in (("decode", decode), ("prefill", prefill)):
        if not 0 < a < b:
            raise InputError(f"{name} = ({a}, {b}); expected 0 < first < second token count")
    runs = [count_llama_bench(guest, gguf, 0, n, plugin) for n in decode]
    dec = per_token(runs[0], runs[1], decode[1] - decode[0])
    runs = [count_llama_bench(guest, gguf, p, 0, plugin) for p in prefill]
    pre = per_token(runs[0], runs[1], prefill[1] - prefill[0])
    return LlamaCost(guest.cpu.value, MARCH_OF_CPU[guest.cpu], decode, prefill, dec, pre)


__all__ = ["LLAMA_CACHE", "LlamaCost", "build_llama_bench", "count_llama_bench", "measure_llama_cpp", "per_token"]
