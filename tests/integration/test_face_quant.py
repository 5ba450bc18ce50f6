"""Quantized face models and the accuracy gate, on the real nets (dlib's ResNet-29, facenet-pytorch's MTCNN).

One fp32 export, one calibration run, one fp32 pass over the evaluation set and the rpi4 INT8 build are
shared by the test session (tests/conftest.py's ``face_int8_rpi4``). Calibration uses
TEST_CALIBRATION_COUNT images there (the production default is ``DEFAULT_CALIBRATION_COUNT``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from converters.compile import to_ort_format
from converters.face.calibration import constant_calibration
from converters.face.quantize import DEFAULT_CALIBRATION_COUNT, quantize_face_models
from converters.quantize import QuantMode, op_counts, quantize_model, settings_for
from edge.digest import file_sha256
from edge.errors import ValidationError
from edge.face import models as face_models
from edge.face.embed import FaceEmbedder
from edge.profiles import Precision, load_profile
from tests.conftest import TEST_CALIBRATION_COUNT

pytestmark = pytest.mark.integration

THREADS = 2


@pytest.fixture(scope="module")
def fp32_dir(face_fp32_models) -> Path:
    return face_fp32_models  # exported once per session (tests/conftest.py)


@pytest.fixture(scope="module")
def calib(face_int8_rpi4):
    return face_int8_rpi4["calibration"]  # shared with test_arm and test_cpu_int8 (tests/conftest.py)


@pytest.fixture(scope="module")
def fp32_paths(fp32_dir) -> dict[str, Path]:
    return face_models.read_models_folder(fp32_dir).model_paths(face_models.FACE_NETS)


@pytest.fixture(scope="module")
def reference(face_int8_rpi4):
    return face_int8_rpi4["reference"]


@pytest.fixture(scope="module")
def rpi4_build(face_int8_rpi4):
    return face_int8_rpi4["build"]


def test_calibration_is_real_and_disjoint(calib):
    assert TEST_CALIBRATION_COUNT < DEFAULT_CALIBRATION_COUNT
    assert calib.images == TEST_CALIBRATION_COUNT
    assert set(calib.sources) == {"lfw_subset", "skimage", "insightface"}
    assert calib.samples["embedder"] >= 20  # faces the fp32 detector found in the LFW crops
    assert calib.feeds["pnet"][0]["input"].shape[1:] == (3, 12, 12)
    assert calib.feeds["rnet"][0]["input"].shape[1:] == (3, 24, 24)
    assert calib.feeds["onet"][0]["input"].shape[1:] == (3, 48, 48)
    chips = calib.feeds["embedder"][0]["chip"]
    assert chips.shape[1:] == (3, 150, 150) and chips.max() > 200 and chips.min() < 50


def test_rpi4_int8_passes_the_gate(rpi4_build, reference):
    b = rpi4_build
    assert b.passed and b.failures == []
    assert b.embedder["faces"] == reference.faces_found == 54
    assert b.embedder["cosine_mean"] >= 0.995 and b.embedder["cosine_min"] > 0.99
    assert b.embedder["decisions"]["pairs"] == 1431
    assert b.embedder["decisions"]["agreement"] >= 0.995
    assert b.detector["lost"] == 0 and b.detector["iou_min"] >= 0.9
    report = json.loads((b.out_dir / "quant_report.json").read_text())
    assert report["passed"] is True and report["embedder"]["cosine_mean"] == b.embedder["cosine_mean"]
    assert (b.out_dir / "cosine_hist.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "Verdict: **PASSED**" in (b.out_dir / "quant_report.md").read_text()


def test_models_json_points_at_the_shipped_ort_files(rpi4_build):
    entries = face_models.read_models_folder(rpi4_build.out_dir).entries
    assert set(entries) == set(face_models.FACE_ROLES)
    assert {r: (e.format, e.precision) for r, e in entries.items()} == {
        face_models.FaceModel.EMBEDDER.role: ("ort", "int8"),
        face_models.FaceModel.PNET.role: ("ort", "fp32"),
        face_models.FaceModel.RNET.role: ("ort", "fp32"),
        face_models.FaceModel.ONET.role: ("ort", "fp32"),
        face_models.FaceModel.SHAPE5.role: ("npz", "fp32"),
    }
    emb = entries[face_models.FaceModel.EMBEDDER.role]
    assert emb.file == "face_embedder.int8.ort"
    assert emb.sha256 == file_sha256(rpi4_build.out_dir / emb.file)
    fp32_size = rpi4_build.onnx_files["embedder"]["fp32_size"]
    assert fp32_size / rpi4_build.onnx_files["embedder"]["size"] > 3.5  # int8 weights: ~4x smaller
    arithmetic = json.loads((rpi4_build.out_dir / "models.json").read_text())["int8_arithmetic"]
    assert arithmetic.startswith("gate: QDQ .onnx unfused (ORT_DISABLE_ALL), independent of the build host; ")
    assert "device: ARM:" in arithmetic
    report = json.loads((rpi4_build.out_dir / "quant_report.json").read_text())
    assert report["evaluated_as"].startswith("the quantized .onnx files with onnxruntime's graph optimisations off")
    assert report["build_host_int8_kernels"]["kind"].startswith("x86-")


def test_shipped_folder_runs_on_the_device_pipeline(rpi4_build):
    from skimage import data

    with face_models.open_face_pipeline(rpi4_build.out_dir, THREADS) as pipeline:
        faces = pipeline.analyze(data.astronaut())
    assert len(faces) == 1
    assert faces[0].descriptor.shape == (128,)


def test_embedder_qdq_structure(rpi4_build):
    path = rpi4_build.out_dir / rpi4_build.onnx_files["embedder"]["file"]
    counts = op_counts(path)
    assert counts["Conv"] == 29 and counts["Gemm"] == 1
    model = onnx.load(str(path))
    inits = {i.name: i for i in model.graph.initializer}
    producer = {o: n for n in model.graph.node for o in n.output}
    dq = [n for n in model.graph.node if n.op_type == "DequantizeLinear"]
    # Every quantized activation is a Q -> DQ pair; 60 constants (30 weights, 29 biases, 1 more) are stored
    # quantized and dequantized on load.
    assert counts["QuantizeLinear"] == 57 == sum(producer.get(n.input[0]) is not None for n in dq)
    assert sum(n.input[0] in inits for n in dq) == 60 and counts["DequantizeLinear"] == 117
    for node in (n for n in model.graph.node if n.op_type in ("Conv", "Gemm")):
        assert producer[node.input[0]].op_type == "DequantizeLinear", node.name
        w_dq = producer[node.input[1]]
        assert w_dq.op_type == "DequantizeLinear", node.name
        weight, scale = inits[w_dq.input[0]], inits[w_dq.input[1]]
        assert weight.data_type == onnx.TensorProto.INT8, node.name
        if node.op_type == "Conv":  # per-channel: one scale per output channel, along axis 0
            assert list(scale.dims) == [weight.dims[0]], node.name
            assert [a.i for a in w_dq.attribute if a.name == "axis"] in ([], [0])
        if len(node.input) > 2:  # the final Gemm has no bias
            assert inits[producer[node.input[2]].input[0]].data_type == onnx.TensorProto.INT32, node.name


def test_gate_fails_on_a_broken_quantization(fp32_dir, calib, reference, tmp_path):
    # The embedder calibrated on flat grey chips: its activation ranges clip every real face.
    grey = constant_calibration(calib, 127.5)
    broken = constant_calibration(calib, 127.5)
    broken.feeds = {**calib.feeds, "embedder": grey.feeds["embedder"]}
    with pytest.raises(ValidationError) as err:
        quantize_face_models(
            fp32_dir, tmp_path, load_profile("rpi4"), Precision.INT8, calibration=broken, reference=reference
        )
    report = json.loads((tmp_path / "quant_report.json").read_text())  # written before the error
    e = report["embedder"]
    assert report["passed"] is False
    assert e["cosine_mean"] < 0.98 and e["decisions"]["agreement"] < 0.9
    dec = e["decisions"]
    expected = [
        f"embedder: mean cosine to fp32 {e['cosine_mean']:.5f} < embed_mean_cosine 0.995 "
        "(rpi4.toml [thresholds]; 54 faces)",
        f"embedder: same/different decisions agree with fp32 on {dec['agreement']:.4f} of pairs "
        f"({dec['agree']} of 1431) < embed_decision_agreement 0.995 (rpi4.toml [thresholds])",
    ]
    assert report["failures"] == expected
    assert str(err.value) == (
        f"int8 face models for rpi4 failed the accuracy gate (see {tmp_path / 'quant_report.md'}):\n  "
        + "\n  ".join(expected)
    )
    assert "Verdict: **FAILED**" in (tmp_path / "quant_report.md").read_text()
    assert (tmp_path / "cosine_hist.png").is_file()


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.mark.parametrize("mode", [QuantMode.FP16, QuantMode.DYNAMIC])
def test_fp16_and_dynamic_int8_give_runnable_models(mode, fp32_paths, reference, tmp_path):
    settings = settings_for(load_profile("rpi4"), mode)
    out = tmp_path / "embedder.onnx"
    quantize_model(fp32_paths["embedder"], out, settings)
    counts = op_counts(out)
    if mode is QuantMode.FP16:
        assert counts["Conv"] == 29 and counts["Cast"] >= 2
        assert onnx.load(str(out)).graph.initializer[0].data_type == onnx.TensorProto.FLOAT16
    else:
        assert counts["ConvInteger"] == 29 and counts["DynamicQuantizeLinear"] >= 29
    with FaceEmbedder(out, threads=THREADS) as embedder:
        quant = embedder.embed(reference.chips)
    cos = _cosines(reference.descriptors.astype(np.float64), quant.astype(np.float64))
    assert cos.mean() > 0.995, cos.mean()


def test_ort_format_is_built_for_arm_and_loads(rpi4_build, reference, fp32_paths, tmp_path):
    assert rpi4_build.ort_platform == "arm"
    out = rpi4_build.out_dir
    onnx_file = out / rpi4_build.onnx_files["embedder"]["file"]
    ort_file = out / rpi4_build.ort_files["embedder"]["file"]
    feeds = {"chip": reference.chips[:4].transpose(0, 3, 1, 2).astype(np.float32)}
    from_ort = ort.InferenceSession(str(ort_file), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    from_onnx = ort.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(from_ort, from_onnx, atol=1e-6)
    # The x86 build of a float net bakes in the NCHWc layout (Reorder nodes around NCHWc convs); the ARM
    # build never does. (Both files list the com.microsoft.nchwc domain among the opsets ORT knows.)
    arm = to_ort_format(fp32_paths["pnet"], tmp_path / "arm", load_profile("rpi4"))
    x86 = to_ort_format(fp32_paths["pnet"], tmp_path / "x86", load_profile("x86_64-host"))
    assert b"ReorderInput" in x86.read_bytes() and b"reg_nchwc" in x86.read_bytes()
    for shipped in [arm, *(out / f["file"] for f in rpi4_build.ort_files.values())]:
        data = shipped.read_bytes()
        assert b"ReorderInput" not in data and b"ReorderOutput" not in data and b"_nchwc" not in data, shipped
