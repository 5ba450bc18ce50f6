"""``convert model`` refuses bad input with one clear message, and leaves nothing in the output folder."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from converters.byom.build import ModelJob, convert_model
from converters.byom.gate import GateThresholds, Task
from converters.byom.source import parse_input_specs
from edge.errors import InputError
from edge.profiles import Precision, load_profile
from testsupport.byom_models import image_pairs, write_classifier, write_embedder, write_npz


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("byom-bad")
    write_embedder(d / "emb.onnx")
    write_classifier(d / "cls.onnx")
    write_npz(d / "calib.npz", x=image_pairs(0, 8))
    write_npz(d / "eval.npz", x=image_pairs(1, 8))
    return d


def _refused(files: Path, tmp_path: Path, **kw) -> str:
    """The InputError's text; the output folder and its parent hold nothing from the attempt."""
    out = tmp_path / "out"
    base: dict = dict(
        model=files / "emb.onnx",
        out_dir=out,
        profile=load_profile("rpi4"),
        precision=Precision.INT8,
        task=Task.EMBEDDING,
        evaluation=files / "eval.npz",
        calibration=files / "calib.npz",
        input_shapes={"x": (4, 3, 16, 16)},
    )
    base.update(kw)
    with pytest.raises(InputError) as err:
        convert_model(ModelJob(**base))
    assert not out.exists() or not any(out.iterdir())
    assert not [p for p in tmp_path.iterdir() if ".partial-" in p.name]
    return str(err.value)


def test_not_onnx(files, tmp_path):
    bad = tmp_path / "net.onnx"
    bad.write_bytes(b"\x00\x01 this is not a protobuf \xff" * 10)
    message = _refused(files, tmp_path, model=bad)
    assert message.startswith(f"{bad}: not an ONNX model, or a corrupt one (")


def test_truncated_onnx(files, tmp_path):
    cut = tmp_path / "cut.onnx"
    data = (files / "emb.onnx").read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    message = _refused(files, tmp_path, model=cut)
    assert message.startswith(f"{cut}: not an ONNX model, or a corrupt one (")


def test_an_op_onnxruntime_lacks(files, tmp_path):
    """Named before any conversion, every node at fault at once (converters.byom.target_ops)."""
    import onnx
    from onnx import TensorProto, helper

    nodes = [
        helper.make_node("Frobnicate", ["x"], ["a"], name="f1", domain="com.example"),
        helper.make_node("Frobnicate", ["a"], ["b"], name="f2", domain="com.example"),
        helper.make_node("Twiddle", ["b"], ["y"], domain="com.example"),
    ]
    graph = helper.make_graph(
        nodes,
        "custom",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    proto.ir_version = 9
    model = tmp_path / "custom.onnx"
    onnx.save(proto, str(model))
    data = write_npz(tmp_path / "e.npz", x=np.ones((2, 4), np.float32))
    out = tmp_path / "out"
    job = ModelJob(model, out, load_profile("rpi4"), Precision.FP32, Task.RAW, data)
    with pytest.raises(InputError) as err:
        convert_model(job)
    import onnxruntime

    v = onnxruntime.__version__
    assert str(err.value) == (
        f"{model}: onnxruntime {v}, the runtime of rpi4, cannot load it; no CPU kernel for com.example:Frobnicate-1 "
        "(node 'f1', 'f2'); com.example:Twiddle-1 (node '#2'); onnxruntime says: Fatal error: "
        "com.example:Frobnicate(-1) is not a registered function/op. Re-export the model without these ops or at "
        "an opset the runtime takes (the model's: ai.onnx 17, com.example 1)"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["custom.onnx", "e.npz"]  # no output, no partial folder


def test_missing_model(files, tmp_path):
    gone = tmp_path / "gone.onnx"
    assert _refused(files, tmp_path, model=gone) == f"{gone}: the model file does not exist"


def test_dynamic_shape_without_input(files, tmp_path):
    assert _refused(files, tmp_path, input_shapes={}) == (
        f"{files / 'emb.onnx'}: input 'x' has dynamic shape batchx3x16x16; give its shape with --input x=Nx3x16x16"
    )


def test_input_naming_no_input(files, tmp_path):
    assert _refused(files, tmp_path, input_shapes={"image": (1, 3, 16, 16)}) == (
        f"--input image: {files / 'emb.onnx'} has no input 'image'; its inputs are x"
    )


def test_input_of_the_wrong_rank(files, tmp_path):
    assert _refused(files, tmp_path, input_shapes={"x": (1, 3, 16)}) == (
        f"--input x=1x3x16: 3 dimensions, but the model's input 'x' has 4 (batchx3x16x16) in {files / 'emb.onnx'}"
    )


def test_input_against_a_fixed_dimension(files, tmp_path):
    assert _refused(files, tmp_path, input_shapes={"x": (1, 3, 32, 32)}) == (
        f"--input x=1x3x32x32: dimension 2 is fixed to 16 in {files / 'emb.onnx'} (batchx3x16x16)"
    )


@pytest.mark.parametrize("value", ["x", "x=", "x=1x0x3", "x=1,3", "=1x3", "x=-1x3"])
def test_input_spec_syntax(value):
    with pytest.raises(InputError) as err:
        parse_input_specs([value])
    assert str(err.value) == (
        f"--input {value!r}: expected NAME=DIMxDIM... with positive whole dimensions, e.g. input=1x3x224x224"
    )


def test_input_given_twice():
    with pytest.raises(InputError) as err:
        parse_input_specs(["x=1x3", "x=2x3"])
    assert str(err.value) == "--input 'x=2x3': input 'x' is given twice"


def test_calibration_without_the_input(files, tmp_path):
    calib = write_npz(tmp_path / "c.npz", image=image_pairs(0, 4))
    assert _refused(files, tmp_path, calibration=calib) == (
        f"--calib {calib}: no array named 'x'; expected one array per model input (x); the file has image"
    )


def test_calibration_of_the_wrong_shape(files, tmp_path):
    calib = write_npz(tmp_path / "c.npz", x=np.zeros((8, 3, 32, 32), np.float32))
    assert _refused(files, tmp_path, calibration=calib) == (
        f"--calib {calib}: array 'x' has shape 8x3x32x32; expected Nx3x16x16 with N a multiple of 4 "
        "(samples stacked on axis 0; the model's input 'x' is 4x3x16x16)"
    )


def test_calibration_not_a_multiple_of_the_batch(files, tmp_path):
    calib = write_npz(tmp_path / "c.npz", x=np.ones((6, 3, 16, 16), np.float32))
    assert _refused(files, tmp_path, calibration=calib) == (
        f"--calib {calib}: array 'x' holds 6 samples; expected a multiple of 4, the batch of the model's input 'x' "
        "(4x3x16x16)"
    )


def test_calibration_of_the_wrong_dtype(files, tmp_path):
    calib = write_npz(tmp_path / "c.npz", x=image_pairs(0, 4).astype(np.float64))
    assert _refused(files, tmp_path, calibration=calib) == (
        f"--calib {calib}: array 'x' has dtype float64; expected float32 (the model's input 'x')"
    )


def test_empty_calibration(files, tmp_path):
    calib = write_npz(tmp_path / "c.npz", x=np.zeros((0, 3, 16, 16), np.float32))
    assert _refused(files, tmp_path, calibration=calib) == (
        f"--calib {calib}: array 'x' holds no samples (shape 0x3x16x16); expected at least 4"
    )


def test_calibration_with_nan(files, tmp_path):
    data = image_pairs(0, 4)
    data[0, 0, 0, :3] = np.nan
    calib = write_npz(tmp_path / "c.npz", x=data)
    assert _refused(files, tmp_path, calibration=calib) == (
        f"--calib {calib}: array 'x' has 3 NaN or infinite values; expected finite numbers"
    )


def test_calibration_with_an_extra_array(files, tmp_path):
    calib = write_npz(tmp_path / "c.npz", x=image_pairs(0, 4), labels=np.arange(8))
    assert _refused(files, tmp_path, calibration=calib) == (
        f"--calib {calib}: arrays 'labels' are no input of the model (its inputs are x)"
    )


def test_calibration_that_is_not_npz(files, tmp_path):
    calib = tmp_path / "c.npz"
    calib.write_bytes(b"PK\x03\x04 not really a zip")
    assert _refused(files, tmp_path, calibration=calib).startswith(f"--calib {calib}: not a readable .npz file (")


def test_calibration_that_is_one_npy_array(files, tmp_path):
    calib = tmp_path / "c.npy"
    np.save(calib, image_pairs(0, 4))
    assert _refused(files, tmp_path, calibration=calib) == (
        f"--calib {calib}: a single .npy array; expected a .npz with one array per model input"
    )


def test_eval_of_the_wrong_shape(files, tmp_path):
    evaluation = write_npz(tmp_path / "e.npz", x=np.zeros((8, 16, 16, 3), np.float32))
    assert _refused(files, tmp_path, evaluation=evaluation) == (
        f"--eval {evaluation}: array 'x' has shape 8x16x16x3; expected Nx3x16x16 with N a multiple of 4 "
        "(samples stacked on axis 0; the model's input 'x' is 4x3x16x16)"
    )


def test_int8_without_calibration(files, tmp_path):
    assert _refused(files, tmp_path, calibration=None) == (
        f"{files / 'emb.onnx'}: int8 needs --calib FILE.npz or DIR (representative inputs: one array per model "
        "input, or a folder of images) to set the activation ranges (or --dynamic: activations quantized at run "
        "time; or --weight-only: 8-bit weights, float activations); nothing else is used in its place"
    )


def test_eval_identical_to_calibration(files, tmp_path):
    same = write_npz(tmp_path / "same.npz", x=image_pairs(0, 8))
    message = _refused(files, tmp_path, evaluation=same)
    assert message.startswith(f"--eval {same} is the same data as --calib {files / 'calib.npz'} (sha256 ")
    assert message.endswith("...); the gate needs evaluation data disjoint from the calibration data")


def test_eval_that_is_the_calibration_reordered(files, tmp_path):
    reordered = write_npz(tmp_path / "r.npz", x=image_pairs(0, 8)[::-1].copy())
    assert _refused(files, tmp_path, evaluation=reordered) == (
        f"--eval {reordered}: all 16 samples are also in --calib {files / 'calib.npz'}; the gate needs evaluation "
        "data disjoint from the calibration data"
    )


def test_embedding_gate_needs_two_samples(files, tmp_path):
    one = write_npz(tmp_path / "one.npz", x=image_pairs(5, 1)[:1])
    assert _refused(files, tmp_path, evaluation=one, input_shapes={"x": (1, 3, 16, 16)}) == (
        f"--eval {one}: 1 sample; the embedding gate ranks neighbours and needs at least 2"
    )


def test_output_folder_in_use(files, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(InputError) as err:
        convert_model(
            ModelJob(files / "emb.onnx", out, load_profile("rpi4"), Precision.FP32, Task.RAW, files / "eval.npz")
        )
    assert str(err.value) == f"-o {out}: exists and is not an empty folder; choose a new output folder"
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


@pytest.mark.parametrize(
    ("thresholds", "message"),
    [
        (GateThresholds(min_cosine=float("nan")), "--min-cosine nan; expected a number in (0, 1]"),
        (GateThresholds(min_top1=1.5), "--min-top1 1.5; expected a number in (0, 1]"),
        (GateThresholds(max_rel_error=0.0), "--max-rel-error 0.0; expected a finite number > 0"),
        (GateThresholds(max_abs_error=float("inf")), "--max-abs-error inf; expected a finite number > 0"),
    ],
)
def test_bad_thresholds(files, tmp_path, thresholds, message):
    assert _refused(files, tmp_path, thresholds=thresholds) == message


def test_dynamic_is_int8_and_not_calibrated(files, tmp_path):
    assert _refused(files, tmp_path, dynamic=True, precision=Precision.FP32, calibration=None) == (
        "--dynamic is a kind of int8; got --precision fp32"
    )
    assert _refused(files, tmp_path, dynamic=True) == (
        f"--calib {files / 'calib.npz'}: dynamic INT8 is not calibrated; drop --calib or --dynamic"
    )


def test_weight_only_is_int8_not_calibrated_and_not_dynamic(files, tmp_path):
    assert _refused(files, tmp_path, weight_only=True, precision=Precision.FP32, calibration=None) == (
        "--weight-only is a kind of int8; got --precision fp32"
    )
    assert _refused(files, tmp_path, weight_only=True) == (
        f"--calib {files / 'calib.npz'}: weight-only INT8 is not calibrated; drop --calib or --weight-only"
    )
    assert _refused(files, tmp_path, weight_only=True, dynamic=True, calibration=None) == (
        "--dynamic and --weight-only are two kinds of int8; choose one"
    )


def test_fp16_is_not_offered(files, tmp_path):
    assert _refused(files, tmp_path, precision=Precision.FP16) == "--precision fp16: convert model builds fp32, int8"


def test_an_fp32_copy_is_held_to_its_bound_relative_to_large_outputs():
    """float32 rounding grows with the values: a logit near 67 off by 1.2e-4 (relative 1.8e-6) is rounding, on
    any host; the same absolute difference on a unit-scale output, or 1e-3 relative on the logits, is not."""
    from converters.byom.gate import fp32_failures

    def figures(max_abs: float, scale: float) -> dict:
        return {"outputs": {"y": {"max_abs": max_abs, "max_rel": max_abs / scale if scale > 1 else max_abs}}}

    assert fp32_failures(figures(1.22e-4, 66.7), 1e-4) == []
    assert fp32_failures(figures(1.22e-4, 0.8), 1e-4) == [
        "output 'y': fp32 copy differs from the source by 0.000122 (relative 0.000122); expected at most 0.0001, "
        "relative to the output's largest value where that is above 1"
    ]
    assert len(fp32_failures(figures(0.0667, 66.7), 1e-4)) == 1
