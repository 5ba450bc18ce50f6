"""What this CPU offers integer kernels, read from the CPU itself, and what that means for INT8 accuracy.

onnxruntime's x86 u8s8 kernels (MLAS) multiply with ``vpmaddubsw`` on a CPU without VNNI: the sum of two
uint8 x int8 products is kept in 16 bits and saturates, so an INT8 model computes something else on an
AVX2-only host than on a VNNI host or a Pi (measured: the rpi4 INT8 face embedder, mean cosine to fp32 0.979
on an AVX2-only CPU against 0.9996 on VNNI and on emulated Cortex-A72/A76; docs/quantization.md).
onnxruntime's session option ``session.x64quantprecision=1`` makes those kernels widen first (u8u8) on such
a CPU; :func:`int8_session_config` gives it there, and only there. On a VNNI CPU the option changes no
number but halves INT8 speed (``benchmarks/int8_precision_option.py``: the rpi4 INT8 embedder fused, 1 thread,
on an AMD EPYC with AVX-512 VNNI, 5.14 against 2.66 ms of CPU a face, descriptors identical), so VNNI CPUs
and ARM keep onnxruntime's defaults.

The features come from numpy's own CPUID / HWCAP probe (``numpy._core._multiarray_umath.__cpu_features__``),
not from ``/proc/cpuinfo``: under ``qemu-x86_64 -cpu Haswell`` the file still describes the host's CPU while
CPUID describes the emulated one, and it is the emulated one whose instructions run.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from typing import Any

__all__ = ["Int8Kernels", "cpu_features", "int8_kernels", "int8_session_config"]

#: The features named in reports, as numpy calls them.
_REPORTED = ("AVX512VNNI", "AVXVNNI", "AVX2", "AVX512BW", "SSE41", "ASIMD", "ASIMDDP")

#: The session option that keeps x86 u8s8 kernels from saturating on a CPU without VNNI.
X64_QUANT_PRECISION = "session.x64quantprecision"


def cpu_features() -> dict[str, bool]:
    """numpy's runtime CPU feature table (``{"AVX2": True, "AVX512VNNI": False, "ASIMDDP": ..., ...}``)."""
    try:
        from numpy._core._multiarray_umath import __cpu_features__ as features  # numpy 2
    except ImportError:  # pragma: no cover - numpy 1.x
        from numpy.core._multiarray_umath import __cpu_features__ as features  # type: ignore[no-redef]
    return {str(k): bool(v) for k, v in dict(features).items()}


@dataclass(frozen=True)
class Int8Kernels:
    """Which integer dot-product instructions this CPU gives onnxruntime's INT8 kernels, and the fix we apply.

    ``kind`` is one of ``"x86-vnni"``, ``"x86-avx2"`` (no VNNI: u8s8 would saturate, so the session runs
    with ``session.x64quantprecision=1``), ``"x86-sse"``, ``"arm-dotprod"`` (SDOT/UDOT), ``"arm-neon"``, or
    ``"other"``.
    """

    kind: str
    machine: str
    features: tuple[str, ...]  # the features that decided ``kind``, as numpy names them
    saturates_u8s8: bool  # onnxruntime's default x86 u8s8 kernels would saturate here
    session_config: tuple[tuple[str, str], ...]  # what :func:`int8_session_config` adds

    def describe(self) -> str:
        """One line for ``bench`` output and reports, e.g. ``x86-avx2 (AVX2, no VNNI; session.x64quan...=1)``."""
        names = ", ".join(self.features) or "none detected"
        fix = "; ".join(f"{k}={v}" for k, v in self.session_config)
        return f"{self.kind} ({names}{'; ' + fix if fix else ''})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "machine": self.machine,
            "features": list(self.features),
            "saturates_u8s8": self.saturates_u8s8,
            "session_config": dict(self.session_config),
        }


def int8_kernels(features: dict[str, bool] | None = None, machine: str | None = None) -> Int8Kernels:
    """Classify this CPU (or the given ``features``/``machine``, for tests) for INT8 inference."""
    feats = cpu_features() if features is None else features
    machine = (machine or platform.machine()).lower()
    has = [name for name in _REPORTED if feats.get(name)]
    if machine in ("x86_64", "amd64", "i686", "i386"):
        vnni = bool(feats.get("AVX512VNNI") or feats.get("AVXVNNI"))
        if vnni:  # no saturation to fix, and the option would cost half the INT8 speed (module docstring)
            return Int8Kernels("x86-vnni", machine, tuple(has), False, ())
        kind = "x86-avx2" if feats.get("AVX2") else "x86-sse"
        return Int8Kernels(kind, machine, tuple(has) + ("no VNNI",), True, ((X64_QUANT_PRECISION, "1"),))
    if machine in ("aarch64", "arm64"):
        kind = "arm-dotprod" if feats.get("ASIMDDP") else "arm-neon"
        return Int8Kernels(kind, machine, tuple(has), False, ())
    return Int8Kernels("other", machine, tuple(has), False, ())


def int8_session_config(kernels: Int8Kernels | None = None) -> tuple[tuple[str, str], ...]:
    """The onnxruntime session config entries every session on this CPU gets.

    On x86 without VNNI this is ``session.x64quantprecision=1``: it removes the saturation (tests/integration/
    test_cpu_int8.py measures both ways on an emulated Haswell). A VNNI CPU gets nothing: its numbers are the
    same with and without the option, and its INT8 speed is twice as high without. ARM gets nothing.
    """
    return (kernels or int8_kernels()).session_config
