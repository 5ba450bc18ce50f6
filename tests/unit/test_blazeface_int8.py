"""benchmarks/blazeface_int8.py's cost write-up on made-up counts (the counts themselves need the emulated cores)."""

from __future__ import annotations

from benchmarks import blazeface_int8 as bench

LITERT_INT8 = "LiteRT INT8 (static_wi8_ai8)"
ORT_INT8 = "onnxruntime INT8 rpi5 (min-max)"


def test_the_cost_table_ranks_each_core_and_names_what_would_save():
    arm = {
        "cortex-a72": {bench.SHIPPED: [44_600_000, 0], LITERT_INT8: [64_400_000, 0]},
        "cortex-a76": {
            bench.SHIPPED: [44_600_000, 0],
            LITERT_INT8: [36_600_000, 20_000_000],
            ORT_INT8: [50_500_000, 1],
        },
    }
    lines = bench.cost_lines(arm)
    rows = [line for line in lines if line.startswith("| ") and "M instr." not in line]
    assert rows == [
        f"| {bench.SHIPPED} | cortex-a72 | 44.60 | 1.00× | 0 |",
        f"| {LITERT_INT8} | cortex-a72 | 64.40 | 1.44× | 0 |",
        f"| {LITERT_INT8} | cortex-a76 | 36.60 | 0.82× | 20,000,000 |",
        f"| {bench.SHIPPED} | cortex-a76 | 44.60 | 1.00× | 0 |",
        f"| {ORT_INT8} | cortex-a76 | 50.50 | 1.13× | 1 |",
    ]
    assert lines[-2] == f"- cortex-a72: nothing is cheaper than the shipped file (next: {LITERT_INT8}, 1.44×)."
    assert lines[-1] == (
        f"- cortex-a76: the cheapest other network, {LITERT_INT8}, saves 8.0 M instructions a frame against the "
        "shipped file (had it passed the gate above)."
    )


def test_the_markdown_carries_the_cost_table_only_when_counted():
    rows = [{"model": "fp32", **{p: {"found": 44, "missed": 10, "false": 0, "lost": 0} for p in bench.PASSES}}]
    result = {"machine": "m", "images": 21, "faces": 54, "calibration": 200, "rows": rows}
    assert "What each would cost" not in bench.markdown(result, "cmd")
    arm = {"cortex-a76": {bench.SHIPPED: [44_600_000, 0], LITERT_INT8: [36_600_000, 9]}}
    assert "| cortex-a76 | 36.60 | 0.82× | 9 |" in bench.markdown({**result, "arm": arm}, "cmd")
