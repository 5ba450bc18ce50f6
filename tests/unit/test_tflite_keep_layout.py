"""``converters.tflite.keep_layout`` without onnx2tf: how outputs are matched back to the ONNX ones, the check that
onnx2tf kept the inputs, and the ONNX op a failed onnx2tf run names (``convert.failed_op``). The conversions
themselves: tests/integration/test_byom_tflite_twin.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from converters.tflite.convert import TensorInfo, failed_op
from converters.tflite.keep_layout import _check_inputs_kept, match_outputs_keep_layout, onnx2tf_name
from edge.errors import ConversionError, ValidationError


def _t(name: str, *shape: int, dtype: str = "float32") -> TensorInfo:
    return TensorInfo(name, tuple(shape), dtype)


def test_onnx2tf_names():
    assert [onnx2tf_name(n) for n in ("input_ids", "a:0", "/enc/x")] == ["input_ids", "a__0", "wa/enc/x"]


def test_outputs_are_matched_by_name_then_shape_then_channels_last():
    outputs = (_t("PartitionedCall:1", 1, 5, 7, 3), _t("hidden", 1, 8, 64), _t("PartitionedCall:0", 1, 384))
    wanted = {"pooled": (1, 384), "hidden": (1, 8, 64), "maps": (1, 3, 5, 7)}
    assert match_outputs_keep_layout(outputs, wanted, "m.tflite") == {
        "hidden": ("hidden", None),
        "pooled": ("PartitionedCall:0", None),
        "maps": ("PartitionedCall:1", (0, 3, 1, 2)),  # NHWC back to the ONNX NCHW
    }


def test_an_output_without_a_counterpart_is_refused():
    with pytest.raises(ValidationError) as err:
        match_outputs_keep_layout((_t("out", 1, 10),), {"emb": (1, 384)}, "m.tflite")
    assert (
        str(err.value) == "m.tflite: no output for ONNX 'emb' [1, 384]; outputs not matched by name: {'out': [1, 10]}"
    )


def test_inputs_onnx2tf_changed_are_refused():
    _check_inputs_kept((_t("ids", 1, 64, dtype="int64"),), {"ids": (1, 64)}, Path("m.tflite"))
    with pytest.raises(ConversionError) as err:
        _check_inputs_kept((_t("x", 1, 64, 8),), {"x": (1, 8, 64)}, Path("m.tflite"))
    assert str(err.value) == "m.tflite: onnx2tf wrote inputs x=1x64x8; expected the ONNX inputs unchanged, x=1x8x64"


def test_the_op_onnx2tf_failed_on_is_read_from_its_log(tmp_path):
    """Lines as onnx2tf 1.29.24 wrote them converting all-MiniLM-L6-v2 (colour codes included)."""
    log = tmp_path / "onnx2tf.log"
    log.write_text(
        "\x1b[32mINFO:\x1b[0m \x1b[35monnx_op_type\x1b[0m: Div\x1b[35m onnx_op_name\x1b[0m: node_div\n"
        "\x1b[32mINFO:\x1b[0m \x1b[35monnx_op_type\x1b[0m: ReduceL2\x1b[35m onnx_op_name\x1b[0m: node_linalg_vector_norm\n"
        "\x1b[31mERROR:\x1b[0m The trace log is below.\n"
        "\x1b[31mERROR:\x1b[0m input_onnx_file_path: minilm.fp32.onnx\n"
        "\x1b[31mERROR:\x1b[0m onnx_op_name: node_linalg_vector_norm\n"
    )
    assert failed_op(log) == "ReduceL2 'node_linalg_vector_norm'"
    log.write_text("INFO: onnx_op_type: Div onnx_op_name: node_div\nTraceback (most recent call last):\n")
    assert failed_op(log) is None
    assert failed_op(tmp_path / "missing.log") is None


@pytest.mark.parametrize("opset", [17, 18])  # axes an attribute, then an input
def test_reduce_l2_is_rewritten_as_the_same_function(tmp_path, opset):
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from converters.tflite.prep import reduce_l2_as_sum_square

    axes = {"axes": [1]} if opset == 17 else {}
    node = helper.make_node("ReduceL2", ["x"] if opset == 17 else ["x", "axes"], ["n"], keepdims=1, **axes)
    inits = [] if opset == 17 else [numpy_helper.from_array(np.array([1], np.int64), "axes")]
    graph = helper.make_graph([node], "l2", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5])],
                              [helper.make_tensor_value_info("n", TensorProto.FLOAT, [2, 1])], inits)  # fmt: skip
    path = tmp_path / "l2.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), str(path))
    x = np.random.default_rng(0).standard_normal((2, 5)).astype(np.float32)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert reduce_l2_as_sum_square(path) == 1
    assert [n.op_type for n in onnx.load(str(path)).graph.node] == ["ReduceSumSquare", "Sqrt"]
    got = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-6)
