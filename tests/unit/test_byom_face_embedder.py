"""A user's face embedder (``converters.byom.face_embedder``, ``convert face --embedder``): what is accepted, the
shipped copy, and every bad input refused with its exact text before anything is written. Small models made
here with onnx.helper (``byom_models``), run by real onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from converters.byom.face_embedder import (
    EmbedderOptions,
    Layout,
    check_copy,
    read_user_embedder,
    write_shipped_copy,
)
from edge.errors import InputError
from edge.face.embed import FaceEmbedder, nchw_float32
from edge_deploy.cli import main
from testsupport.byom_models import _save, write_embedder


def _pooling(path, input_shape, output_shape=("N", 3), flatten=True, outputs=1, batch_dim="N"):
    """x [input_shape] -> GlobalAveragePool (-> Flatten) -> y: an 'embedder' of any spatial size."""
    nodes = [helper.make_node("GlobalAveragePool", ["x"], ["p"])]
    nodes.append(helper.make_node("Flatten", ["p"], ["y"]) if flatten else helper.make_node("Identity", ["p"], ["y"]))
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(output_shape))]
    if outputs == 2:
        nodes.append(helper.make_node("Identity", ["p"], ["z"]))
        outs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [batch_dim, 3, 1, 1]))
    graph = helper.make_graph(
        nodes, "pool", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(input_shape))], outs
    )
    return _save(graph, path)


def _refused(options: EmbedderOptions) -> str:
    with pytest.raises(InputError) as info:
        read_user_embedder(options)
    return str(info.value)


def test_a_fixed_nchw_embedder_is_read_and_shipped_with_its_normalisation(tmp_path):
    model = write_embedder(tmp_path / "emb.onnx", size=16, dim=32)
    options = EmbedderOptions(model, mean=(127.5,), std=(128.0,))
    user, proto = read_user_embedder(options)
    assert (user.layout, user.chip_size, user.batch, user.descriptor_size) == (Layout.NCHW, 16, "batch", 32)
    copy = write_shipped_copy(user, proto, tmp_path / "face_embedder.onnx")
    shipped = onnx.load(str(copy))
    assert [i.name for i in shipped.graph.input] == ["chip"] and [o.name for o in shipped.graph.output] == [
        "descriptor"
    ]
    assert [n.op_type for n in shipped.graph.node][:2] == ["Sub", "Mul"]
    chips = np.random.default_rng(3).integers(0, 256, (5, 16, 16, 3), dtype=np.uint8)
    with FaceEmbedder(copy) as embedder:
        assert (embedder.chip_size, embedder.descriptor_size) == (16, 32)
        ours = embedder.embed(chips)
    check = check_copy(user, chips, ours)
    assert check.ok and check.max_abs_diff < 1e-5 and check.shape == (5, 32)
    # the user's model fed by hand: (pixel - 127.5) / 128, NCHW
    import onnxruntime as ort

    x = ((chips.astype(np.float32) - 127.5) / 128).transpose(0, 3, 1, 2)
    ref = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert np.max(np.abs(ref - ours)) < 1e-5


def test_an_nhwc_embedder_with_a_batch_of_one_and_raw_pixels(tmp_path):
    model = write_embedder(tmp_path / "emb.onnx", batch=1, size=16, dim=8, nhwc=True)
    user, proto = read_user_embedder(EmbedderOptions(model))
    assert (user.layout, user.batch, user.descriptor_size) == (Layout.NHWC, 1, 8)
    copy = write_shipped_copy(user, proto, tmp_path / "face_embedder.onnx")
    assert "Sub" not in [n.op_type for n in onnx.load(str(copy)).graph.node]  # raw pixels: no normalisation
    chips = np.random.default_rng(4).integers(0, 256, (3, 16, 16, 3), dtype=np.uint8)
    with FaceEmbedder(copy) as embedder:  # a batch of one: fed face by face
        assert check_copy(user, chips, embedder.embed(chips)).max_abs_diff == 0.0


def test_a_dynamic_spatial_size_is_fixed_by_chip_size(tmp_path):
    model = _pooling(tmp_path / "pool.onnx", ["N", 3, "H", "W"])
    message = _refused(EmbedderOptions(model))
    assert message == (
        f"{model}: input 'x' has dynamic spatial size (Nx3xHxW); give the chip side with --chip-size S, "
        "e.g. --chip-size 112"
    )
    user, proto = read_user_embedder(EmbedderOptions(model, chip_size=24))
    assert (user.chip_size, user.descriptor_size) == (24, 3)
    copy = write_shipped_copy(user, proto, tmp_path / "face_embedder.onnx")
    with FaceEmbedder(copy) as embedder:
        assert (embedder.chip_size, embedder.descriptor_size) == (24, 3)


def test_not_an_onnx_file(tmp_path):
    bad = tmp_path / "emb.onnx"
    bad.write_bytes(b"\x00\x01 not a protobuf at all")
    assert _refused(EmbedderOptions(bad)).startswith(f"{bad}: not an ONNX model, or a corrupt one (")
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    assert _refused(EmbedderOptions(empty)) == (
        f"{empty}: not an ONNX model, or a corrupt one (no IR version or no graph nodes)"
    )
    missing = tmp_path / "missing.onnx"
    assert _refused(EmbedderOptions(missing)) == (f"{missing}: the model file does not exist")


def test_more_than_one_input(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3, 16, 16])
    out = helper.make_tensor_value_info("s", TensorProto.FLOAT, ["N", 3, 16, 16])
    model = _save(
        helper.make_graph([helper.make_node("Add", ["x", "y"], ["s"])], "two", [x, y], [out]), tmp_path / "two.onnx"
    )
    assert _refused(EmbedderOptions(model)) == (
        f"{model}: 2 inputs (x=Nx3x16x16, y=Nx3x16x16); expected one input, the face chip"
    )


@pytest.mark.parametrize(
    ("shape", "why"),
    [
        (["N", 20], "has shape Nx20, not an image; expected an RGB image, [N,3,S,S] (NCHW) or [N,S,S,3] (NHWC)"),
        (["N", 1, 16, 16], "has shape Nx1x16x16: no axis of 3 channels; expected an RGB image, [N,3,S,S] (NCHW) or "
         "[N,S,S,3] (NHWC)"),
        (["N", 3, 16, 12], "has shape Nx3x16x12: a 16x12 chip; expected a square chip (the alignment cuts square "
         "chips)"),
        ([4, 3, 16, 16], "has a fixed batch of 4 (4x3x16x16); expected 1 or a dynamic batch (a frame has any number "
         "of faces)"),
    ],
)  # fmt: skip
def test_an_input_that_is_not_a_face_chip(tmp_path, shape, why):
    if len(shape) == 2:
        model = _flat(tmp_path / "flat.onnx")
    else:
        model = _pooling(tmp_path / "pool.onnx", shape, (shape[0], shape[1]))
    assert _refused(EmbedderOptions(model)) == f"{model}: input 'x' {why}"


def _flat(path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 20])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 20])
    return _save(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "flat", [x], [y]), path)


def test_an_input_of_another_type(tmp_path):
    model = write_embedder(tmp_path / "emb.onnx", size=16, uint8=True)
    assert _refused(EmbedderOptions(model)) == f"{model}: input 'x' is uint8; expected float32 chips"


def test_an_output_that_is_not_one_descriptor_per_face(tmp_path):
    four_d = _pooling(tmp_path / "pool4.onnx", ["N", 3, 16, 16], ("N", 3, 1, 1), flatten=False)
    assert _refused(EmbedderOptions(four_d)) == (
        f"{four_d}: output y=Nx3x1x1; expected one output, a 1-D descriptor per face ([N,D])"
    )
    two = _pooling(tmp_path / "pool2.onnx", ["N", 3, 16, 16], outputs=2)
    assert _refused(EmbedderOptions(two)) == (
        f"{two}: 2 outputs (y=Nx3, z=Nx3x1x1); expected one output, a 1-D descriptor per face ([N,D])"
    )


def test_chip_flags_are_checked(tmp_path):
    model = write_embedder(tmp_path / "emb.onnx", size=16)
    assert _refused(EmbedderOptions(model, chip_size=24)) == (
        f"--chip-size 24: {model}'s input 'x' is fixed to 16 (batchx3x16x16)"
    )
    assert _refused(EmbedderOptions(model, chip_size=0)) == "--chip-size 0: expected a chip side in 1..1024 pixels"
    assert (
        _refused(EmbedderOptions(model, mean=(1.0, 2.0))) == "--chip-mean 1,2: expected 1 or 3 finite numbers (R,G,B)"
    )
    assert _refused(EmbedderOptions(model, std=(0.0,))) == "--chip-std 0: expected numbers > 0"
    assert _refused(EmbedderOptions(model, std=(float("nan"),))) == (
        "--chip-std nan: expected 1 or 3 finite numbers (R,G,B)"
    )


def test_the_cli_refuses_bad_input_and_leaves_nothing(tmp_path, capsys):
    bad = tmp_path / "emb.onnx"
    bad.write_bytes(b"")
    out = tmp_path / "out"
    code = main(["convert", "face", "--target", "rpi4", "--precision", "fp32", "--embedder", str(bad), "-o", str(out)])
    assert code == 3 and not out.exists()
    assert capsys.readouterr().err == (
        f"Error: {bad}: not an ONNX model, or a corrupt one (no IR version or no graph nodes)\n"
    )
    code = main(["convert", "face", "--target", "rpi4", "--licence", "MIT", "-o", str(out)])
    assert code == 3 and not out.exists()
    assert capsys.readouterr().err == "Error: --licence describes a user embedder; it needs --embedder MODEL.onnx\n"
    model = write_embedder(tmp_path / "good.onnx", size=16)
    args = ["convert", "face", "-t", "rpi4", "--embedder", str(model), "--format", "both", "-o", str(out)]
    assert main(args) == 3 and not out.exists()
    assert capsys.readouterr().err == (
        f"Error: --embedder {model} with --format both: the TFLite twins are made for dlib's embedder only; use "
        "--format onnx\n"
    )


@pytest.mark.parametrize("shape", [(1, 150, 150, 3), (4, 16, 16, 3), (2, 112, 112, 3)])
def test_chips_reach_an_nchw_embedder_as_the_same_values(shape):
    """nchw_float32 (OpenCV's blobFromImages) gives what numpy's transposed float32 copy gave, value for value."""
    chips = np.random.default_rng(sum(shape)).integers(0, 256, shape, dtype=np.uint8)
    got = nchw_float32(chips)
    assert got.dtype == np.float32 and got.flags.c_contiguous
    assert np.array_equal(got, np.ascontiguousarray(chips.transpose(0, 3, 1, 2), dtype=np.float32))
