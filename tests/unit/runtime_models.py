"""Small real ONNX models for the runtime and bench tests (built with onnx.helper, run by real onnxruntime)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 9


def conv_weights(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The conv model's weights (4 filters, 3x3 over 3 channels) and biases."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal((4, 3, 3, 3)).astype(np.float32), rng.standard_normal(4).astype(np.float32)


def _save(graph: onnx.GraphProto, path: Path) -> Path:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def write_conv_relu(path: Path, batch: int | str = "batch", size: int = 16) -> Path:
    """Conv(3->4, 3x3, pad 1) + bias + ReLU on ``x`` [batch, 3, size, size] -> ``y``."""
    w, b = conv_weights()
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c"], ["y"]),
        ],
        "conv_relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4, size, size])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    return _save(graph, path)


def write_embedding(path: Path, vocab: int = 100, dim: int = 8) -> Path:
    """Gather rows of a [vocab, dim] table by int64 ``ids`` [1, seq] -> ``emb`` [1, seq, dim]."""
    table = np.arange(vocab * dim, dtype=np.float32).reshape(vocab, dim)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["emb"], axis=0)],
        "embedding",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, "seq"])],
        [helper.make_tensor_value_info("emb", TensorProto.FLOAT, [1, "seq", dim])],
        [numpy_helper.from_array(table, "table")],
    )
    return _save(graph, path)


def write_add(path: Path) -> Path:
    """``z = a + b`` with independent dynamic dims "n" and "m": mismatched feeds fail inside the runtime."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["z"])],
        "add",
        [
            helper.make_tensor_value_info("a", TensorProto.FLOAT, ["n"]),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, ["m"]),
        ],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["k"])],
    )
    return _save(graph, path)


def write_unknown_op(path: Path) -> Path:
    """A well-formed ModelProto whose one node is an operator no runtime has."""
    graph = helper.make_graph(
        [helper.make_node("NoSuchOperator", ["x"], ["y"], domain="example.unknown")],
        "unknown",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid("example.unknown", 1)]
    )
    model.ir_version = IR_VERSION
    onnx.save(model, str(path))
    return path


def conv_relu_reference(x: np.ndarray) -> np.ndarray:
    """What ``write_conv_relu``'s model computes, in plain numpy (float64)."""
    w, b = conv_weights()
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    n, _, h, wd = x.shape
    out = np.zeros((n, 4, h, wd))
    for dy in range(3):
        for dx in range(3):
            out += np.einsum("nchw,oc->nohw", padded[:, :, dy : dy + h, dx : dx + wd], w[:, :, dy, dx])
    return np.maximum(out + b[None, :, None, None], 0.0)
