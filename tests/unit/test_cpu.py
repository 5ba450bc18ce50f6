"""edge.cpu: which INT8 kernels a CPU gets, from numpy's CPUID/HWCAP table, and the session option we add."""

from __future__ import annotations

from edge.cpu import X64_QUANT_PRECISION, cpu_features, int8_kernels, int8_session_config

HASWELL = {"SSE41": True, "AVX2": True, "AVX512BW": False, "AVX512VNNI": False, "AVXVNNI": False}
CASCADE_LAKE = {**HASWELL, "AVX512BW": True, "AVX512VNNI": True}


def test_this_cpus_features_come_from_numpy_and_name_its_family():
    feats = cpu_features()
    assert feats and all(isinstance(v, bool) for v in feats.values())
    kernels = int8_kernels()
    assert kernels.kind in {"x86-vnni", "x86-avx2", "x86-sse", "arm-dotprod", "arm-neon", "other"}
    assert kernels.to_dict()["kind"] == kernels.kind


def test_x86_without_vnni_saturates_and_gets_the_precise_u8s8_option():
    k = int8_kernels(HASWELL, "x86_64")
    assert (k.kind, k.saturates_u8s8) == ("x86-avx2", True)
    assert k.session_config == ((X64_QUANT_PRECISION, "1"),)
    assert k.describe() == "x86-avx2 (AVX2, SSE41, no VNNI; session.x64quantprecision=1)"


def test_x86_with_vnni_does_not_saturate_and_keeps_onnxruntimes_fast_kernels():
    k = int8_kernels(CASCADE_LAKE, "x86_64")
    assert (k.kind, k.saturates_u8s8) == ("x86-vnni", False)
    assert int8_session_config(k) == ()  # the option would halve INT8 speed here and change no number
    assert k.describe() == "x86-vnni (AVX512VNNI, AVX2, AVX512BW, SSE41)"


def test_arm_is_told_apart_by_the_dot_product_and_gets_no_option():
    a76 = int8_kernels({"ASIMD": True, "ASIMDDP": True}, "aarch64")
    a72 = int8_kernels({"ASIMD": True, "ASIMDDP": False}, "aarch64")
    assert (a76.kind, a72.kind) == ("arm-dotprod", "arm-neon")
    assert a76.session_config == a72.session_config == ()
    assert not a76.saturates_u8s8 and not a72.saturates_u8s8
