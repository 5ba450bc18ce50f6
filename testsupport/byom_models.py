"""Small models made in the tests for ``convert model`` (onnx.helper, seeded weights) and their data files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 9


def _save(graph: onnx.GraphProto, path: Path) -> Path:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def _init(rng: np.random.Generator, name: str, shape: tuple[int, ...], fan_in: int) -> onnx.TensorProto:
    return numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32), name)


def _image_front(nhwc: bool, uint8: bool) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto], str]:
    """Nodes that turn an NHWC and/or uint8 image input ``x`` into the NCHW float tensor the Conv takes."""
    nodes, inits, name = [], [], "x"
    if uint8:
        nodes += [
            helper.make_node("Cast", [name], ["xc"], to=TensorProto.FLOAT),
            helper.make_node("Mul", ["xc", "scale"], ["xs"]),
        ]
        inits.append(numpy_helper.from_array(np.array(1 / 255, np.float32), "scale"))
        name = "xs"
    if nhwc:
        nodes.append(helper.make_node("Transpose", [name], ["xt"], perm=[0, 3, 1, 2]))
        name = "xt"
    return nodes, inits, name


def write_embedder(
    path: Path, batch: int | str = "batch", size: int = 16, dim: int = 32, nhwc: bool = False, uint8: bool = False
) -> Path:
    """x [batch, 3, size, size] -> Conv 3->8 + ReLU -> Conv 8->16 stride 2 + ReLU -> Flatten -> Gemm -> emb
    [batch, dim].

    ``nhwc``: x is [batch, size, size, 3] (a Transpose first); ``uint8``: x is uint8, cast and scaled by 1/255.
    """
    rng = np.random.default_rng(1)
    flat = 16 * (size // 2) ** 2
    front, front_inits, first = _image_front(nhwc, uint8)
    nodes = [
        *front,
        helper.make_node("Conv", [first, "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Flatten", ["r2"], ["f"]),
        helper.make_node("Gemm", ["f", "w3", "b3"], ["emb"], transB=1),
    ]
    inits = [
        _init(rng, "w1", (8, 3, 3, 3), 27),
        _init(rng, "b1", (8,), 27),
        _init(rng, "w2", (16, 8, 3, 3), 72),
        _init(rng, "b2", (16,), 72),
        _init(rng, "w3", (dim, flat), flat),
        _init(rng, "b3", (dim,), flat),
        *front_inits,
    ]
    shape = [batch, size, size, 3] if nhwc else [batch, 3, size, size]
    graph = helper.make_graph(
        nodes,
        "embedder",
        [helper.make_tensor_value_info("x", TensorProto.UINT8 if uint8 else TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("emb", TensorProto.FLOAT, [batch, dim])],
        inits,
    )
    return _save(graph, path)


def write_token_encoder(path: Path, tokens: int = 8, width: int = 64, hidden: int = 128) -> Path:
    """x [batch, tokens, width] -> MatMul + Add -> Relu -> MatMul + Add -> mean over tokens -> emb [batch, width]:
    a transformer's feed-forward block, whose weights are MatMul constants (what ``--weight-only`` quantizes)."""
    rng = np.random.default_rng(3)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["m1"]),
        helper.make_node("Add", ["m1", "b1"], ["a1"]),
        helper.make_node("Relu", ["a1"], ["r1"]),
        helper.make_node("MatMul", ["r1", "w2"], ["m2"]),
        helper.make_node("Add", ["m2", "b2"], ["a2"]),
        helper.make_node("ReduceMean", ["a2"], ["emb"], axes=[1], keepdims=0),  # opset 17: axes an attribute
    ]
    inits = [
        _init(rng, "w1", (width, hidden), width),
        _init(rng, "b1", (hidden,), width),
        _init(rng, "w2", (hidden, width), hidden),
        _init(rng, "b2", (width,), hidden),
    ]
    graph = helper.make_graph(
        nodes,
        "token_encoder",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", tokens, width])],
        [helper.make_tensor_value_info("emb", TensorProto.FLOAT, ["batch", width])],
        inits,
    )
    return _save(graph, path)


def write_classifier(path: Path, features: int = 20, classes: int = 10) -> Path:
    """x [1, features] -> Gemm 64 + ReLU -> Gemm -> logits [1, classes] (fixed shapes)."""
    rng = np.random.default_rng(2)
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("Gemm", ["r", "w2", "b2"], ["logits"], transB=1),
    ]
    inits = [
        _init(rng, "w1", (64, features), features),
        _init(rng, "b1", (64,), features),
        _init(rng, "w2", (classes, 64), 64),
        _init(rng, "b2", (classes,), 64),
    ]
    graph = helper.make_graph(
        nodes,
        "classifier",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, features])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, classes])],
        inits,
    )
    return _save(graph, path)


def image_pairs(seed: int, pairs: int, size: int = 16) -> np.ndarray:
    """[2 * pairs, 3, size, size] float32: each base image twice, with a little noise (a retrieval set)."""
    rng = np.random.default_rng(seed)
    base = rng.standard_normal((pairs, 3, size, size)).astype(np.float32)
    views = np.repeat(base, 2, axis=0) + 0.1 * rng.standard_normal((2 * pairs, 3, size, size)).astype(np.float32)
    return views.astype(np.float32)


def features(seed: int, count: int, width: int = 20) -> np.ndarray:
    """[count, width] float32 standard normal."""
    return np.random.default_rng(seed).standard_normal((count, width)).astype(np.float32)


def write_npz(path: Path, **arrays: np.ndarray) -> Path:
    np.savez(path, **arrays)
    return path


def write_two_inputs(path: Path, width: int = 8) -> Path:
    """a [batch, width] + b [batch, width] -> Gemm -> y [batch, 4]; and a * b -> z [batch, width] (two outputs)."""
    rng = np.random.default_rng(3)
    nodes = [
        helper.make_node("Add", ["a", "b"], ["s"]),
        helper.make_node("Gemm", ["s", "w", "c"], ["y"], transB=1),
        helper.make_node("Mul", ["a", "b"], ["z"]),
    ]
    graph = helper.make_graph(
        nodes,
        "two_inputs",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", width]) for n in ("a", "b")],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4]),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", width]),
        ],
        [_init(rng, "w", (4, width), width), _init(rng, "c", (4,), width)],
    )
    return _save(graph, path)


def photo_crops(seed: int, count: int) -> list[np.ndarray]:
    """``count`` uint8 RGB crops (48 to 160 pixels a side, seeded) of skimage's sample photos."""
    from skimage import data

    photos = [data.astronaut(), data.coffee(), data.chelsea()]
    rng = np.random.default_rng(seed)
    crops = []
    for i in range(count):
        photo = photos[i % len(photos)]
        h, w = int(rng.integers(48, 161)), int(rng.integers(48, 161))
        y, x = int(rng.integers(0, photo.shape[0] - h)), int(rng.integers(0, photo.shape[1] - w))
        crops.append(np.ascontiguousarray(photo[y : y + h, x : x + w]))
    return crops


def write_photo_folder(folder: Path, seed: int, count: int) -> Path:
    """A folder of ``count`` real photo crops (``photo_crops``), alternately .jpg and .png."""
    from edge.imageio import save_image

    folder.mkdir(parents=True, exist_ok=True)
    for i, crop in enumerate(photo_crops(seed, count)):
        save_image(folder / f"img{i:03d}.{'jpg' if i % 2 else 'png'}", crop)
    return folder


def write_embedder_files(d: Path) -> Path:
    """``d/emb.onnx`` (``write_embedder``), ``d/calib.npz`` and ``d/eval.npz`` (16 disjoint image pairs each, of
    input ``x``) and ``d/const.npz`` (8 constant images): what the convert model tests convert."""
    write_embedder(d / "emb.onnx")
    write_npz(d / "calib.npz", x=image_pairs(0, 16))
    write_npz(d / "eval.npz", x=image_pairs(1, 16))
    write_npz(d / "const.npz", x=np.full((8, 3, 16, 16), 0.5, np.float32))
    return d
