"""BlazeFace (mediapipe 0.10.21's face detectors): our ONNX translation against the TFLite source, and the
device detector on real photos against MTCNN.

The wheel comes from the build cache (downloaded with pip once, ``converters.face.blazeface``); translating
both models and comparing them on the proof photos takes a few seconds.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from converters.face.blazeface import (
    FULL_RANGE,
    ONNX_TOLERANCE,
    SHORT_RANGE,
    compare_with_tflite,
    export_blazeface_onnx,
    licence_path,
    proof_photos,
)
from converters.face.boxes import iou
from converters.tflite.frontend import tflite_to_onnx
from converters.validate import raise_if_off
from edge.errors import ConversionError, InferenceError, InputError, ValidationError
from edge.face.detect_blazeface import BlazeFaceDetector

pytestmark = pytest.mark.integration

#: BlazeFace's box against MTCNN's on the same face: measured 0.76 (short) and 0.80 (full range) on the
#: astronaut; the two detectors frame a face differently (MTCNN from forehead to chin), so not near 1.
MIN_IOU_WITH_MTCNN = 0.6
EXPECTED = "expected an RGB image as a uint8 numpy array of shape (H, W, 3)"
#: MediaPipe's threshold for full range (``edge.face.detect_blazeface.FULL_RANGE.min_score``).
FULL_RANGE_MIN_SCORE = 0.6


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("blazeface")
    return {v.key: export_blazeface_onnx(out, v) for v in (SHORT_RANGE, FULL_RANGE)}


@pytest.fixture(scope="module")
def photos() -> dict[str, np.ndarray]:
    return dict(proof_photos())


@pytest.fixture(scope="module")
def mtcnn(tmp_path_factory):
    from converters.face.mtcnn import export_mtcnn
    from edge.face.detect_mtcnn import MtcnnDetector

    out = tmp_path_factory.mktemp("mtcnn")
    export_mtcnn(out)
    with MtcnnDetector(out, threads=2) as detector:
        yield detector


@pytest.mark.parametrize("key", [SHORT_RANGE.key, FULL_RANGE.key])
def test_onnx_equals_the_tflite_source_on_real_photos(exported, key):
    export = exported[key]
    assert export.photos == ("astronaut", "t1", "tom_hanks", "grace_hopper", "coffee.png", "rocket.jpg")
    assert len(export.checks) == 2
    for check in export.checks:
        print(key, check.output, check.shape, f"max |diff| {check.max_abs_diff:.2e}")
        assert 0 < check.max_abs_diff <= ONNX_TOLERANCE  # measured <= 3.7e-4 on outputs of size 100-175
    licence = licence_path(export.tflite).read_text()
    assert "Apache License" in licence and "Version 2.0" in licence


def test_the_onnx_graph_has_one_conv_per_tflite_convolution_and_dense_weights(exported):
    """Short range: 21 CONV_2D + 16 DEPTHWISE_CONV_2D; full range: 49 + 42, its DENSIFY/DEQUANTIZE folded."""
    for key, convs in ((SHORT_RANGE.key, 37), (FULL_RANGE.key, 91)):
        model = onnx.load(exported[key].onnx)
        ops = [n.op_type for n in model.graph.node]
        assert ops.count("Conv") == convs, key
        assert {"Conv", "Add", "Relu", "Pad", "Reshape", "Transpose"} <= set(ops)
        assert all(numpy_helper.to_array(t).dtype in (np.float32, np.int64) for t in model.graph.initializer)
    full = {n.op_type for n in onnx.load(exported[FULL_RANGE.key].onnx).graph.node}
    assert {"Resize", "DepthToSpace"} <= full


def test_a_changed_weight_is_caught(exported, photos, tmp_path):
    export = exported[SHORT_RANGE.key]
    model = onnx.load(export.onnx)
    weight = next(t for t in model.graph.initializer if numpy_helper.to_array(t).ndim == 4)
    weight.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(weight) * np.float32(1.01), weight.name))
    changed = tmp_path / "changed.onnx"
    onnx.save(model, changed)
    checks = compare_with_tflite(changed, export.tflite, [("astronaut", photos["astronaut"])])
    with pytest.raises(ValidationError) as err:
        raise_if_off(checks, "changed.onnx")
    assert str(err.value).startswith("changed.onnx: 2 output(s) differ from the source model:\n  changed.onnx: output")


@pytest.mark.parametrize("key", [SHORT_RANGE.key, FULL_RANGE.key])
@pytest.mark.parametrize("photo", ["astronaut", "grace_hopper"])
def test_it_finds_the_one_face_where_mtcnn_does(exported, photos, mtcnn, key, photo):
    rgb = photos[photo]
    [want] = [d for d in mtcnn.detect(rgb) if d.score >= 0.9]
    found = {}
    for path in (exported[key].tflite, exported[key].onnx):
        with BlazeFaceDetector(path, threads=2) as detector:
            found[detector.backend] = detector.detect(rgb)
    [got] = found["litert"]
    [same] = found["onnxruntime"]
    overlap = iou(got.box, want.box)
    print(key, photo, "IoU with MTCNN", round(overlap, 3), "score", round(got.score, 3))
    assert overlap > MIN_IOU_WITH_MTCNN
    assert np.allclose(got.box, same.box, atol=0.05) and abs(got.score - same.score) < 1e-4
    # eyes and nose land near MTCNN's (a few pixels on a ~100-pixel face); the mouth corners are estimates
    side = want.box[2] - want.box[0]
    assert np.abs(got.landmarks[:3] - want.landmarks[:3]).max() < 0.1 * side
    assert got.landmarks.shape == (5, 2) and got.landmarks.dtype == np.float32


def test_no_face_in_a_scene_without_people(exported, photos):
    for key in (SHORT_RANGE.key, FULL_RANGE.key):
        with BlazeFaceDetector(exported[key].onnx) as detector:
            assert detector.detect(photos["coffee.png"]) == [], key


def test_wrong_model_files_are_named(exported, tmp_path):
    mtcnn_like = tmp_path / "not_blazeface.onnx"
    tflite_to_onnx(exported[SHORT_RANGE.key].tflite, mtcnn_like)  # valid ONNX, then give it another input size
    model = onnx.load(mtcnn_like)
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_value = 96
    onnx.save(model, mtcnn_like)
    with pytest.raises(InferenceError) as err:
        BlazeFaceDetector(mtcnn_like)
    assert str(err.value) == (
        f"{mtcnn_like}: inputs [(1, 96, 128, 3)]; expected one BlazeFace input (1, 128, 128, 3) or (1, 192, 192, 3)"
    )
    text = tmp_path / "model.tflite"
    text.write_text("not a model")
    with pytest.raises(InferenceError) as err:
        BlazeFaceDetector(text)
    assert str(err.value).startswith(f"{text}: not an ONNX or TFLite model (first bytes 6e 6f 74")
    with pytest.raises(InferenceError) as err:
        BlazeFaceDetector(tmp_path / "missing.tflite")
    assert str(err.value) == (
        f"{tmp_path / 'missing.tflite'}: BlazeFace model file not found; fetch it with converters.face.blazeface"
    )
    tflite = exported[SHORT_RANGE.key].tflite
    with pytest.raises(InputError) as err:
        BlazeFaceDetector(tflite, backend="onnxruntime")
    assert str(err.value) == f"{tflite}: is in TFLite format; backend 'onnxruntime' reads only ONNX and ORT"
    with pytest.raises(InputError) as err:
        BlazeFaceDetector(exported[SHORT_RANGE.key].tflite, min_score=1.5)
    assert str(err.value) == "BlazeFaceDetector min_score = 1.5; expected a number in [0, 1] or None"


def test_empty_and_wrong_images_are_refused(exported):
    with BlazeFaceDetector(exported[SHORT_RANGE.key].tflite) as detector:
        for image, what in (
            (np.zeros((0, 10, 3), np.uint8), "image is empty (shape (0, 10, 3))"),
            (np.zeros((10, 10), np.uint8), "image has shape (10, 10)"),
            (np.zeros((10, 10, 3), np.float32), "image has dtype float32"),
        ):
            with pytest.raises(InputError) as err:
                detector.detect(image)
            assert str(err.value) == f"BlazeFace input {what}; {EXPECTED}"
    with pytest.raises(InferenceError) as err:
        detector.detect(np.zeros((10, 10, 3), np.uint8))
    assert str(err.value) == "BlazeFaceDetector is closed; create a new one to detect faces"


def test_an_unsupported_tflite_op_is_named(exported, tmp_path):
    """A graph with an op the translator lacks fails naming it (here: RELU renamed to LOGISTIC in the file)."""
    import tflite

    data = bytearray(exported[SHORT_RANGE.key].tflite.read_bytes())
    model = tflite.Model.GetRootAsModel(data, 0)
    codes = [model.OperatorCodes(i) for i in range(model.OperatorCodesLength())]
    code = next(c for c in codes if _name(c) == "RELU")
    # Patch the opcode in place (19 = RELU -> 14 = LOGISTIC): the byte field deprecated_builtin_code (vtable
    # slot 4) and, in newer files, the int32 builtin_code (slot 10).
    patched = 0
    for slot, width in ((4, 1), (10, 4)):
        offset = code._tab.Offset(slot)
        if offset:
            pos = code._tab.Pos + offset
            assert int.from_bytes(data[pos : pos + width], "little") == 19
            data[pos : pos + width] = (14).to_bytes(width, "little")
            patched += 1
    assert patched
    broken = tmp_path / "logistic.tflite"
    broken.write_bytes(bytes(data))
    with pytest.raises(ConversionError) as err:
        tflite_to_onnx(broken, tmp_path / "x.onnx")
    assert str(err.value).startswith(f"{broken}: TFLite ops LOGISTIC are not supported; expected only ADD, ")


def _name(code) -> str:
    import tflite

    return tflite.opcode2name(max(code.BuiltinCode(), code.DeprecatedBuiltinCode()))


def test_the_translation_is_deterministic(exported, tmp_path):
    again = export_blazeface_onnx(tmp_path, SHORT_RANGE)
    assert again.onnx.read_bytes() == exported[SHORT_RANGE.key].onnx.read_bytes()


def test_tiles_find_the_t1_faces_the_whole_frame_pass_misses(exported):
    """insightface's t1.jpg (1280x886, 6 people, annotated faces 90-130 pixels): shrunk to 192 pixels its faces
    are 13-20 pixels wide and the full-range pass finds 5 of them; with ``DEFAULT_TILING`` (a 2x2 grid of
    720-pixel tiles) it finds all 6 and nothing else, on both runtimes, each box on its annotated (HOG) face at
    least as well as the whole-frame pass boxed the 5 it found."""
    from converters.face.boxes import match_boxes
    from converters.face.facedata import EVAL_PHOTOS
    from edge.face.tiles import DEFAULT_TILING

    [t1] = [p for p in EVAL_PHOTOS if p.name == "t1"]
    rgb, truth = t1.load(), [f.box for f in t1.faces]
    export = exported[FULL_RANGE.key]
    for path in (export.tflite, export.onnx):
        with BlazeFaceDetector(path) as plain, BlazeFaceDetector(path, tiling=DEFAULT_TILING) as tiled:
            whole, more = plain.detect(rgb), tiled.detect(rgb)
        seen = {i: v for i, _, v in match_boxes(truth, [d.box for d in whole])}
        found = {i: v for i, _, v in match_boxes(truth, [d.box for d in more])}
        print(path.suffix, "IoU with the annotated faces: whole frame", seen, "tiled", found)
        assert len(whole) == len(seen) == 5 and len(more) == len(found) == 6, path.name
        assert min(d.score for d in more) >= FULL_RANGE_MIN_SCORE
        assert min(found.values()) > min(seen.values()) > 0.5


def test_second_looks_find_the_demo_faces_the_tiles_alone_miss(exported):
    """Three faces of the demo's views (``converters.demo.host.demo_views``) score under full range's 0.6 in
    the whole frame and its tiles: insightface's person 6 in two turned views of t1.jpg, and a small Tom Hanks.
    ``DEFAULT_TILING``'s second look (a pass on twice the candidate's box) finds each at the cut, on both
    runtimes, and adds no detection on a face nobody annotated."""
    from converters.demo.host import demo_views
    from converters.face.boxes import match_boxes
    from edge.face.tiles import DEFAULT_TILING, Tiling

    views = {im.name: im for im in demo_views()}
    hard = [views[name] for name in ("t1/aug3", "t1/aug6", "tom_hanks/aug4")]
    no_look = Tiling(look_score=1.0)
    export = exported[FULL_RANGE.key]
    for path in (export.tflite, export.onnx):
        with BlazeFaceDetector(path, tiling=no_look) as tiles, BlazeFaceDetector(path, tiling=DEFAULT_TILING) as looks:
            for image in hard:
                truth = [f.box for f in image.faces]
                before, after = tiles.detect(image.rgb), looks.detect(image.rgb)
                assert len(match_boxes(truth, [d.box for d in before])) == len(truth) - 1, (path.name, image.name)
                assert len(match_boxes(truth, [d.box for d in after])) == len(after) == len(truth), image.name
                assert min(d.score for d in after) >= FULL_RANGE_MIN_SCORE
