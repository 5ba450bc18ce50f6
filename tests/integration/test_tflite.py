"""ONNX -> TFLite with onnx2tf (its own venv): fp32 equals ONNX, full-integer INT8 stays close, errors are clear.

Real models only: dlib's ResNet embedder and facenet-pytorch's MTCNN, exported by our converters (the session's
``face_fp32_models``), converted once per module. Samples are real face chips: dlib-aligned 150x150 chips of the evaluation faces
(``converters.face.facedata.make_eval_set``), and for calibration chips of the disjoint calibration photos
(``calibration_images``). The first run creates ``.venv-onnx2tf`` (about 2 minutes, 2.6 GB).

Tolerances: fp32 TFLite runs the same float graph through TensorFlow's kernels (XNNPACK), so outputs differ
from onnxruntime only by summation order: we measured 4.0e-7 on descriptors whose entries reach ~0.3, and
7.7e-7 on ONet, 6.3e-7 on RNet, 2.0e-6 on PNet.
FP32_TOLERANCE = 1e-4 leaves room for other CPUs' kernels and still catches any real conversion fault (a
wrong layout or padding moves descriptors by 1e-2 or more).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from converters.tflite.convert import (
    DEFAULT_VENV,
    TfliteVariant,
    compare_tflite_with_onnx,
    dequantize,
    export_tflite,
    graph_summary,
    quantize,
)
from converters.tflite.prep import explicit_maxpool_padding
from edge.errors import ConversionError, InputError, MissingDependencyError
from testsupport.needs import ONNX2TF, install_on_first_use

pytestmark = pytest.mark.integration

FP32_TOLERANCE = 1e-4
#: INT8 descriptor vs ONNX fp32: lowest cosine of any evaluation chip and the mean over all of them.
INT8_MIN_COSINE = 0.995
INT8_MEAN_COSINE = 0.999
#: MTCNN ONet INT8 outputs (box regression, landmarks, face probability) vs fp32, mean cosine per output.
ONET_INT8_MEAN_COSINE = 0.99
CALIBRATION_PHOTOS = 96


@pytest.fixture(scope="module")
def onnx2tf_venv():
    """Create or update .venv-onnx2tf (the script is idempotent: instant when up to date)."""
    install_on_first_use(ONNX2TF, "the TFLite tests (tests/integration/test_tflite.py)")
    assert (DEFAULT_VENV / "bin" / "onnx2tf").is_file()
    return DEFAULT_VENV


@pytest.fixture(scope="module")
def onnx_models(face_fp32_models):
    """dlib's embedder and MTCNN's nets, by name: the session's fp32 export (tests/conftest.py), read-only."""
    from edge.face import models as face_models

    return face_models.read_models_folder(face_fp32_models).model_paths(face_models.FACE_NETS)


def _aligned_chips(images) -> np.ndarray:
    """dlib 5-point aligned 150x150 chips (uint8 NHWC) of every face dlib's HOG finds in ``images``."""
    import dlib

    from converters.face.reference import dlib_model_path

    detector = dlib.get_frontal_face_detector()
    shape5 = dlib.shape_predictor(str(dlib_model_path("landmarks5")))
    chips = []
    for rgb in images:
        rgb = np.ascontiguousarray(rgb)
        for rect in detector(rgb, 1):
            chips.append(dlib.get_face_chip(rgb, shape5(rgb, rect), 150, 0.25))
    return np.stack(chips)


@pytest.fixture(scope="module")
def chips():
    """(evaluation chips, calibration chips), uint8 [N, 150, 150, 3], from disjoint photos."""
    from converters.face import facedata

    evaluation = _aligned_chips(im.rgb for im in facedata.make_eval_set(0).images)
    calibration = _aligned_chips(rgb for _, rgb in facedata.calibration_images(CALIBRATION_PHOTOS, seed=0))
    assert len(evaluation) >= 40 and len(calibration) >= 30
    return evaluation, calibration


def _mtcnn_input(chips_nhwc: np.ndarray, side: int) -> np.ndarray:
    """Chips resized as the detector resizes (area), normalised to MTCNN's NCHW input."""
    from edge.face.detect_mtcnn import area_resize, normalise

    return normalise(np.stack([area_resize(c, side, side) for c in chips_nhwc]))


@pytest.fixture(scope="module")
def embedder_tflite(onnx2tf_venv, onnx_models, chips, tmp_path_factory):
    calibration = chips[1].astype(np.float32)  # the graph normalises inside: raw 0..255 values, NHWC
    return export_tflite(
        onnx_models["embedder"], tmp_path_factory.mktemp("tfl"), int8=True, calibration=calibration, input_name="chip"
    )


@pytest.fixture(scope="module")
def onet_tflite(onnx2tf_venv, onnx_models, chips, tmp_path_factory):
    calibration = np.transpose(_mtcnn_input(chips[1], 48), (0, 2, 3, 1))
    return export_tflite(
        onnx_models["onet"], tmp_path_factory.mktemp("tfl"), int8=True, calibration=calibration, input_name="input"
    )


def _eval_nchw(chips) -> np.ndarray:
    return np.transpose(chips[0], (0, 3, 1, 2)).astype(np.float32)


def test_embedder_fp32_equals_onnx(embedder_tflite, onnx_models, chips):
    fp32 = embedder_tflite.files[TfliteVariant.FP32]
    report = compare_tflite_with_onnx(fp32, onnx_models["embedder"], _eval_nchw(chips))
    print("embedder fp32 vs onnx:", report["max_abs_diff"], report["min_cosine"], f"{fp32.stat().st_size} B")
    assert report["input"] == {
        "name": "chip",
        "shape": [1, 150, 150, 3],
        "dtype": "float32",
        "scale": None,
        "zero_point": None,
    }
    assert report["samples"] == len(chips[0])
    assert report["outputs"]["descriptor"]["shape"] == [len(chips[0]), 128]
    assert report["max_abs_diff"] < FP32_TOLERANCE
    assert report["min_cosine"] > 0.999999


def test_embedder_int8_is_full_integer(embedder_tflite):
    assert embedder_tflite.variant is TfliteVariant.INT8
    (inp,) = embedder_tflite.inputs
    (out,) = embedder_tflite.outputs
    # Calibrated on raw 0..255 pixels: scale 1, zero point -128 maps every pixel value exactly.
    assert (inp.name, inp.shape, inp.dtype, inp.scale, inp.zero_point) == ("chip", (1, 150, 150, 3), "int8", 1.0, -128)
    assert (out.shape, out.dtype) == ((1, 128), "int8")
    assert out.scale is not None and out.scale > 0
    # onnx2tf renames the quantized files' outputs; the export maps them back.
    assert embedder_tflite.output_names == {out.name: "descriptor"}
    # Full integer: every conv / dense weight int8, no float islands (no QUANTIZE / DEQUANTIZE ops) ...
    graph = graph_summary(embedder_tflite.path)
    assert graph["weights"] == {"int8": 30}
    assert graph["ops"]["CONV_2D"] == 29 and "DEQUANTIZE" not in graph["ops"] and "QUANTIZE" not in graph["ops"]
    # ... and its float-I/O twin differs only by one QUANTIZE at the input and one DEQUANTIZE at the output.
    twin = graph_summary(embedder_tflite.files[TfliteVariant.INT8_FLOAT_IO])
    assert twin["ops"] == {**graph["ops"], "QUANTIZE": 1, "DEQUANTIZE": 1}
    sizes = {v.value: p.stat().st_size for v, p in embedder_tflite.files.items()}
    print("embedder sizes:", sizes, f"onnx2tf {embedder_tflite.seconds:.0f} s")
    assert sizes["int8"] < sizes["fp32"] / 3


def test_embedder_int8_close_to_onnx(embedder_tflite, onnx_models, chips):
    report = compare_tflite_with_onnx(embedder_tflite.path, onnx_models["embedder"], _eval_nchw(chips))
    desc = report["outputs"]["descriptor"]
    print("embedder int8 vs onnx fp32:", desc)
    assert desc["quantized"] is True and desc["dtype"] == "int8"
    assert desc["mean_cosine"] >= INT8_MEAN_COSINE
    assert desc["min_cosine"] >= INT8_MIN_COSINE


def _pair_distances(descriptors: np.ndarray) -> np.ndarray:
    d = np.linalg.norm(descriptors[:, None].astype(np.float64) - descriptors[None], axis=-1)
    return d[np.triu_indices(len(descriptors), 1)]


def test_int8_embedder_on_the_device_backend_keeps_same_person_decisions(embedder_tflite, onnx_models, chips):
    """The int8-in/int8-out model through edge's LiteRT backend, quantizing and dequantizing at the edges."""
    from converters.validate import run_onnx
    from edge.face.types import DLIB_SAME_PERSON_THRESHOLD
    from edge.runtime.litert_backend import LiteRtBackend

    reference = run_onnx(onnx_models["embedder"], {"chip": _eval_nchw(chips)})["descriptor"]
    with LiteRtBackend().load(embedder_tflite.path, 1) as model:
        (spec_in,), (spec_out,) = model.inputs, model.outputs
        assert spec_in.dtype == np.int8 and spec_out.dtype == np.int8
        got = []
        for chip in chips[0]:
            q = quantize(chip[None].astype(np.float32), *spec_in.quantization, spec_in.dtype)
            got.append(dequantize(model.run({spec_in.name: q})[spec_out.name], *spec_out.quantization)[0])
    ref_d, int8_d = _pair_distances(reference), _pair_distances(np.array(got))
    flipped = (ref_d < DLIB_SAME_PERSON_THRESHOLD) != (int8_d < DLIB_SAME_PERSON_THRESHOLD)
    print(
        f"int8 pairs: {len(ref_d)}, max |distance change| {np.max(np.abs(int8_d - ref_d)):.4f}, "
        f"decisions flipped {int(flipped.sum())}, their fp32 distances {np.round(ref_d[flipped], 3).tolist()}"
    )
    assert np.max(np.abs(int8_d - ref_d)) < 0.05
    # a decision may flip only for a pair that sits on the threshold already
    assert np.all(np.abs(ref_d[flipped] - DLIB_SAME_PERSON_THRESHOLD) < 0.05)


def test_int8_float_io_twin_gives_the_same_descriptors(embedder_tflite, onnx_models, chips):
    float_io = embedder_tflite.files[TfliteVariant.INT8_FLOAT_IO]
    nchw = _eval_nchw(chips)[:8]
    a = compare_tflite_with_onnx(float_io, onnx_models["embedder"], nchw)
    b = compare_tflite_with_onnx(embedder_tflite.path, onnx_models["embedder"], nchw)
    assert a["input"]["dtype"] == "float32" and a["outputs"]["descriptor"]["quantized"] is False
    step = embedder_tflite.outputs[0].scale
    assert abs(a["max_abs_diff"] - b["max_abs_diff"]) <= step
    assert a["mean_cosine"] == pytest.approx(b["mean_cosine"], abs=1e-4)


def test_explicit_maxpool_padding_is_exact(onnx_models, chips, tmp_path):
    from converters.validate import run_onnx

    copy = tmp_path / "onet.onnx"
    copy.write_bytes(onnx_models["onet"].read_bytes())
    # 48 -> conv 46 -> ceil-mode pool 3/2 reaches one pixel past the edge: 23, not 22
    assert explicit_maxpool_padding(copy, "input", (1, 3, 48, 48)) == 1
    for sample in _mtcnn_input(chips[0][:8], 48):  # the copy's input is fixed at batch 1
        feeds = {"input": sample[None]}
        before, after = run_onnx(onnx_models["onet"], feeds), run_onnx(copy, feeds)
        assert sorted(after) == ["landmarks", "prob", "reg"]
        assert all(np.array_equal(before[k], after[k]) for k in before)


def test_onet_fp32_equals_onnx(onet_tflite, onnx_models, chips):
    report = compare_tflite_with_onnx(
        onet_tflite.files[TfliteVariant.FP32], onnx_models["onet"], _mtcnn_input(chips[0], 48)
    )
    print("onet fp32 vs onnx:", {k: v["max_abs_diff"] for k, v in report["outputs"].items()})
    assert sorted(report["outputs"]) == ["landmarks", "prob", "reg"]
    assert report["max_abs_diff"] < FP32_TOLERANCE


def test_onet_int8_close_to_onnx(onet_tflite, onnx_models, chips):
    report = compare_tflite_with_onnx(onet_tflite.path, onnx_models["onet"], _mtcnn_input(chips[0], 48))
    print("onet int8 vs onnx fp32:", report["outputs"])
    assert onet_tflite.inputs[0].dtype == "int8"
    graph = graph_summary(onet_tflite.path)
    assert graph["weights"] == {"int8": 8} and graph["ops"]["MIRROR_PAD"] == 2  # our edge padding, one per axis
    assert sorted(onet_tflite.output_names.values()) == ["landmarks", "prob", "reg"]
    for name, out in report["outputs"].items():
        assert out["quantized"] is True, name
        assert out["mean_cosine"] >= ONET_INT8_MEAN_COSINE, name


def test_rnet_and_pnet_fp32_equal_onnx(onnx_models, onnx2tf_venv, chips, tmp_path):
    source = onnx_models["rnet"]
    before = hashlib.sha256(source.read_bytes()).hexdigest()
    said = []
    rnet = export_tflite(source, tmp_path, int8=False, calibration=None, input_name="input", progress=said.append)
    assert hashlib.sha256(source.read_bytes()).hexdigest() == before  # onnx2tf overwrites its input: not ours
    assert said[0] == "onnx2tf: mtcnn_rnet.onnx -> TFLite fp32 at [1, 3, 24, 24]"
    assert said[1].startswith("onnx2tf: mtcnn_rnet_fp32.tflite (0.4 MB) in ") and len(said) == 2
    report = compare_tflite_with_onnx(rnet.path, source, _mtcnn_input(chips[0], 24))
    print("rnet fp32 vs onnx:", report["max_abs_diff"])
    assert report["max_abs_diff"] < FP32_TOLERANCE
    # PNet has dynamic H, W: converted at one pyramid size; its NHWC maps are compared in NCHW.
    pnet = export_tflite(
        onnx_models["pnet"], tmp_path, int8=False, calibration=None, input_name="input", input_shape=(1, 3, 150, 150)
    )
    assert {o.name: o.shape for o in pnet.outputs} == {"reg": (1, 70, 70, 4), "prob": (1, 70, 70, 2)}
    report = compare_tflite_with_onnx(pnet.path, onnx_models["pnet"], _mtcnn_input(chips[0][:8], 150))
    print("pnet fp32 vs onnx:", report["max_abs_diff"])
    assert report["outputs"]["prob"]["shape"] == [8, 2, 70, 70]
    assert report["max_abs_diff"] < FP32_TOLERANCE
    # only the results and logs are left behind, no onnx2tf scratch folders
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "mtcnn_pnet_fp32.onnx2tf.log",
        "mtcnn_pnet_fp32.tflite",
        "mtcnn_rnet_fp32.onnx2tf.log",
        "mtcnn_rnet_fp32.tflite",
    ]


def test_a_relative_output_folder_converts(onnx_models, onnx2tf_venv, tmp_path, monkeypatch):
    # as `edge-deploy convert face -o out/face` gives it: onnx2tf runs inside its scratch folder, so a relative
    # path handed to it would be looked for in there (a new user's first rpi5 build failed so)
    monkeypatch.chdir(tmp_path)
    rnet = export_tflite(onnx_models["rnet"], Path("out/rel"), int8=False, calibration=None, input_name="input")
    assert rnet.path == Path("out/rel/mtcnn_rnet_fp32.tflite") and (tmp_path / rnet.path).is_file()


# --- errors users see ----------------------------------------------------------------------------------------


def test_broken_onnx_is_a_conversion_error(tmp_path, onnx2tf_venv):
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"\x08\x07\x12\x04onnx" + bytes(range(256)) * 4)
    with pytest.raises(ConversionError) as err:
        export_tflite(broken, tmp_path / "out", int8=False, calibration=None, input_name="chip")
    assert str(err.value) == (
        f"{broken}: not a readable ONNX model (DecodeError: Error parsing message with type 'onnx.ModelProto': "
        "Wire format was corrupt)"
    )
    assert not (tmp_path / "out").exists()


def test_onnx2tf_failure_quotes_its_log(tmp_path, onnx2tf_venv):
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Frobnicate", ["x"], ["y"], domain="com.example")],
        "unsupported",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8, 8])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    path = tmp_path / "frob.onnx"
    onnx.save(model, path)
    with pytest.raises(ConversionError) as err:
        export_tflite(path, tmp_path / "out", int8=False, calibration=None, input_name="x")
    log = tmp_path / "out" / "frob_fp32.onnx2tf.log"
    message = str(err.value)
    print(message)
    assert message.startswith(f"onnx2tf (frob.onnx -> TFLite fp32) exited with 1; last lines of {log}:\n    ")
    assert "Frobnicate" in message


def test_timeout_kills_onnx2tf_and_says_so(onnx_models, onnx2tf_venv, tmp_path):
    with pytest.raises(ConversionError) as err:
        export_tflite(onnx_models["rnet"], tmp_path, int8=False, calibration=None, input_name="input", timeout_s=0.5)
    log = tmp_path / "mtcnn_rnet_fp32.onnx2tf.log"
    first_line = str(err.value).split("\n")[0]
    subject = "onnx2tf (mtcnn_rnet.onnx -> TFLite fp32) did not finish within 0.5 s"
    assert first_line in (f"{subject}; last lines of {log}:", f"{subject}; {log} is empty")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mtcnn_rnet_fp32.onnx2tf.log"]


def test_int8_without_calibration_is_an_input_error(onnx_models, onnx2tf_venv, tmp_path):
    with pytest.raises(InputError) as err:
        export_tflite(onnx_models["onet"], tmp_path, int8=True, calibration=None, input_name="input")
    assert str(err.value) == "int8=True needs calibration: real samples, float32 [N, H, W, C] (NHWC)"
    with pytest.raises(InputError) as err:
        export_tflite(
            onnx_models["onet"], tmp_path, int8=True, calibration=np.zeros((4, 3, 48, 48)), input_name="input"
        )
    assert str(err.value) == "calibration has shape [4, 3, 48, 48]; expected NHWC [N, 48, 48, 3]"


def test_shape_and_name_errors(onnx_models, onnx2tf_venv, tmp_path):
    pnet = onnx_models["pnet"]
    with pytest.raises(InputError) as err:
        export_tflite(pnet, tmp_path, int8=False, calibration=None, input_name="input")
    assert str(err.value) == (
        f"{pnet}: input 'input' has dynamic dimensions [None, 3, None, None]; "
        "pass input_shape=(1, C, H, W) to convert at a fixed size"
    )
    with pytest.raises(InputError) as err:
        export_tflite(pnet, tmp_path, int8=False, calibration=None, input_name="chip")
    assert str(err.value) == f"{pnet}: has no input 'chip'; its inputs are ['input']"


def test_missing_venv_names_the_setup_script(onnx_models, tmp_path):
    with pytest.raises(MissingDependencyError) as err:
        export_tflite(onnx_models["rnet"], tmp_path, int8=False, calibration=None, input_name="input", venv=tmp_path)
    assert str(err.value) == (
        f"{tmp_path}: no ready onnx2tf environment (missing bin/onnx2tf or .edge-deploy-setup); "
        "create it with: bash scripts/setup_onnx2tf.sh"
    )


def test_quantize_dequantize_round_trip():
    x = np.array([-1.0, 0.0, 0.5, 300.0], np.float32)
    q = quantize(x, 0.5, -10, np.int8)
    assert q.dtype == np.int8 and q.tolist() == [-12, -10, -9, 127]
    assert dequantize(q, 0.5, -10).tolist() == [-1.0, 0.0, 0.5, 68.5]
    assert dequantize(np.array([-128, 127], np.int8), 2.0, 127).tolist() == [-510.0, 0.0]


def test_face_embedder_runs_the_tflite_twins_on_litert_like_the_onnx_on_onnxruntime(
    embedder_tflite, onnx_models, chips
):
    """``edge.face.embed.FaceEmbedder`` on the ONNX file and on both TFLite twins: the runtime comes from the
    file, layout (NCHW / NHWC), batch (dynamic / fixed 1) and INT8 I/O from the model's specs.

    Tolerances: fp32 as ``test_embedder_fp32_equals_onnx`` (FP32_TOLERANCE, the same kernels' summation
    order); the full-integer file as ``test_embedder_int8_close_to_onnx`` (cosines INT8_MIN/MEAN_COSINE)."""
    from edge.face.embed import FaceEmbedder
    from edge.runtime import Optimization

    evaluation = chips[0]
    fp32 = embedder_tflite.files[TfliteVariant.FP32]
    with (
        FaceEmbedder(onnx_models["embedder"]) as on_ort,
        FaceEmbedder(fp32) as on_litert,
        FaceEmbedder(embedder_tflite.path) as int8,
    ):
        assert (on_ort.backend, on_litert.backend, int8.backend) == ("onnxruntime", "litert", "litert")
        reference, got, got_int8 = (e.embed(evaluation) for e in (on_ort, on_litert, int8))
    assert got.shape == got_int8.shape == reference.shape == (len(evaluation), 128)
    assert got.dtype == got_int8.dtype == np.float32
    diff = float(np.abs(got - reference).max())
    cosine = np.sum(got_int8 * reference, axis=1) / np.linalg.norm(got_int8, axis=1) / np.linalg.norm(reference, axis=1)
    print(f"FaceEmbedder on LiteRT vs onnxruntime: fp32 max diff {diff:.2e}; int8 cosine min {cosine.min():.5f}")
    assert diff < FP32_TOLERANCE
    assert cosine.min() >= INT8_MIN_COSINE and cosine.mean() >= INT8_MEAN_COSINE
    with pytest.raises(InputError) as err:
        FaceEmbedder(fp32, optimization=Optimization.NONE)
    assert str(err.value).startswith(f"{fp32}: optimization = NONE, precise_int8 = True are onnxruntime settings")
