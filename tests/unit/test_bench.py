"""edge.bench: shape overrides, seeded inputs, the SingleStream loop, statistics, reports and the PNG plot.

Runs real onnxruntime on a small real ONNX model. Assertions are about correctness (counts, ordering,
consistency, exact messages), never about how fast this machine is.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import cv2
import numpy as np
import pytest

from edge.bench import (
    LatencyStats,
    make_inputs,
    parse_shape_overrides,
    resolve_shape,
    run_bench,
    s_ms,
)
from edge.bench_plot import BAR, MARKERS, log_ticks, nice_ticks
from edge.board import CPU_CLOCK, THERMAL_TEMP, BoardInfo
from edge.errors import InputError
from edge.runtime import TensorSpec, open_model
from tests.unit.runtime_models import write_conv_relu, write_embedding

X = TensorSpec("x", ("batch", 3, 16, 16), np.dtype(np.float32))


@pytest.fixture(scope="module")
def conv_path(tmp_path_factory) -> Path:
    return write_conv_relu(tmp_path_factory.mktemp("bench") / "conv.onnx")


@pytest.fixture(scope="module")
def result(conv_path, tmp_path_factory):
    """One real benchmark run, with a Pi-like sysfs tree so the SoC fields are filled."""
    root = tmp_path_factory.mktemp("sysfs")
    for rel, text in ((THERMAL_TEMP, "51234\n"), (CPU_CLOCK, "1800000\n")):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    with open_model(conv_path, threads=1) as model:
        feeds = make_inputs(model.inputs, {"x": (2, 3, 16, 16)}, seed=0)
        board = BoardInfo(model="Raspberry Pi 4 Model B Rev 1.4", profile=None, source="device-tree")
        return run_bench(model, feeds, count=200, warmup=5, board=board, sysfs_root=root)


# --- shapes and inputs -----------------------------------------------------------------------------------


def test_shape_overrides_parse():
    assert parse_shape_overrides(["x=1x3x150x150", " ids = 1X7 "]) == {"x": (1, 3, 150, 150), "ids": (1, 7)}
    assert parse_shape_overrides([]) == {}


@pytest.mark.parametrize("item", ["x=1xa", "x", "x=", "=1x2", "x=0x3", "x=1x-2"])
def test_bad_shape_overrides_say_what_is_expected(item):
    with pytest.raises(InputError) as err:
        parse_shape_overrides([item])
    assert str(err.value) == (
        f"shape {item!r}: expected NAME=D1xD2x... with whole numbers >= 1, e.g. input=1x3x150x150"
    )


def test_a_shape_given_twice_is_refused():
    with pytest.raises(InputError) as err:
        parse_shape_overrides(["x=1x2", "x=1x3"])
    assert str(err.value) == "shape 'x=1x3': input 'x' is given twice"


def test_dynamic_dims_must_be_passed_and_fit():
    assert resolve_shape(TensorSpec("s", (1, 2), np.dtype(np.float32))) == (1, 2)
    assert resolve_shape(X, (4, 3, 16, 16)) == (4, 3, 16, 16)
    with pytest.raises(InputError) as err:
        resolve_shape(X)
    assert str(err.value) == (
        "input 'x' float32 (batch, 3, 16, 16) has dynamic dimensions; pass its shape, e.g. --shape x=1x3x16x16"
    )
    for bad in ((1, 3, 32, 32), (1, 3, 16)):
        with pytest.raises(InputError) as err:
            resolve_shape(X, bad)
        assert str(err.value) == (
            f"shape x={'x'.join(map(str, bad))} does not fit input 'x' float32 (batch, 3, 16, 16)"
        )


def test_inputs_are_seeded_and_match_the_spec():
    ids = TensorSpec("ids", (1, "seq"), np.dtype(np.int64))
    mask = TensorSpec("mask", (1, 5), np.dtype(np.bool_))
    a = make_inputs([X, ids, mask], {"x": (2, 3, 16, 16), "ids": (1, 9)}, seed=1)
    b = make_inputs([X, ids, mask], {"x": (2, 3, 16, 16), "ids": (1, 9)}, seed=1)
    c = make_inputs([X, ids, mask], {"x": (2, 3, 16, 16), "ids": (1, 9)}, seed=2)
    assert {k: (v.shape, v.dtype.name) for k, v in a.items()} == {
        "x": ((2, 3, 16, 16), "float32"),
        "ids": ((1, 9), "int64"),
        "mask": ((1, 5), "bool"),
    }
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])
    assert not np.array_equal(a["x"], c["x"])
    assert a["x"].min() >= 0.0 and a["x"].max() < 1.0 and a["x"].std() > 0.2
    assert a["ids"].min() >= 0 and a["ids"].max() <= 100


def test_a_shape_for_an_unknown_input_is_refused():
    with pytest.raises(InputError) as err:
        make_inputs([X], {"image": (1, 3, 16, 16)})
    assert str(err.value) == "shape given for unknown input 'image'; the model's inputs are x"


# --- the loop and its statistics -------------------------------------------------------------------------


def test_latency_stats_of_a_known_series():
    stats = LatencyStats.of(np.arange(1, 101, dtype=np.float64))
    assert stats == LatencyStats(
        p50=50.5, p90=pytest.approx(90.1), p99=pytest.approx(99.01), mean=50.5,
        std=pytest.approx(np.sqrt((100**2 - 1) / 12)), min=1.0, max=100.0,
    )  # fmt: skip


def test_the_run_counts_and_summarises_what_it_timed(result, conv_path):
    assert (result.count, result.runs, result.warmup) == (200, 200, 5)
    assert result.latencies_ms.shape == (200,)
    assert (result.latencies_ms > 0).all() and result.first_ms > 0
    s = result.stats
    assert s == LatencyStats.of(result.latencies_ms)
    assert s.min <= s.p50 <= s.p90 <= s.p99 <= s.max
    assert s.min <= s.mean <= s.max
    # the loop's wall time covers every timed run
    assert result.duration_s * 1e3 >= result.latencies_ms.sum()
    assert result.throughput_per_s == pytest.approx(result.runs / result.duration_s)
    assert result.model_sha256 == hashlib.sha256(conv_path.read_bytes()).hexdigest()
    assert (result.backend, result.threads, result.model_bytes) == ("onnxruntime", 1, conv_path.stat().st_size)
    assert result.peak_rss_mb > 10


def test_min_duration_keeps_the_loop_going(conv_path):
    with open_model(conv_path, threads=1) as model:
        r = run_bench(model, make_inputs(model.inputs, {"x": (1, 3, 16, 16)}), count=1, min_duration_s=0.2, warmup=0)
    assert r.duration_s >= 0.2
    assert r.runs > 1 and r.count == 1 and r.latencies_ms.size == r.runs


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"count": 0}, "count = 0; expected a whole number >= 1"),
        ({"count": 2.5}, "count = 2.5; expected a whole number >= 1"),
        ({"warmup": -1}, "warmup = -1; expected a whole number >= 0"),
        ({"min_duration_s": -1}, "min_duration_s = -1; expected a number of seconds >= 0"),
    ],
)
def test_bad_options_are_refused(conv_path, options, message):
    with open_model(conv_path, threads=1) as model, pytest.raises(InputError) as err:
        run_bench(model, make_inputs(model.inputs, {"x": (1, 3, 16, 16)}), **options)
    assert str(err.value) == message


def test_feeds_that_do_not_fit_are_refused_before_timing(conv_path):
    with open_model(conv_path, threads=1) as model, pytest.raises(InputError) as err:
        run_bench(model, {"x": np.zeros((1, 3, 8, 8), np.float32)})
    assert str(err.value) == "conv.onnx: input 'x' has shape (1, 3, 8, 8); expected float32 (batch, 3, 16, 16)"


def test_integer_models_bench_too(tmp_path):
    with open_model(write_embedding(tmp_path / "emb.onnx"), threads=1) as model:
        r = run_bench(model, make_inputs(model.inputs, {"ids": (1, 12)}), count=5, warmup=1)
    assert r.runs == 5 and r.feed_shapes == {"ids": (1, 12)}


# --- reports ---------------------------------------------------------------------------------------------


def test_json_report(result):
    data = json.loads(json.dumps(result.to_dict()))
    assert data["schema_version"] == 1
    assert data["backend"] == "onnxruntime" and data["threads"] == 1
    assert data["board"] == {"model": "Raspberry Pi 4 Model B Rev 1.4", "profile": None, "source": "device-tree"}
    assert data["inputs"] == [
        {"name": "x", "shape": ["batch", 3, 16, 16], "dtype": "float32", "quantization": None,
         "fed_shape": [2, 3, 16, 16]}
    ]  # fmt: skip
    assert data["latency_ms"] == dataclasses.asdict(result.stats)
    assert data["first_inference_ms"] == result.first_ms
    assert data["soc_before"] == {"temperature_c": 51.234, "cpu_mhz": 1800.0, "throttled": None}
    assert data["soc_after"] == data["soc_before"]
    assert "latencies_ms" not in data
    assert result.to_dict(include_samples=True)["latencies_ms"] == result.latencies_ms.tolist()


def test_text_report(result):
    lines = result.to_table().splitlines()
    rows = {line[:19].strip(): line[21:] for line in lines}
    assert rows["backend"] == "onnxruntime, 1 thread"
    assert rows["board"] == "Raspberry Pi 4 Model B Rev 1.4 (no profile, device-tree)"
    assert rows["inputs"] == "x float32 (2, 3, 16, 16)"
    assert rows["timed runs"] == f"200 after 5 warm-up, {result.duration_s:.2f} s"
    assert rows["first inference"] == f"{s_ms(result.first_ms)} (reported apart)"
    assert rows["SoC before"] == "51.2 C, 1800 MHz, throttling n/a"


def test_latency_formatting():
    assert [s_ms(v) for v in (0.00912, 0.912, 9.12, 91.2, 912.3)] == [
        "0.00912 ms", "0.912 ms", "9.12 ms", "91.2 ms", "912 ms",
    ]  # fmt: skip


# --- the plot --------------------------------------------------------------------------------------------


def test_ticks_are_round_numbers():
    assert nice_ticks(0, 1) == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert nice_ticks(0.84, 1.46) == [0.9, 1.0, 1.1, 1.2, 1.3, 1.4]
    assert log_ticks(0.02, 7) == [0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5]
    assert log_ticks(0.65, 1.9) == [0.7, 0.8, 0.9, 1.0]  # too few 1-2-5 ticks: every digit


def _has_colour(img: np.ndarray, bgr: tuple[int, int, int]) -> bool:
    return bool((np.abs(img.astype(int) - np.array(bgr)).sum(axis=2) < 30).any())


@pytest.mark.parametrize("spread", ["tight", "long-tail"])
def test_the_png_shows_bars_curve_and_percentile_markers(result, tmp_path, spread):
    rng = np.random.default_rng(0)
    lat = 2.0 + rng.gamma(2.0, 0.05, 400)
    if spread == "long-tail":
        lat[:6] = [9.0, 12.0, 15.0, 20.0, 30.0, 40.0]  # a 20x tail: drawn on a log axis
    shown = dataclasses.replace(result, latencies_ms=lat, stats=LatencyStats.of(lat), runs=lat.size)
    path = shown.plot_png(tmp_path / "latency.png")
    img = cv2.imread(str(path))
    assert img.shape == (600, 1280, 3)
    assert _has_colour(img[120:505, 95:610], BAR) and _has_colour(img[120:505, 735:1250], BAR)
    for _, colour in MARKERS:
        assert _has_colour(img[120:505, 735:1250], colour)
    assert (img < 128).mean() < 0.2  # mostly white background, not a smeared canvas


def test_the_plot_path_must_be_a_writable_png(result, tmp_path):
    with pytest.raises(InputError) as err:
        result.plot_png(tmp_path / "latency.jpg")
    assert str(err.value) == f"{tmp_path / 'latency.jpg'}: the plot is a PNG; expected a file name ending in .png"
    missing = tmp_path / "no" / "such" / "dir" / "latency.png"
    with pytest.raises(InputError) as err:
        result.plot_png(missing)
    assert str(err.value) == f"{missing}: cannot write the plot (is its folder there and writable?)"


# --- bench FOLDER: a convert model folder's shipped file on its evaluation data -----------------------------


def test_bench_of_a_convert_model_folder_times_its_shipped_file_on_its_eval_data(tmp_path, capsys):
    import json

    from edge.bench import bench_target
    from edge_deploy.cli import main
    from testsupport.byom_models import write_embedder_files

    d = write_embedder_files(tmp_path)
    argv = ["convert", "model", str(d / "emb.onnx"), "--target", "rpi4", "--precision", "int8", "--calib",
            str(d / "calib.npz"), "--eval", str(d / "eval.npz"), "--task", "embedding", "--input", "x=4x3x16x16",
            "-o", str(d / "net"), "--json"]  # fmt: skip
    assert main(argv) == 0
    capsys.readouterr()
    target = bench_target(d / "net")
    assert (target.model, target.inputs_npz) == (d / "net" / "emb.int8.ort", d / "eval.npz")
    assert main(["bench", str(d / "net"), "--count", "3", "--warmup", "0", "--threads", "1", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["inputs"] == f"the first batch of {d / 'eval.npz'}" and record["model"]["path"].endswith(".ort")
    (d / "eval.npz").unlink()  # as on the device, where the evaluation data is not
    assert bench_target(d / "net").inputs_npz is None and bench_target(d / "net").describe() == "seeded random values"


def test_bench_of_a_folder_with_several_models_is_refused(tmp_path, capsys):
    import json

    from edge_deploy.cli import main

    models = [{"role": "detector", "file": "a.onnx"}, {"role": "embedder", "file": "b.onnx"}]
    (tmp_path / "models.json").write_text(json.dumps({"models": models}))
    assert main(["bench", str(tmp_path)]) == 3
    assert capsys.readouterr().err == (
        f"Error: {tmp_path / 'models.json'}: lists 2 models (a.onnx, b.onnx); bench times one: give its file, or a "
        "convert model folder\n"
    )
