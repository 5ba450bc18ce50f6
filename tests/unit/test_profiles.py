"""Target profiles: the shipped ones load, and every kind of mistake names file, key and what is allowed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from edge.errors import ProfileError
from edge.profiles import (
    DEFAULT_PROFILE_DIR,
    IsaFeature,
    Precision,
    Runtime,
    available_targets,
    detect_target,
    load_all,
    load_profile,
)

EXPECTED = {"rpi4", "rpi5", "rpi-zero-2w", "aarch64-generic", "x86_64-host", "browser-wasm"}


def test_shipped_profiles_load_and_differ_in_data():
    profiles = {p.name: p for p in load_all()}
    assert set(profiles) == EXPECTED
    assert profiles["rpi4"].cpu.model == "Cortex-A72"
    assert IsaFeature.DOTPROD not in profiles["rpi4"].cpu.isa_features
    assert {IsaFeature.NEON, IsaFeature.DOTPROD, IsaFeature.FP16} <= profiles["rpi5"].cpu.isa_features
    assert profiles["rpi-zero-2w"].memory.max_mb == 512
    assert profiles["browser-wasm"].runtime.default is Runtime.ONNXRUNTIME_WEB
    assert profiles["x86_64-host"].runtime.precision is Precision.FP32
    for p in profiles.values():
        assert 1 <= p.runtime.threads <= p.cpu.cores
        assert p.to_dict()["name"] == p.name


def _copy(tmp_path: Path, name: str = "rpi4") -> Path:
    d = tmp_path / "profiles"
    d.mkdir(exist_ok=True)
    shutil.copy(DEFAULT_PROFILE_DIR / f"{name}.toml", d / f"{name}.toml")
    return d


def _edit(d: Path, name: str, old: str, new: str) -> None:
    f = d / f"{name}.toml"
    text = f.read_text()
    assert old in text, old
    f.write_text(text.replace(old, new, 1))


def test_unknown_target_lists_the_known_ones():
    with pytest.raises(ProfileError) as exc:
        load_profile("rpi9")
    assert str(exc.value).startswith(
        "unknown target 'rpi9'; expected one of aarch64-generic, browser-wasm, rpi-zero-2w, rpi4, rpi5, x86_64-host"
    )


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ('weights = "int8"', 'weights = "uint4"', "quant.weights = 'uint4'; expected one of int8, uint8"),
        ("cores = 4", 'cores = "four"', "cpu.cores = 'four'; expected a whole number"),
        (
            'isa_features = ["neon"]',
            'isa_features = ["neon", "avx2"]',
            "cpu.isa_features has avx2, which cpu.arch = 'aarch64' does not have",
        ),
        ("threads = 4", "threads = 8", "runtime.threads = 8; expected 1 to cpu.cores (4)"),
        (
            "per_channel = true",
            "per_channel = true\nbogus = 1",
            "unknown key quant.bogus; expected one of activations, calibration, int4_accuracy_level",
        ),
        ('precision = "int8"', "", "missing key runtime.precision"),
        (
            "embed_mean_cosine = 0.995",
            "embed_mean_cosine = 1.5",
            "thresholds.embed_mean_cosine = 1.5; expected a number in (0, 1]",
        ),
        ('name = "rpi4"', 'name = "rpi5"', "name = 'rpi5'; expected 'rpi4' (the file's name)"),
        (
            "[memory]",
            "[memroy]",
            "unknown table [memroy]; expected one of [cpu], [memory], [quant], [runtime], [thresholds]",
        ),
        (
            'default = "onnxruntime"',
            'default = "onnxruntime-web"',
            "runtime.default = 'onnxruntime-web' with cpu.arch = 'aarch64'; onnxruntime-web is for, and only for, wasm32",
        ),
        ("schema_version = 1", "schema_version = 2", "schema_version = 2; expected 1"),
        (
            'face_formats = "onnx"',
            'face_formats = "tf"',
            "runtime.face_formats = 'tf'; expected one of onnx, tflite, both",
        ),
        (
            "slm_greedy_tokens = 16",
            "slm_greedy_tokens = 16\nslm_min_same_top1 = 95.8",
            "thresholds.slm_min_same_top1 = 95.8; expected a number in (0, 1]",
        ),
        (
            "slm_greedy_tokens = 16",
            "slm_greedy_tokens = 16\nslm_max_perplexity_ratio = 0.9",
            "thresholds.slm_max_perplexity_ratio = 0.9; expected a number >= 1.0",
        ),
    ],
)
def test_bad_profile_names_file_key_and_allowed(tmp_path, old, new, message):
    d = _copy(tmp_path)
    _edit(d, "rpi4", old, new)
    with pytest.raises(ProfileError) as exc:
        load_profile("rpi4", d)
    assert str(exc.value).endswith("rpi4.toml: " + message) or ("rpi4.toml: " + message) in str(exc.value)


def test_not_toml(tmp_path):
    d = tmp_path / "p"
    d.mkdir()
    (d / "rpi4.toml").write_text("this is = = not toml")
    with pytest.raises(ProfileError, match=r"rpi4\.toml: not valid TOML"):
        load_profile("rpi4", d)


def test_available_targets_sorted():
    assert available_targets() == sorted(EXPECTED)


def test_detect_target_from_device_tree(tmp_path):
    model = tmp_path / "model"
    model.write_bytes(b"Raspberry Pi 5 Model B Rev 1.0\x00")
    assert detect_target(model).name == "rpi5"
    model.write_bytes(b"Raspberry Pi 4 Model B Rev 1.4\x00")
    assert detect_target(model).name == "rpi4"
    model.write_bytes(b"Some Other Board\x00")
    assert detect_target(model) is None
    assert detect_target(tmp_path / "absent") is None


def test_an_x86_target_cannot_ask_for_int8_activations_in_int4_matmuls(tmp_path):
    d = _copy(tmp_path, "x86_64-host")
    _edit(d, "x86_64-host", "int4_accuracy_level = 0", "int4_accuracy_level = 4")
    with pytest.raises(ProfileError) as exc:
        load_profile("x86_64-host", d)
    assert "x86_64-host.toml: quant.int4_accuracy_level = 4 on cpu.arch = 'x86_64'; expected 0 to 3: level 4" in str(
        exc.value
    )
    rpi4 = load_profile("rpi4")  # ARM targets keep level 4: the emulated-Pi check measures what they compute
    assert rpi4.quant.int4_accuracy_level == 4


def test_a_profile_without_face_formats_builds_onnx(tmp_path):
    from edge.profiles import ModelFormats

    d = _copy(tmp_path)
    _edit(d, "rpi4", 'face_formats = "onnx"', "")
    profile = load_profile("rpi4", d)
    assert "face_formats" not in (d / "rpi4.toml").read_text() and profile.runtime.face_formats is ModelFormats.ONNX


def test_face_formats_by_measurement_and_no_tflite_for_the_browser(tmp_path):
    """rpi5 runs the embedder's TFLite twin (cheaper on its core, docs/benchmarks.md arm-frame); every other
    shipped profile builds ONNX only; the browser may not ask for TFLite."""
    from edge.profiles import ModelFormats

    formats = {p.name: p.runtime.face_formats for p in load_all()}
    assert formats.pop("rpi5") is ModelFormats.TFLITE and set(formats.values()) == {ModelFormats.ONNX}
    assert load_profile("rpi4").to_dict()["runtime"]["face_formats"] == "onnx"
    d = _copy(tmp_path, "browser-wasm")
    _edit(d, "browser-wasm", 'face_formats = "onnx"', 'face_formats = "both"')
    with pytest.raises(ProfileError) as exc:
        load_profile("browser-wasm", d)
    assert str(exc.value).endswith(
        "browser-wasm.toml: runtime.face_formats = 'both' with cpu.arch = 'wasm32'; expected 'onnx' (the browser "
        "runs onnxruntime-web)"
    )
    d = _copy(tmp_path, "rpi4")
    _edit(d, "rpi4", 'face_formats = "onnx"', 'face_formats = "both"')
    assert load_profile("rpi4", d).runtime.face_formats.tflite


def test_slm_formats_default_onnx_absent_or_not_and_no_twin_for_the_browser(tmp_path):
    from edge.profiles import ModelFormats

    assert {p.runtime.slm_formats for p in load_all()} == {ModelFormats.ONNX}  # nothing measured favours LiteRT yet
    assert load_profile("rpi5").to_dict()["runtime"]["slm_formats"] == "onnx"
    d = _copy(tmp_path, "rpi5")
    _edit(d, "rpi5", 'slm_formats = "onnx"', "")
    assert load_profile("rpi5", d).runtime.slm_formats is ModelFormats.ONNX  # profiles written before the key
    (tmp_path / "tf").mkdir()
    d = _copy(tmp_path / "tf", "rpi5")
    _edit(d, "rpi5", 'slm_formats = "onnx"', 'slm_formats = "tflite"')
    assert load_profile("rpi5", d).runtime.slm_formats is ModelFormats.TFLITE
    _edit(d, "rpi5", 'slm_formats = "tflite"', 'slm_formats = "litert"')
    with pytest.raises(ProfileError) as exc:
        load_profile("rpi5", d)
    assert str(exc.value).endswith("rpi5.toml: runtime.slm_formats = 'litert'; expected one of onnx, tflite, both")
    (tmp_path / "web").mkdir()
    d = _copy(tmp_path / "web", "browser-wasm")
    _edit(d, "browser-wasm", 'slm_formats = "onnx"', 'slm_formats = "tflite"')
    with pytest.raises(ProfileError) as exc:
        load_profile("browser-wasm", d)
    assert str(exc.value).endswith(
        "browser-wasm.toml: runtime.slm_formats = 'tflite' with cpu.arch = 'wasm32'; expected 'onnx' (the browser "
        "runs onnxruntime-web)"
    )


def test_lm_head_is_fp32_where_no_fast_8bit_kernel_runs_and_checked(tmp_path):
    """quant.lm_head: the Pi 4 (no dot product) and the x86 host (accuracy level 0) compute the 8-bit head in
    fp32, the Pi 5 keeps int8 (UDOT); absent means int8; anything else names the key and the choices."""
    from edge.profiles import LmHead

    heads = {p.name: p.quant.lm_head for p in load_all()}
    assert heads["rpi4"] is LmHead.FP32 and heads["rpi5"] is LmHead.INT8
    assert heads["x86_64-host"] is LmHead.FP32
    assert load_profile("rpi4").to_dict()["quant"]["lm_head"] == "fp32"
    d = _copy(tmp_path)
    _edit(d, "rpi4", 'lm_head = "fp32"\n', "")
    assert load_profile("rpi4", d).quant.lm_head is LmHead.INT8
    d = _copy(tmp_path)  # a fresh copy of the shipped file
    _edit(d, "rpi4", 'lm_head = "fp32"', 'lm_head = "fp16"')
    with pytest.raises(ProfileError) as exc:
        load_profile("rpi4", d)
    assert "rpi4.toml: quant.lm_head = 'fp16'; expected one of int8, fp32" in str(exc.value)


def test_the_face_detector_key(tmp_path):
    """runtime.face_detector: optional (mtcnn), one of the detectors. The Pi-class ARM profiles and the browser ship
    BlazeFace full range, tiled; MTCNN is one line of the profile away, the browser page runs either."""
    from edge.face.models import Detector

    shipped = {p.name: p.runtime.face_detector for p in load_all()}
    assert {name for name, d in shipped.items() if d is Detector.BLAZEFACE_FULL_TILED} == {
        "rpi4", "rpi5", "rpi-zero-2w", "aarch64-generic", "browser-wasm"
    }  # fmt: skip
    assert shipped["x86_64-host"] is Detector.MTCNN
    d = _copy(tmp_path)
    for name in ("rpi5", "browser-wasm"):
        _copy(tmp_path, name)
    _edit(d, "rpi4", 'face_detector = "blazeface-full-tiled"', "")
    assert load_profile("rpi4", d).runtime.face_detector is Detector.MTCNN
    _edit(d, "rpi5", 'face_detector = "blazeface-full-tiled"', 'face_detector = "mtcnn"')
    assert load_profile("rpi5", d).to_dict()["runtime"]["face_detector"] == "mtcnn"
    _edit(d, "rpi5", 'face_detector = "mtcnn"', 'face_detector = "hog"')
    with pytest.raises(ProfileError, match="runtime.face_detector = 'hog'; expected one of mtcnn, blazeface, "):
        load_profile("rpi5", d)
    _edit(d, "browser-wasm", 'face_detector = "blazeface-full-tiled"', 'face_detector = "mtcnn"')
    assert load_profile("browser-wasm", d).runtime.face_detector is Detector.MTCNN


def test_the_face_detector_runtime_key(tmp_path):
    """runtime.face_detector_runtime: optional (onnxruntime), litert on the Pis by measurement (arm-frame), and
    neither onnxruntime-web nor litert accepted where they cannot run it."""
    from edge.profiles import Runtime

    chosen = {p.name: p.runtime.face_detector_runtime for p in load_all()}
    assert {name for name, runtime in chosen.items() if runtime is Runtime.LITERT} == {"rpi4", "rpi5"}
    assert load_profile("rpi5").to_dict()["runtime"]["face_detector_runtime"] == "litert"
    d = _copy(tmp_path)
    for name in ("rpi5", "browser-wasm"):
        _copy(tmp_path, name)
    _edit(d, "rpi4", 'face_detector_runtime = "litert"', "")
    assert load_profile("rpi4", d).runtime.face_detector_runtime is Runtime.ONNXRUNTIME
    _edit(d, "rpi5", 'face_detector_runtime = "litert"', 'face_detector_runtime = "onnxruntime-web"')
    with pytest.raises(ProfileError) as exc:
        load_profile("rpi5", d)
    assert str(exc.value).endswith(
        "rpi5.toml: runtime.face_detector_runtime = 'onnxruntime-web' with cpu.arch = 'aarch64'; expected "
        "'onnxruntime' or 'litert'"
    )
    _edit(d, "rpi5", 'face_detector_runtime = "onnxruntime-web"', 'face_detector_runtime = "tvm"')
    with pytest.raises(ProfileError, match="runtime.face_detector_runtime = 'tvm'; expected one of onnxruntime, "):
        load_profile("rpi5", d)
    _edit(d, "browser-wasm", 'face_detector = "blazeface-full-tiled"',
          'face_detector = "blazeface-full-tiled"\nface_detector_runtime = "litert"')  # fmt: skip
    with pytest.raises(ProfileError) as exc:
        load_profile("browser-wasm", d)
    assert str(exc.value).endswith(
        "browser-wasm.toml: runtime.face_detector_runtime = 'litert' with cpu.arch = 'wasm32'; expected 'onnxruntime'"
    )


def test_the_user_model_gate_keys_are_checked(tmp_path):
    d = _copy(tmp_path)
    _edit(d, "rpi4", "model_min_top1 = 0.98", "model_min_top1 = 1.5")
    with pytest.raises(ProfileError) as exc:
        load_profile("rpi4", d)
    assert "thresholds.model_min_top1 = 1.5; expected a number in (0, 1]" in str(exc.value)
    (tmp_path / "b").mkdir()
    d = _copy(tmp_path / "b")
    _edit(d, "rpi4", "model_max_rel_error = 0.05\n", "")
    assert load_profile("rpi4", d).thresholds.model_max_rel_error == 0.05  # optional: the default
