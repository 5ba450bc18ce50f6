"""Proof that the ONNX export of dlib's face ResNet computes dlib's own face descriptor.

Chips are real: faces dlib itself finds (HOG detector, score >= 0.3) and aligns (5-point shape predictor,
``get_face_chip(img, shape, 150, 0.25)``) in photos shipped by installed packages (scikit-image's
astronaut, insightface's t1.jpg with six people and Tom_Hanks_54745.png), each also flipped, brightened
and rotated by 8 degrees before detection. The reference is ``dlib.face_recognition_model_v1``.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path

import cv2
import dlib
import numpy as np
import pytest

from converters.face.dlib_resnet import export_dlib_embedder
from converters.face.facedata import package_dir
from converters.sources import DLIB_RESNET
from edge.errors import InferenceError, InputError
from edge.face.embed import FaceEmbedder
from edge.face.types import DLIB_SAME_PERSON_THRESHOLD

pytestmark = pytest.mark.integration

#: Required agreement with dlib (max abs difference over all descriptor values).
DLIB_TOLERANCE = 1e-4
MIN_DETECTION_SCORE = 0.3


def _insightface_images() -> Path:
    return package_dir("insightface") / "data" / "images"  # located, never imported


def _read_rgb(path: Path) -> np.ndarray:
    image = cv2.imread(str(path), cv2.IMREAD_COLOR)
    assert image is not None, f"cannot read {path}"
    return cv2.cvtColor(image, cv2.COLOR_BGR2RGB)


def _rotate(image: np.ndarray, degrees: float) -> np.ndarray:
    h, w = image.shape[:2]
    matrix = cv2.getRotationMatrix2D((w / 2, h / 2), degrees, 1.0)
    return cv2.warpAffine(image, matrix, (w, h), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT)


VARIANTS = {
    "orig": lambda im: im,
    "flip": lambda im: np.ascontiguousarray(im[:, ::-1]),
    "bright": lambda im: np.clip(im.astype(np.int16) + 40, 0, 255).astype(np.uint8),
    "rot8": lambda im: _rotate(im, 8.0),
}


@pytest.fixture(scope="module")
def chips() -> list[tuple[str, np.ndarray]]:
    """(label, uint8 [150,150,3] RGB chip) for every face dlib finds in every photo variant."""
    from skimage import data

    images = _insightface_images()
    photos = {
        "astronaut": (data.astronaut(), 1),
        "t1": (_read_rgb(images / "t1.jpg"), 1),
        "hanks": (_read_rgb(images / "Tom_Hanks_54745.png"), 2),  # 112x112: upsample twice to find it
    }
    detector = dlib.get_frontal_face_detector()
    landmarks = DLIB_RESNET.locate().parent / "shape_predictor_5_face_landmarks.dat"
    predictor = dlib.shape_predictor(str(landmarks))
    out = []
    for name, (photo, upsample) in photos.items():
        for variant, change in VARIANTS.items():
            image = change(photo)
            rects, scores, _ = detector.run(image, upsample, 0.0)
            for i, (rect, score) in enumerate(zip(rects, scores, strict=True)):
                if score >= MIN_DETECTION_SCORE:
                    chip = dlib.get_face_chip(image, predictor(image, rect), 150, 0.25)
                    out.append((f"{name}/{variant}/{i}", np.asarray(chip, dtype=np.uint8)))
    return out


@pytest.fixture(scope="module")
def onnx_path(tmp_path_factory) -> Path:
    return export_dlib_embedder(DLIB_RESNET.locate(), tmp_path_factory.mktemp("dlib") / "dlib_resnet.onnx")


@pytest.fixture(scope="module")
def dlib_descriptors(chips) -> np.ndarray:
    model = dlib.face_recognition_model_v1(str(DLIB_RESNET.locate()))
    return np.stack([np.asarray(model.compute_face_descriptor(chip)) for _, chip in chips])


@pytest.fixture(scope="module")
def onnx_descriptors(onnx_path, chips) -> np.ndarray:
    with FaceEmbedder(onnx_path) as embedder:
        return embedder.embed(np.stack([chip for _, chip in chips]))


def test_at_least_20_distinct_real_chips(chips):
    assert len(chips) >= 20
    assert all(chip.shape == (150, 150, 3) and chip.dtype == np.uint8 for _, chip in chips)
    assert len({hashlib.sha256(chip.tobytes()).hexdigest() for _, chip in chips}) == len(chips)
    per_photo = Counter(label.split("/")[0] for label, _ in chips)
    assert per_photo == {"astronaut": 4, "t1": 22, "hanks": 4}


def test_onnx_descriptor_equals_dlib(chips, onnx_descriptors, dlib_descriptors):
    assert onnx_descriptors.shape == (len(chips), 128) and onnx_descriptors.dtype == np.float32
    diff = np.abs(onnx_descriptors.astype(np.float64) - dlib_descriptors)
    worst = int(np.argmax(diff.max(axis=1)))
    print(f"\n{len(chips)} chips: max |ONNX - dlib| = {diff.max():.3g} (worst {chips[worst][0]})")
    assert diff.max() <= DLIB_TOLERANCE
    # Not trivially equal: descriptors differ between chips by far more than the tolerance.
    assert np.abs(dlib_descriptors[0] - dlib_descriptors[1]).max() > 100 * DLIB_TOLERANCE


def test_batch_and_single_chip_agree(onnx_path, chips, onnx_descriptors):
    with FaceEmbedder(onnx_path, threads=2) as embedder:
        singles = np.concatenate([embedder.embed(chip[None]) for _, chip in chips[:5]])
    assert np.abs(singles - onnx_descriptors[:5]).max() <= 1e-5


def test_descriptors_tell_people_apart(chips, onnx_descriptors):
    by_label = dict(zip((label for label, _ in chips), onnx_descriptors, strict=True))
    for person in ("astronaut", "hanks"):
        same = [v for k, v in by_label.items() if k.startswith(person + "/")]
        distances = [np.linalg.norm(a - same[0]) for a in same[1:]]
        assert max(distances) < DLIB_SAME_PERSON_THRESHOLD, (person, distances)
    six = [v for k, v in by_label.items() if k.startswith("t1/orig/")]
    others = [by_label["astronaut/orig/0"], by_label["hanks/orig/0"]]
    people = six + others
    assert len(people) == 8
    apart = [np.linalg.norm(a - b) for i, a in enumerate(people) for b in people[i + 1 :]]
    assert min(apart) > DLIB_SAME_PERSON_THRESHOLD


def test_graph_is_plain_and_foldable(onnx_path):
    import onnx

    model = onnx.load(str(onnx_path))
    ops = Counter(node.op_type for node in model.graph.node)
    assert ops == {
        "Conv": 29,  # every affine (batch norm) is folded into its conv
        "Relu": 29,
        "Add": 14,
        "Pad": 5,  # add_prev's zero padding: 3 on shortcut channels, 2 spatial (3x3 -> 4x4, 1x1 -> 2x2)
        "AveragePool": 4,
        "MaxPool": 1,
        "Sub": 1,  # input: (pixel - mean) ...
        "Mul": 1,  # ... * 1/256
        "ReduceMean": 1,
        "Reshape": 1,
        "Gemm": 1,
    }
    (inp,), (out,) = model.graph.input, model.graph.output
    dims = [[d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim] for v in (inp, out)]
    assert (inp.name, out.name) == ("chip", "descriptor")
    assert dims == [["batch", 3, 150, 150], ["batch", 128]]
    types = Counter(onnx.TensorProto.DataType.Name(t.data_type) for t in model.graph.initializer)
    assert types == {"FLOAT": 29 * 2 + 3, "INT64": 6}  # conv w+b, mean, 1/256, fc; pads, axes, shape
    size = onnx_path.stat().st_size
    print(f"\n{onnx_path.name}: {size} bytes, {dict(ops)}")
    assert 22_400_000 < size < 22_600_000  # 5.6 M float32 weights, one file


def test_embedder_rejects_wrong_chips(onnx_path):
    with FaceEmbedder(onnx_path) as embedder:
        for bad, got in [
            (np.zeros((150, 150, 3), np.uint8), "uint8 array of shape [150, 150, 3]"),
            (np.zeros((2, 150, 150, 3), np.float32), "float32 array of shape [2, 150, 150, 3]"),
            (np.zeros((1, 3, 150, 150), np.uint8), "uint8 array of shape [1, 3, 150, 150]"),
            (np.zeros((1, 112, 112, 3), np.uint8), "uint8 array of shape [1, 112, 112, 3]"),
            (np.zeros((0, 150, 150, 3), np.uint8), "uint8 array of shape [0, 150, 150, 3]"),
            ([[0]], "list"),
        ]:
            with pytest.raises(InputError) as info:
                embedder.embed(bad)
            assert str(info.value) == f"expected uint8 chips of shape [N,150,150,3], got {got}"


def test_embedder_rejects_a_corrupt_model(onnx_path, tmp_path):
    corrupt = tmp_path / "corrupt.onnx"
    corrupt.write_bytes(onnx_path.read_bytes()[:100_000])
    with pytest.raises(InferenceError) as info:
        FaceEmbedder(corrupt)
    assert str(info.value).startswith(f"{corrupt}: not an ONNX or TFLite model (first bytes ")
    missing = tmp_path / "absent.onnx"
    with pytest.raises(InferenceError) as info:
        FaceEmbedder(missing)
    assert str(info.value) == f"{missing}: face embedding model not found"


def test_embedder_rejects_another_model_and_use_after_close(onnx_path, tmp_path):
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 112, 112])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3, 112, 112])],
    )
    other = tmp_path / "relu.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(other))
    with pytest.raises(InferenceError) as info:
        FaceEmbedder(other)
    assert str(info.value) == (
        f"{other}: not a face embedder: inputs [('x', ['N', 3, 112, 112])], outputs "
        "[('y', ['N', 3, 112, 112])]; expected input 'chip' [N,3,S,S] or [N,S,S,3] and output "
        "'descriptor' [N,D] (dlib's: S 150, D 128)"
    )
    embedder = FaceEmbedder(onnx_path)
    embedder.close()
    with pytest.raises(InferenceError) as info:
        embedder.embed(np.zeros((1, 150, 150, 3), np.uint8))
    assert str(info.value) == f"{onnx_path}: the face embedder is closed"


@pytest.mark.parametrize("threads", [0, -1, 1.5, True])
def test_embedder_rejects_bad_thread_counts(onnx_path, threads):
    with pytest.raises(InputError) as info:
        FaceEmbedder(onnx_path, threads=threads)
    assert str(info.value) == f"threads = {threads!r}; expected a positive integer"
