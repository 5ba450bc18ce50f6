"""Pure helpers of the small-LM speed race (benchmarks/slm_speed*.py): no models, no timing."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from benchmarks import slm_speed
from benchmarks.harness.slm_speed_models import cache_key, stale_folders
from benchmarks.harness.slm_speed_report import goals, speed_table, tokenization_lines
from benchmarks.slm_speed import Sample, Series
from edge.errors import MissingDependencyError


def test_rates() -> None:
    assert slm_speed.prefill_rate(200, 0.5) == 400.0
    assert slm_speed.prefill_rate(200, 0.0) == 0.0
    assert slm_speed.decode_rate(31, 0.5) == 62.0
    assert slm_speed.decode_rate(0, 0.5) == 0.0


def test_common_prefix() -> None:
    assert slm_speed.leading_equal([1, 2, 3, 4], [1, 2, 9, 4]) == 2
    assert slm_speed.leading_equal([1, 2], [1, 2, 3]) == 2
    assert slm_speed.leading_equal([5], [1]) == 0


def test_ratio() -> None:
    assert slm_speed.ratio(30.0, 10.0) == 3.0
    assert slm_speed.ratio(None, 10.0) is None
    assert slm_speed.ratio(30.0, 0.0) is None
    assert slm_speed.ratio(30.0, None) is None


def test_long_prompt_text_is_the_shortest_prefix_reaching_the_target() -> None:
    text = " ".join(f"w{i}" for i in range(100))

    def count(s: str) -> int:
        return 10 + 2 * len(s.split())  # a fixed template of 10 tokens, 2 tokens per word

    got = slm_speed.long_prompt_text(text, count, 50)
    assert got == " ".join(f"w{i}" for i in range(20))
    assert slm_speed.long_prompt_text(text, count, 10_000) == text  # too short: everything


def _series(kind: str, threads: int, prompt: str, tokens: tuple[int, ...], ttfts: list[float]) -> Series:
    s = Series(kind, threads, prompt, prompt_tokens=100)
    s.first = Sample(1.0, 2.0, len(tokens) - 1, tokens)
    s.steady = [Sample(t, 0.5, len(tokens) - 1, tokens) for t in ttfts]
    return s


def test_summarize_takes_medians_and_keeps_the_first_run_apart() -> None:
    row = slm_speed.summarize(_series("ours-int4", 2, "short", (1, 2, 3, 4, 5), [0.1, 0.2, 0.4]))
    assert row["prefill_tps"] == 500.0  # 100 tokens / median 0.2 s
    assert row["decode_tps"] == 8.0  # 4 steps / 0.5 s
    assert row["new_tokens"] == 5
    assert row["first_ttft_s"] == 1.0
    assert row["first_decode_tps"] == 2.0
    assert row["stable_tokens"] is True


def test_summarize_flags_tokens_that_change_between_rounds() -> None:
    s = _series("ours-int4", 1, "short", (1, 2, 3), [0.1, 0.1])
    s.steady[1] = Sample(0.1, 0.5, 2, (1, 2, 4))
    assert slm_speed.summarize(s)["stable_tokens"] is False


def test_agreement_and_ratios_compare_same_prompt_and_threads() -> None:
    series = [
        _series("ours-int4", 1, "short", (1, 2, 3, 9), [0.1]),
        _series("llama.cpp", 1, "short", (1, 2, 3, 4), [0.2]),
        _series("transformers", 1, "short", (1, 2, 3, 4), [0.4]),
        _series("transformers", 2, "short", (7, 7, 7, 7), [0.4]),
    ]
    series[1].steady[0].decode_s = 1.0  # llama.cpp decodes at half our rate
    rows = [slm_speed.summarize(s) for s in series]
    slm_speed.agreement(rows, series)
    slm_speed.compare_ratios(rows)
    ours = rows[0]
    assert ours["agree_ref"] == 3
    assert ours["agree_peer"] == 3
    assert rows[1]["agree_peer"] == 4
    assert ours["decode_tps_vs_llama"] == 2.0
    assert ours["decode_tps_vs_tf"] == 1.0
    assert ours["prefill_tps_vs_llama"] == 2.0
    assert ours["prefill_tps_vs_tf"] == 4.0
    assert rows[2]["agree_ref"] == 4


def test_goals_report_met_and_missed() -> None:
    rows = [
        {"kind": "ours-int4", "prompt": "short", "threads": 1, "decode_tps_vs_llama": 0.8, "decode_tps_vs_tf": 6.0},
        {"kind": "llama.cpp", "prompt": "short", "threads": 1, "decode_tps_vs_llama": 1.0, "decode_tps_vs_tf": 9.0},
    ]
    assert goals(rows, {"int4_vs_fp32": 0.25}) == [
        "- INT4 decode >= 1.0x llama.cpp (short prompt, 1 thread(s)): 0.80x — MISSED",
        "- INT4 decode >= 5.0x transformers (short prompt, 1 thread(s)): 6.00x — met",
        "- INT4 model <= 0.20x the fp32 size: 0.250x of the fp32 file — MISSED",
    ]
    sizes = {"int4_vs_fp32": 0.184, "int4_vs_fp32_params": 0.19, "parameters": 134_515_008}
    assert goals(rows, sizes)[2:] == [
        "- INT4 model <= 0.20x the fp32 size: 0.184x of the fp32 file — met",
        "- INT4 model <= 0.20x 4 bytes x 134,515,008 parameters: 0.190x — met",
    ]


def test_speed_table_row() -> None:
    row = {
        "kind": "ours-int4",
        "threads": 2,
        "prompt": "long",
        "prompt_tokens": 201,
        "prefill_tps": 812.34,
        "decode_tps": 55.55,
        "decode_tps_vs_llama": 1.234,
        "decode_tps_vs_tf": None,
        "agree_ref": 12,
        "agree_peer": None,
        "new_tokens": 32,
        "stable_tokens": False,
        "first_ttft_s": 0.5,
        "first_decode_tps": 40.0,
    }
    line = speed_table([row]).splitlines()[-1]
    assert line == (
        "| long (201) | 2 | ours INT4 (ORT) | 812.3 | 55.5 | 1.23x | — | 12/32 / — (varied between rounds) | 500, 40.0 |"
    )


def test_tokenization_lines() -> None:
    checks = [
        {"prompt": "short", "ours": 20, "llama": 20, "identical": True, "first_difference": None},
        {"prompt": "long", "ours": 200, "llama": 201, "identical": False, "first_difference": 7},
    ]
    assert tokenization_lines(checks) == [
        "- short prompt: llama.cpp's own tokenization is identical to ours (20 tokens)",
        "- long prompt: llama.cpp's own tokenization DIFFERS (201 tokens vs our 200, first difference at token 7); "
        "every contender was fed our ids",
    ]


def test_cache_key_follows_gguf_digest_and_sources(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("x = 1\n")
    first = cache_key("ab" * 32, tmp_path)
    assert len(first) == 16
    assert cache_key("ab" * 32, tmp_path) == first
    assert cache_key("cd" * 32, tmp_path) != first
    (tmp_path / "a.py").write_text("x = 2\n")
    assert cache_key("ab" * 32, tmp_path) != first


def test_missing_llama_cpp_names_the_bench_extra(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # makes `import llama_cpp` fail
    with pytest.raises(MissingDependencyError) as info:
        slm_speed.run_race([1], 1, 8, lambda _m: None)
    assert str(info.value) == (
        "the llama.cpp contender of the SLM speed benchmark needs the Python module 'llama_cpp' "
        "(import of llama_cpp halted; None in sys.modules); install it with: pip install 'edge-deploy[bench]'"
    )
    assert slm_speed.main(["--quick"]) == 1
    assert capsys.readouterr().err.startswith(
        "Error: the llama.cpp contender of the SLM speed benchmark needs the Python module 'llama_cpp'"
    )


def test_stale_folders_are_other_keys_of_this_race_only(tmp_path: Path) -> None:
    for name in ("slm-int4-aaaa", "slm-fp32-aaaa", "slm-hf-aaaa", "slm-int4-bbbb", "slm-hf-bbbb.tmp", "face-fp32"):
        (tmp_path / name).mkdir()
    assert [p.name for p in stale_folders(tmp_path, "aaaa")] == ["slm-int4-bbbb"]
    assert stale_folders(tmp_path / "missing", "aaaa") == []


def test_a_dead_worker_names_its_exit_code_or_signal_and_llama_cpp_segfaults_name_the_no_amx_rebuild() -> None:
    assert slm_speed.worker_died("ours-int4", 2, 3) == "ours-int4 (2 threads): the worker exited with code 3"
    killed = slm_speed.worker_died("transformers", 1, -9)
    assert killed == "transformers (1 threads): the worker was killed by SIGKILL"
    segv = slm_speed.worker_died("llama.cpp", 1, -11)
    assert segv.startswith("llama.cpp (1 threads): the worker was killed by SIGSEGV; on a CPU with AMX")
    assert "-DGGML_AMX_INT8=OFF" in segv and "llama-cpp-python==0.3.36" in segv


def test_cache_key_follows_the_profile(tmp_path: Path) -> None:
    """A profile change (quant.lm_head, say) rebuilds the race's models instead of reusing the old build."""
    import dataclasses

    from edge.profiles import LmHead, load_profile

    (tmp_path / "a.py").write_text("x = 1\n")
    host = load_profile("x86_64-host")
    int8_head = dataclasses.replace(host, quant=dataclasses.replace(host.quant, lm_head=LmHead.INT8))
    keys = {cache_key("ab" * 32, tmp_path, p) for p in (host, int8_head, load_profile("rpi4"))}
    assert len(keys) == 3
    assert cache_key("ab" * 32, tmp_path, host) == cache_key("ab" * 32, tmp_path, load_profile("x86_64-host"))


def test_the_section_names_the_build_it_raced() -> None:
    from benchmarks.harness.slm_speed_report import build_lines

    settings = {"accuracy_level": 0, "fp32_head": 1}
    assert build_lines({"name": "x86_64-host", "settings": settings})[0] == (
        "Ours: `edge-deploy convert slm --target x86_64-host` (INT4: 4-bit projections at accuracy level 0, the "
        "LM head an fp32 Gemm over its 8-bit codes; and its fp32 build), what the product builds for this kind of host."
    )
    assert build_lines(None) == []
