"""MTCNN end to end: facenet-pytorch weights -> ONNX -> the numpy/ONNX Runtime cascade on real photos.

The reference is facenet-pytorch's own ``detect_face`` (models/utils/detect_face.py) run on the torch nets.
That file imports torchvision only for ``batched_nms`` (and ``functional`` for ``extract_face``, unused
here), so its source is executed with those two import lines removed and ``batched_nms`` supplied by the
small torch function below (torchvision's semantics: per-image greedy IoU, areas without +1).
"""

from __future__ import annotations

import copy
import importlib.util
import shutil
import types
from pathlib import Path

import cv2
import numpy as np
import pytest
import skimage.data as skimage_data
import torch

from converters.face.facedata import package_dir
from converters.face.mtcnn import (
    TOLERANCE,
    compare_with_torch,
    export_mtcnn,
    facenet_data_dir,
    load_mtcnn_nets,
)
from edge.errors import ConversionError, InferenceError, InputError, ValidationError
from edge.face.detect_mtcnn import MtcnnDetector, area_resize

pytestmark = pytest.mark.integration

#: A point inside each face of insightface's t1.jpg (1280x886), read off the picture by hand.
T1_FACES = {
    "rachel": (105, 330),
    "monica": (325, 200),
    "ross": (530, 320),
    "chandler": (800, 390),
    "joey": (960, 130),
    "phoebe": (1180, 330),
}
ASTRONAUT_FACE = (225, 115)
EXPECTED = "expected an RGB image as a uint8 numpy array of shape (H, W, 3)"


def _batched_nms(boxes, scores, idxs, iou_threshold):
    """torchvision.ops.batched_nms in plain torch (test-only shim)."""
    if boxes.numel() == 0:
        return torch.empty((0,), dtype=torch.int64)
    b = boxes + (idxs.to(boxes) * (boxes.max() + 1))[:, None]
    area = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    order = torch.argsort(scores, descending=True, stable=True)
    keep = []
    while order.numel() > 0:
        i, rest = order[0], order[1:]
        keep.append(int(i))
        w = (torch.minimum(b[i, 2], b[rest, 2]) - torch.maximum(b[i, 0], b[rest, 0])).clamp(min=0)
        h = (torch.minimum(b[i, 3], b[rest, 3]) - torch.maximum(b[i, 1], b[rest, 1])).clamp(min=0)
        inter = w * h
        order = rest[inter / (area[i] + area[rest] - inter) <= iou_threshold]
    return torch.as_tensor(keep, dtype=torch.int64)


def _load_facenet_detect_face():
    root = Path(importlib.util.find_spec("facenet_pytorch").submodule_search_locations[0])
    path = root / "models" / "utils" / "detect_face.py"
    src = path.read_text()
    for line in (
        "from torchvision.transforms import functional as F\n",
        "from torchvision.ops.boxes import batched_nms\n",
    ):
        if line not in src:
            pytest.fail(f"{path} changed: import line {line!r} not found; update the shim")
        src = src.replace(line, "")
    module = types.ModuleType("facenet_detect_face_shim")
    module.batched_nms = _batched_nms
    exec(compile(src, str(path), "exec"), module.__dict__)
    return module.detect_face


@pytest.fixture(scope="module")
def nets():
    return load_mtcnn_nets()


@pytest.fixture(scope="module")
def onnx_paths(tmp_path_factory):
    return export_mtcnn(tmp_path_factory.mktemp("mtcnn"))


@pytest.fixture(scope="module")
def detector(onnx_paths):
    with MtcnnDetector(onnx_paths["pnet"].parent) as det:
        yield det


@pytest.fixture(scope="module")
def t1() -> np.ndarray:
    path = package_dir("insightface") / "data" / "images" / "t1.jpg"
    bgr = cv2.imread(str(path))
    assert bgr is not None, path
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


@pytest.fixture(scope="module")
def t1_detections(detector, t1):
    return detector.detect(t1)


def _contains(box, point) -> bool:
    x1, y1, x2, y2 = box
    return x1 <= point[0] <= x2 and y1 <= point[1] <= y2


def _iou(a, b) -> float:
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = w * h
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def _check_face(det) -> None:
    """Landmarks inside the box, and in LANDMARK_NAMES order (image-left before image-right)."""
    assert det.landmarks.shape == (5, 2) and det.landmarks.dtype == np.float32
    for point in det.landmarks:
        assert _contains(det.box, point), (det.box, det.landmarks)
    eye_l, eye_r, nose, mouth_l, mouth_r = det.landmarks
    assert eye_l[0] < eye_r[0] and mouth_l[0] < mouth_r[0]
    assert max(eye_l[1], eye_r[1]) < nose[1] < min(mouth_l[1], mouth_r[1])


# (a) each ONNX net equals its torch net ---------------------------------------------------------


def test_onnx_nets_equal_torch(nets, onnx_paths):
    diffs = compare_with_torch(nets, onnx_paths, seed=123)
    assert set(diffs) == {"pnet", "rnet", "onet"}
    for name, diff in diffs.items():
        assert diff <= TOLERANCE, (name, diff)


def test_onnx_inputs_have_the_documented_dynamic_shapes(onnx_paths):
    import onnx

    def dims(path):
        graph = onnx.load(str(path)).graph
        return {
            v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
            for v in list(graph.input) + list(graph.output)
        }

    pnet = dims(onnx_paths["pnet"])
    assert pnet["input"] == ["N", 3, "H", "W"]
    for out, channels in (("reg", 4), ("prob", 2)):
        n, c, h, w = pnet[out]  # h, w are symbolic expressions of H, W
        assert (n, c) == ("N", channels) and "H" in h and "W" in w, pnet
    assert dims(onnx_paths["rnet"]) == {"input": ["N", 3, 24, 24], "reg": ["N", 4], "prob": ["N", 2]}
    assert dims(onnx_paths["onet"]) == {
        "input": ["N", 3, 48, 48],
        "reg": ["N", 4],
        "landmarks": ["N", 10],
        "prob": ["N", 2],
    }


def test_comparison_catches_a_changed_net(nets, onnx_paths):
    changed = dict(nets)
    changed["onet"] = copy.deepcopy(nets["onet"])
    with torch.no_grad():
        changed["onet"].dense6_3.bias += 1e-3
    with pytest.raises(ValidationError) as err:
        compare_with_torch(changed, onnx_paths)
    message = str(err.value)
    assert message.startswith("MTCNN ONNX nets differ from PyTorch: onet.landmarks input (1, 3, 48, 48): ")
    assert "pnet" not in message and "rnet" not in message and "onet.prob" not in message


def test_truncated_weights_raise_conversion_error(tmp_path):
    for name in ("pnet", "rnet", "onet"):
        shutil.copy(facenet_data_dir() / f"{name}.pt", tmp_path / f"{name}.pt")
    broken = tmp_path / "rnet.pt"
    broken.write_bytes(broken.read_bytes()[:1000])
    with pytest.raises(ConversionError) as err:
        load_mtcnn_nets(tmp_path)
    # torch 2.13 reads the truncated zip until it runs out: EOFError without a message.
    assert str(err.value) == (
        f"{broken}: cannot read the PyTorch state dict (EOFError); "
        "the file is corrupt or truncated, reinstall facenet-pytorch==2.6.0"
    )


def test_missing_weights_raise_input_error(tmp_path):
    with pytest.raises(InputError) as err:
        load_mtcnn_nets(tmp_path)
    assert str(err.value) == (
        f"{tmp_path / 'pnet.pt'}: MTCNN weights file not found; expected a facenet-pytorch state dict"
    )


@pytest.mark.parametrize("size", [(24, 24), (48, 48), (532, 769), (7, 13), (130, 50)])
def test_area_resize_equals_torch_area_interpolation(size):
    image = np.random.default_rng(size[0]).integers(0, 256, size=(97, 61, 3), dtype=np.uint8)
    nchw = torch.from_numpy(image).permute(2, 0, 1)[None].float()
    ref = torch.nn.functional.interpolate(nchw, size=size, mode="area")[0].permute(1, 2, 0).numpy()
    np.testing.assert_allclose(area_resize(image, *size), ref, rtol=0, atol=1e-4)


# (b) the cascade finds the faces -----------------------------------------------------------------


def test_t1_finds_all_six_faces(t1_detections):
    for name, point in T1_FACES.items():
        hits = [d for d in t1_detections if _contains(d.box, point)]
        assert len(hits) == 1, (name, [d.to_dict() for d in hits])
        assert hits[0].score >= 0.95, (name, hits[0].score)
        _check_face(hits[0])
    # MTCNN at its default thresholds (0.6, 0.7, 0.7) also scores a fist and an ashtray 0.86-0.87, and so
    # does facenet-pytorch (see the equivalence test); nothing that is not a face reaches 0.9.
    extras = [d for d in t1_detections if not any(_contains(d.box, p) for p in T1_FACES.values())]
    assert all(d.score < 0.9 for d in extras), [d.to_dict() for d in extras]


def test_t1_stricter_onet_threshold_gives_exactly_the_six_faces(onnx_paths, t1):
    with MtcnnDetector(onnx_paths["pnet"].parent, thresholds=(0.6, 0.7, 0.9)) as det:
        found = det.detect(t1)
    assert len(found) == 6, [d.to_dict() for d in found]
    for point in T1_FACES.values():
        assert sum(_contains(d.box, point) for d in found) == 1


def test_astronaut_finds_the_one_face(detector):
    found = detector.detect(skimage_data.astronaut())
    assert len(found) == 1, [d.to_dict() for d in found]
    assert _contains(found[0].box, ASTRONAUT_FACE)
    assert found[0].score > 0.99
    _check_face(found[0])


# (c) same result as facenet-pytorch's detect_face -----------------------------------------------


@pytest.mark.parametrize("image_name", ["t1", "astronaut"])
def test_matches_facenet_pytorch_detect_face(image_name, nets, detector, t1, t1_detections):
    image = t1 if image_name == "t1" else skimage_data.astronaut()
    ours = t1_detections if image_name == "t1" else detector.detect(image)
    detect_face = _load_facenet_detect_face()
    with torch.no_grad():
        boxes, points = detect_face(image, 20, nets["pnet"], nets["rnet"], nets["onet"], [0.6, 0.7, 0.7], 0.709, "cpu")
    ref_boxes = np.asarray(boxes[0], dtype=np.float64).reshape(-1, 5)
    ref_points = np.asarray(points[0], dtype=np.float64).reshape(-1, 5, 2)
    assert len(ours) == len(ref_boxes) == (8 if image_name == "t1" else 1)
    for ref_box, ref_pts in zip(ref_boxes, ref_points, strict=True):
        best = max(ours, key=lambda d, rb=ref_box: _iou(d.box, rb[:4]))
        assert _iou(best.box, ref_box[:4]) >= 0.99
        assert np.abs(best.landmarks - ref_pts).max() <= 1.0
        assert abs(best.score - ref_box[4]) <= 1e-4


# (d) no face -------------------------------------------------------------------------------------


def test_images_without_faces_return_nothing(detector):
    assert detector.detect(skimage_data.coffee()) == []
    assert detector.detect(np.full((300, 400, 3), 128, np.uint8)) == []
    assert detector.detect(np.zeros((8, 8, 3), np.uint8)) == []  # smaller than one PNet cell


# (e) bad inputs ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (np.zeros((0, 0, 3), np.uint8), f"MTCNN input image is empty (shape (0, 0, 3)); {EXPECTED}"),
        (np.zeros((64, 64), np.uint8), f"MTCNN input image has shape (64, 64); {EXPECTED}"),
        (np.zeros((64, 64, 4), np.uint8), f"MTCNN input image has shape (64, 64, 4); {EXPECTED}"),
        (np.zeros((64, 64, 3), np.float64), f"MTCNN input image has dtype float64; {EXPECTED}"),
        ("photo.jpg", f"MTCNN input is a str; {EXPECTED}"),
    ],
)
def test_bad_inputs_raise_input_error(detector, value, message):
    with pytest.raises(InputError) as err:
        detector.detect(value)
    assert str(err.value) == message


def test_closed_detector_and_corrupt_model(onnx_paths, tmp_path):
    det = MtcnnDetector(onnx_paths["pnet"].parent)
    det.close()
    with pytest.raises(InferenceError) as err:
        det.detect(np.zeros((64, 64, 3), np.uint8))
    assert str(err.value) == "MtcnnDetector is closed; create a new one to detect faces"
    for path in onnx_paths.values():
        shutil.copy(path, tmp_path / path.name)
    (tmp_path / "mtcnn_onet.onnx").write_bytes(b"not an onnx file")
    with pytest.raises(InferenceError) as err:
        MtcnnDetector(tmp_path)
    assert str(err.value).startswith(f"{tmp_path / 'mtcnn_onet.onnx'}: not an ONNX or TFLite model (first bytes ")
