"""``convert face --detector MODEL``: what is refused before anything is written (no real detector needed).

The models here are made in the test with onnx's helpers: a wrong input layout, and BlazeFace's input with
outputs of other shapes.
"""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from converters.byom.face_detector import CONTRACT, read_user_detector
from edge.errors import InputError
from edge_deploy.cli import main


def _model(path: Path, input_shape: list[int], outputs: dict[str, list[int]]) -> Path:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, input_shape)
    nodes, outs = [], []
    for name, shape in outputs.items():  # each output a constant of its shape (the input only has to be read)
        size = 1
        for d in shape:
            size *= d
        value = helper.make_tensor(f"{name}_v", TensorProto.FLOAT, shape, [0.0] * size)
        nodes.append(helper.make_node("Constant", [], [f"{name}_c"], value=value))
        nodes.append(helper.make_node("Identity", [f"{name}_c"], [name]))
        outs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, shape))
    nodes.append(helper.make_node("Identity", ["x"], ["x_read"]))
    outs.append(helper.make_tensor_value_info("x_read", TensorProto.FLOAT, input_shape))
    graph = helper.make_graph(nodes, "g", [x], outs)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_a_model_of_another_layout_is_refused_naming_what_was_expected(tmp_path) -> None:
    chw = _model(tmp_path / "chw.onnx", [1, 3, 192, 192], {"boxes": [1, 2304, 16]})
    with pytest.raises(InputError) as err:
        read_user_detector(chw)
    assert str(err.value) == (
        f"--detector {chw}: {chw}: inputs [(1, 3, 192, 192)]; expected one BlazeFace input (1, 128, 128, 3) or "
        f"(1, 192, 192, 3); expected {CONTRACT}"
    )


def test_blazeface_s_input_with_other_outputs_is_refused(tmp_path) -> None:
    wrong = _model(tmp_path / "wrong.onnx", [1, 192, 192, 3], {"boxes": [1, 2304, 12], "scores": [1, 2304, 1]})
    with pytest.raises(InputError) as err:
        read_user_detector(wrong)
    message = str(err.value)
    assert message.startswith(f"--detector {wrong}: {wrong}: outputs ")
    assert "expected BlazeFace's (1, 2304, 16) regressors and (1, 2304, 1) scores" in message
    assert message.endswith(f"expected {CONTRACT}")


def test_the_cli_refuses_before_writing_anything(tmp_path, capsys) -> None:
    out = tmp_path / "out"
    missing = tmp_path / "nope.tflite"
    code = main(["convert", "face", "--target", "rpi4", "--detector", str(missing), "-o", str(out)])
    assert code != 0 and not out.exists()
    assert capsys.readouterr().err == f"Error: --detector {missing}: no such file; expected {CONTRACT}\n"
    code = main(["convert", "face", "--target", "rpi4", "--detector-licence", "MIT", "-o", str(out)])
    assert code != 0 and not out.exists()
    assert capsys.readouterr().err == "Error: --detector-licence describes a user detector; it needs --detector MODEL\n"
