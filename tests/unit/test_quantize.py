"""Quantization settings, error texts and the face accuracy gate's wording (no models run here)."""

from __future__ import annotations

import pytest

from converters.face.quantize import QuantBuild, gate_failures, quantize_face_models
from converters.quantize import QuantMode, QuantSettings, quantize_model, settings_for
from edge.errors import ConversionError, InputError, ValidationError
from edge.profiles import CalibrationMethod, Precision, QuantType, load_profile


def test_settings_follow_the_profile():
    rpi4 = settings_for(load_profile("rpi4"), QuantMode.STATIC_QDQ)
    assert rpi4 == QuantSettings(
        QuantMode.STATIC_QDQ,
        activations=QuantType.UINT8,
        weights=QuantType.INT8,
        per_channel=True,
        reduce_range=False,
        calibration=CalibrationMethod.MINMAX,
        keep_float_ops=(),
        int4_block_size=32,
        int4_accuracy_level=4,
    )
    rpi5 = settings_for(load_profile("rpi5"), QuantMode.STATIC_QDQ)
    assert rpi5.activations is QuantType.INT8 and not rpi5.reduce_range
    assert settings_for(load_profile("x86_64-host"), QuantMode.DYNAMIC).reduce_range is True


def test_overrides_win_and_are_recorded():
    s = settings_for(
        load_profile("rpi4"), QuantMode.STATIC_QDQ, calibration=CalibrationMethod.ENTROPY, float_heads=True
    )
    assert s.calibration is CalibrationMethod.ENTROPY and s.float_heads
    d = s.to_dict()
    assert d["mode"] == "static-qdq" and d["calibration"] == "entropy" and d["float_heads"] is True
    assert d["activations"] == "uint8" and d["weights"] == "int8"


@pytest.mark.parametrize("key", ["calibrate", "weight_type"])
def test_unknown_override_names_the_settings(key):
    with pytest.raises(InputError) as err:
        settings_for(load_profile("rpi4"), QuantMode.STATIC_QDQ, **{key: 1})
    assert str(err.value) == (
        f"quantization override {key} is not a setting; expected one of activations, weights, per_channel, "
        "reduce_range, calibration, keep_float_ops, float_heads, int4_block_size, int4_accuracy_level, extra"
    )


@pytest.mark.parametrize("feeds", [None, []])
def test_static_quantization_without_calibration_inputs(tmp_path, feeds):
    model = tmp_path / "net.onnx"
    with pytest.raises(InputError) as err:
        quantize_model(model, tmp_path / "q.onnx", settings_for(load_profile("rpi4"), QuantMode.STATIC_QDQ), feeds)
    assert str(err.value) == f"{model}: static INT8 quantization needs calibration inputs; got none"


def test_a_model_that_is_not_onnx_is_a_conversion_error(tmp_path):
    model = tmp_path / "net.onnx"
    model.write_bytes(b"not a model")
    with pytest.raises(ConversionError) as err:
        quantize_model(model, tmp_path / "q.onnx", settings_for(load_profile("rpi4"), QuantMode.DYNAMIC))
    assert str(err.value).startswith(f"{model}: quantization pre-processing failed (")


def _measured(cos=0.9996, agree=1427, lost=0, iou=0.95) -> tuple[dict, dict]:
    embedder = {
        "faces": 54,
        "cosine_mean": cos,
        "decisions": {"agreement": agree / 1431, "agree": agree, "pairs": 1431},
    }
    lost_faces = [f"t1/aug{i} t1_person2 (best IoU 0.10)" for i in range(lost)]
    detector = {"faces": 54, "iou_min": iou, "iou_mean": 0.97, "lost": lost, "lost_faces": lost_faces}
    return embedder, detector


def test_gate_passes_within_the_thresholds():
    assert gate_failures(load_profile("rpi4"), *_measured()) == []


def test_gate_lists_every_missed_threshold_with_values():
    failures = gate_failures(load_profile("rpi4"), *_measured(cos=0.9301, agree=774, lost=1, iou=0.8132))
    assert failures == [
        "embedder: mean cosine to fp32 0.93010 < embed_mean_cosine 0.995 (rpi4.toml [thresholds]; 54 faces)",
        "embedder: same/different decisions agree with fp32 on 0.5409 of pairs (774 of 1431) < "
        "embed_decision_agreement 0.995 (rpi4.toml [thresholds])",
        "detector: 1 of 54 faces found by fp32 lost (no box with IoU >= 0.5) > detect_max_lost 0 "
        "(rpi4.toml [thresholds]): t1/aug0 t1_person2 (best IoU 0.10)",
        "detector: min IoU of a face's box with its fp32 twin 0.813 < detect_iou 0.9 (rpi4.toml [thresholds]; "
        "mean 0.970)",
    ]


def test_raise_if_failed_lists_the_failures(tmp_path):
    embedder, detector = _measured()
    build = QuantBuild(
        "rpi4", Precision.INT8, QuantMode.STATIC_QDQ, tmp_path, {}, [], {}, {}, "arm", {}, {}, embedder, detector, {}
    )
    build.raise_if_failed()  # nothing failed
    build.failures = ["a", "b"]
    with pytest.raises(ValidationError) as err:
        build.raise_if_failed()
    assert str(err.value) == (
        f"int8 face models for rpi4 failed the accuracy gate (see {tmp_path / 'quant_report.md'}):\n  a\n  b"
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"precision": Precision.FP32},
            "face models: precision 'fp32' is not a quantized precision; expected int8, fp16",
        ),
        (
            {"precision": Precision.INT4},
            "face models: precision 'int4' is not a quantized precision; expected int8, fp16",
        ),
        (
            {"precision": Precision.FP16, "mode": QuantMode.DYNAMIC},
            "face models: mode 'dynamic' does not give precision 'fp16'",
        ),
        (
            {"precision": Precision.INT8, "nets": ("embedder", "bnet")},
            "face models: no net called 'bnet'; expected one of pnet, rnet, onet, embedder",
        ),
    ],
)
def test_face_quantization_rejects_bad_requests(tmp_path, kwargs, message):
    fp32 = tmp_path / "fp32"
    fp32.mkdir()
    (fp32 / "models.json").write_text("{}")
    with pytest.raises(InputError) as err:
        quantize_face_models(fp32, tmp_path / "out", load_profile("rpi4"), **kwargs)
    assert str(err.value) == message


def test_face_quantization_needs_its_own_folder(tmp_path):
    with pytest.raises(InputError) as err:
        quantize_face_models(tmp_path, tmp_path, load_profile("rpi4"), Precision.INT8)
    assert str(err.value) == f"{tmp_path}: the quantized models need their own folder, not the fp32 folder"
