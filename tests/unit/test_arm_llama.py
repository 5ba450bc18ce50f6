"""The llama.cpp side of the ARM race: the guest command of a static binary, per-token arithmetic, errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from converters.arm.cost import InsnCounts, RunCounts
from converters.arm.guest import ROOTFS_STAMP, ArmGuest, CpuModel
from converters.arm.llama import llama_bench_binary, measure_llama_cpp, per_token
from converters.arm.text import measure_prefill
from edge.errors import InputError


def _guest(tmp_path: Path, cpu: str = "cortex-a76") -> ArmGuest:
    (tmp_path / ROOTFS_STAMP).write_text("test\n")
    return ArmGuest(tmp_path, cpu, cores=2)


def test_a_program_runs_with_the_same_qemu_options_as_python_but_no_interpreter(tmp_path):
    guest = _guest(tmp_path)
    plain = guest.program_command(Path("/c/llama-bench"), ["-t", "1"])
    assert plain[1:] == ["-cpu", "cortex-a76", "-L", str(tmp_path.resolve()), "/c/llama-bench", "-t", "1"]
    counted = guest.program_command(Path("/c/llama-bench"), [], Path("/p.so"), Path("/log.txt"))
    assert counted[1:3] == ["x86_64", "-R"]
    assert counted[4:10] == ["-plugin", "/p.so", "-d", "plugin", "-D", "/log.txt"]
    assert counted[10:] == ["-cpu", "cortex-a76", "-L", str(tmp_path.resolve()), "/c/llama-bench"]


def test_per_token_is_the_difference_of_whole_runs_over_the_tokens():
    small = RunCounts(InsnCounts(1000, 500, 400, 10, 0), {})
    large = RunCounts(InsnCounts(9000, 4500, 4400, 90, 8), {})
    assert per_token(small, large, 8) == InsnCounts(1000, 500, 500, 10, 1)


def test_each_core_has_its_own_build_and_a_missing_one_says_how_to_make_it(tmp_path):
    with pytest.raises(InputError) as err:
        llama_bench_binary(CpuModel.CORTEX_A72, tmp_path)
    missing = tmp_path / "0.3.36-armv8-a" / "llama-bench"
    assert str(err.value) == f"{missing}: not built; run scripts/arm/build_llama_cpp.sh"
    a76 = tmp_path / "0.3.36-armv8.2-a+dotprod+fp16" / "llama-bench"
    a76.parent.mkdir()
    a76.write_bytes(b"\x7fELF")
    assert llama_bench_binary(CpuModel.CORTEX_A76, tmp_path) == a76


def test_token_counts_must_grow(tmp_path):
    guest = _guest(tmp_path)
    with pytest.raises(InputError) as err:
        measure_llama_cpp(guest, tmp_path / "m.gguf", tmp_path / "p.so", decode=(10, 2))
    assert str(err.value) == "decode = (10, 2); expected 0 < first < second token count"
    with pytest.raises(InputError) as err:
        measure_llama_cpp(guest, tmp_path / "m.gguf", tmp_path / "p.so", prefill=(0, 8))
    assert str(err.value) == "prefill = (0, 8); expected 0 < first < second token count"


def test_prefill_without_the_plugin_says_how_to_build_it(tmp_path):
    with pytest.raises(InputError) as err:
        measure_prefill(_guest(tmp_path), tmp_path, ("a", "b c"), tmp_path / "missing.so")
    assert "TCG plugin not found; build it with scripts/arm/build_plugin.sh" in str(err.value)
