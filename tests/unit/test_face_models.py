"""models.json as the device reads it: types, file names inside the folder, size and sha256 (issue 17)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from edge.errors import BundleError, InputError
from edge.face.models import read_models_folder


def _entry(name: str, data: bytes, **over) -> dict:
    entry = {"role": "embedder", "file": name, "format": "onnx", "precision": "fp32",
             "sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "source": {}}  # fmt: skip
    return {**entry, **over}


def _write(folder: Path, models) -> Path:
    folder.mkdir(exist_ok=True)
    (folder / "models.json").write_text(json.dumps({"schema_version": 1, "models": models}))
    return folder / "models.json"


def _error(folder: Path) -> str:
    with pytest.raises(InputError) as info:
        read_models_folder(folder)
    return str(info.value).replace(str(folder), "DIR")


def test_a_good_folder_reads(tmp_path: Path) -> None:
    (tmp_path / "m.onnx").write_bytes(b"weights")
    _write(tmp_path, [_entry("m.onnx", b"weights")])
    assert read_models_folder(tmp_path).entries["embedder"].file == "m.onnx"


@pytest.mark.parametrize(
    ("models", "message"),
    [
        (5, "DIR/models.json: models = 5; expected a list of model entries"),  # defect 8: was a TypeError
        (
            [5],
            "DIR/models.json: models[0] = 5; expected an object with role, file, format, precision, sha256, size, source",
        ),
        (
            [{"role": 1}],
            "DIR/models.json: models[0] lacks key 'file'; expected role, file, format, precision, sha256, size, source",
        ),
        ([_entry("m.onnx", b"weights", size="7")], "DIR/models.json: models[0].size = '7'; expected a whole number"),
        # defect 9: a file from outside the folder was loaded
        (
            [_entry("/etc/hostname", b"x")],
            "DIR/models.json: models[0].file = '/etc/hostname'; expected a file name inside DIR",
        ),
        ([_entry("../m.onnx", b"x")], "DIR/models.json: models[0].file = '../m.onnx'; expected a file name inside DIR"),
    ],
)
def test_wrong_types_and_paths_are_one_line_errors(tmp_path: Path, models, message: str) -> None:
    (tmp_path / "m.onnx").write_bytes(b"weights")
    _write(tmp_path, models)
    assert _error(tmp_path) == message


def test_the_sha256_is_checked(tmp_path: Path) -> None:
    """Defect 9: models.json's sha256 was never checked."""
    (tmp_path / "m.onnx").write_bytes(b"tampered")
    _write(tmp_path, [_entry("m.onnx", b"weights!")])  # same size, other bytes
    good = hashlib.sha256(b"weights!").hexdigest()[:12]
    bad = hashlib.sha256(b"tampered").hexdigest()[:12]
    assert _error(tmp_path) == (
        f"DIR/models.json: models[0].file = 'm.onnx': sha256 {bad}… but models.json says {good}…; expected the "
        "file the conversion wrote"
    )
    (tmp_path / "m.onnx").write_bytes(b"short")
    assert _error(tmp_path) == "DIR/models.json: models[0].file = 'm.onnx': 5 bytes; models.json says 8"


def test_a_link_to_a_file_outside_is_refused(tmp_path: Path) -> None:
    (tmp_path / "m.onnx").symlink_to("/etc/hostname")
    _write(tmp_path, [_entry("m.onnx", Path("/etc/hostname").read_bytes())])
    assert (
        _error(tmp_path)
        == "DIR/models.json: models[0].file = 'm.onnx': not a regular file; expected the model file itself"
    )


def test_a_models_json_that_is_a_link_or_a_fifo_is_refused(tmp_path: Path) -> None:
    """Issue 44: a symbolic link named models.json was followed (any file on the device taken for the list of
    models); a FIFO must be refused too, not hang the reader."""
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "m.onnx").parent.mkdir()
    (elsewhere / "m.onnx").write_bytes(b"weights")
    real = _write(elsewhere, [_entry("m.onnx", b"weights")])
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "m.onnx").write_bytes(b"weights")
    (folder / "models.json").symlink_to(real)
    with pytest.raises(BundleError) as err:
        read_models_folder(folder)
    assert str(err.value) == (
        f"{folder}/models.json: a symbolic link; expected the file itself (bundle files are not read through links)"
    )
    (folder / "models.json").unlink()
    os.mkfifo(folder / "models.json")
    with pytest.raises(BundleError) as err:
        read_models_folder(folder)
    assert str(err.value) == f"{folder}/models.json: not a regular file; expected the file itself"


def test_a_deeply_nested_models_file_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "models.json").write_text("[" * 100_000 + "]" * 100_000)
    assert _error(tmp_path) == "DIR/models.json: nested 100000 levels deep; expected at most 32"


def _with_detector(folder: Path, **top) -> Path:
    """A folder with a BlazeFace full-range entry (fake bytes: only models.json is read here) and ``top`` keys."""
    (folder / "bf.onnx").write_bytes(b"weights")
    path = _write(folder, [_entry("bf.onnx", b"weights", role="detector.blazeface_full")])
    path.write_text(json.dumps({**json.loads(path.read_text()), **top}))
    return path


def test_the_folder_detector_is_models_json_s_or_mtcnn(tmp_path: Path) -> None:
    from edge.face.models import Detector, default_min_score, read_models_folder

    _with_detector(tmp_path)
    assert read_models_folder(tmp_path).detector is Detector.MTCNN
    _with_detector(tmp_path, detector="blazeface-full-tiled")
    assert read_models_folder(tmp_path).detector is Detector.BLAZEFACE_FULL_TILED
    assert default_min_score(Detector.MTCNN) == 0.9 and default_min_score(Detector.BLAZEFACE_FULL_TILED) == 0.0
    for bad in ("hog", ["mtcnn"], 3):
        _with_detector(tmp_path, detector=bad)
        with pytest.raises(InputError) as info:
            _ = read_models_folder(tmp_path).detector
        assert str(info.value).replace(str(tmp_path), "DIR") == (
            f"DIR/models.json: detector = {bad!r}; expected one of 'mtcnn', 'blazeface', 'blazeface-full', "
            "'blazeface-full-tiled'"
        )


def test_set_default_detector_needs_the_detector_s_model(tmp_path: Path) -> None:
    from converters.face.blazeface import set_default_detector
    from edge.face.models import Detector, read_models_folder

    path = _with_detector(tmp_path)
    set_default_detector(tmp_path, "blazeface-full-tiled")
    assert json.loads(path.read_text())["detector"] == "blazeface-full-tiled"
    assert read_models_folder(tmp_path).detector is Detector.BLAZEFACE_FULL_TILED
    with pytest.raises(InputError) as info:  # the short-range model is not in the folder
        set_default_detector(tmp_path, "blazeface")
    assert str(info.value).replace(str(tmp_path), "DIR") == (
        "DIR/models.json: no model with role 'detector.blazeface', which detector 'blazeface' runs; add it first "
        "('edge-deploy convert blazeface DIR')"
    )
    with pytest.raises(InputError, match="default detector 'hog' is unknown; expected one of 'mtcnn'"):
        set_default_detector(tmp_path, "hog")
    assert read_models_folder(tmp_path).detector is Detector.BLAZEFACE_FULL_TILED  # a refused change writes nothing
    set_default_detector(tmp_path, "mtcnn")
    assert "detector" not in json.loads(path.read_text()) and read_models_folder(tmp_path).detector is Detector.MTCNN


def test_the_blazeface_file_follows_detector_runtime(tmp_path: Path) -> None:
    """models.json ``detector_runtime``: absent or "onnxruntime" runs the ONNX translation's role, "litert" the
    .tflite original's (``set_detector_runtime`` writes it); a folder without the original says which role and
    how to add it; anything else names the key and the choices."""
    from converters.face.blazeface import set_detector_runtime
    from edge.face.models import Detector, read_models_folder

    path = _with_detector(tmp_path, detector="blazeface-full")
    assert read_models_folder(tmp_path).detector_runtime == "onnxruntime"
    assert read_models_folder(tmp_path).detector_file(Detector.BLAZEFACE_FULL_TILED) == tmp_path / "bf.onnx"
    set_detector_runtime(tmp_path, "litert")
    assert json.loads(path.read_text())["detector_runtime"] == "litert"
    with pytest.raises(InputError) as info:  # listed before the .tflite was: re-run convert blazeface
        read_models_folder(tmp_path).detector_file(Detector.BLAZEFACE_FULL)
    assert str(info.value).replace(str(tmp_path), "DIR") == (
        "DIR/models.json: no model with role 'tflite.detector.blazeface_full' for detector 'blazeface-full' on "
        "detector_runtime 'litert'; add it with 'edge-deploy convert blazeface MODELS --range full' "
        "(converters.face.blazeface.add_blazeface), or pass detector_model"
    )
    (tmp_path / "bf.tflite").write_bytes(b"original")
    data = json.loads(path.read_text())
    original = _entry("bf.tflite", b"original", role="tflite.detector.blazeface_full", format="tflite")
    path.write_text(json.dumps({**data, "models": [*data["models"], original]}))
    assert read_models_folder(tmp_path).detector_file(Detector.BLAZEFACE_FULL) == tmp_path / "bf.tflite"
    assert (
        read_models_folder(tmp_path).detector_file(Detector.MTCNN) is None
    )  # MTCNN's nets are face roles, on onnxruntime
    with pytest.raises(InputError, match="detector runtime 'tensorrt' is unknown; expected one of 'onnxruntime'"):
        set_detector_runtime(tmp_path, "tensorrt")
    assert read_models_folder(tmp_path).detector_runtime == "litert"  # a refused change writes nothing
    set_detector_runtime(tmp_path, "onnxruntime")
    assert "detector_runtime" not in json.loads(path.read_text())
    assert read_models_folder(tmp_path).detector_file(Detector.BLAZEFACE_FULL) == tmp_path / "bf.onnx"
    for bad in ("tflite", 1, ["litert"]):
        data = json.loads(path.read_text())
        path.write_text(json.dumps({**data, "detector_runtime": bad}))
        with pytest.raises(InputError) as info:
            read_models_folder(tmp_path).detector_file(Detector.BLAZEFACE_FULL)
        assert str(info.value).replace(str(tmp_path), "DIR") == (
            f"DIR/models.json: detector_runtime = {bad!r}; expected one of 'onnxruntime', 'litert'"
        )


def test_the_embedder_role_follows_embedder_runtime(tmp_path: Path) -> None:
    """models.json ``embedder_runtime``: absent or "onnxruntime" runs ``embedder``, "litert" its TFLite twin;
    anything else names the key and the choices; run_embedder_twin refuses a folder without the twin."""
    from converters.face.tflite_twins import run_embedder_twin
    from edge.face.models import read_models_folder

    for name in ("m.onnx", "m.tflite"):
        (tmp_path / name).write_bytes(b"weights")
    path = _write(tmp_path, [_entry("m.onnx", b"weights")])
    assert read_models_folder(tmp_path).embedder_role == "embedder"
    with pytest.raises(InputError) as info:
        run_embedder_twin(tmp_path)
    assert str(info.value).replace(str(tmp_path), "DIR") == (
        "DIR/models.json: no model with role 'tflite.embedder'; found embedder"
    )
    assert "embedder_runtime" not in json.loads(path.read_text())  # a refused change writes nothing
    twin = _entry("m.tflite", b"weights", role="tflite.embedder", format="tflite")
    _write(tmp_path, [_entry("m.onnx", b"weights"), twin])
    run_embedder_twin(tmp_path)
    assert json.loads(path.read_text())["embedder_runtime"] == "litert"
    assert read_models_folder(tmp_path).embedder_role == "tflite.embedder"
    for bad in ("tflite", 1, ["litert"]):
        data = json.loads(path.read_text())
        path.write_text(json.dumps({**data, "embedder_runtime": bad}))
        with pytest.raises(InputError) as info:
            _ = read_models_folder(tmp_path).embedder_role
        assert str(info.value).replace(str(tmp_path), "DIR") == (
            f"DIR/models.json: embedder_runtime = {bad!r}; expected one of 'onnxruntime', 'litert'"
        )


def test_a_face_build_writes_what_is_asked_else_the_profile_s_formats() -> None:
    """--format wins; without it the profile's runtime.face_formats, except that a user's embedder (no TFLite
    twin for it) falls back to ONNX, saying so."""
    import dataclasses

    from converters.face.build import face_output_format
    from edge.profiles import ModelFormats, load_profile

    rpi4 = load_profile("rpi4")
    litert = dataclasses.replace(rpi4, runtime=dataclasses.replace(rpi4.runtime, face_formats=ModelFormats.TFLITE))
    said: list[str] = []
    assert face_output_format(litert, None, False) is ModelFormats.TFLITE
    assert face_output_format(litert, ModelFormats.BOTH, True) is ModelFormats.BOTH  # asked: the caller refuses
    assert face_output_format(rpi4, None, True, said.append) is ModelFormats.ONNX and not said
    assert face_output_format(litert, None, True, said.append) is ModelFormats.ONNX
    assert said == [
        "--embedder: your embedder gets no TFLite twin; ONNX only (rpi4's runtime.face_formats = 'tflite' is for dlib's)"
    ]


def test_the_folder_is_read_once_and_answers_from_that_read(tmp_path: Path) -> None:
    """``read_models_folder`` reads models.json once; every query answers from that read (issue 41): with the
    file gone afterwards, the roles, paths, detector, runtimes, threshold and telemetry fields still come back,
    and the bundle id is the sha256 of the bytes that were read."""
    from edge.face.models import Detector

    (tmp_path / "m.onnx").write_bytes(b"weights")
    (tmp_path / "bf.onnx").write_bytes(b"bf")
    bf = _entry("bf.onnx", b"bf", role="detector.blazeface_full")
    path = _write(tmp_path, [_entry("m.onnx", b"weights"), bf])
    data = {**json.loads(path.read_text()), "detector": "blazeface-full", "target": "rpi4", "tool_version": "9",
            "recognition": {"threshold": 0.42, "descriptor_size": 64}}  # fmt: skip
    path.write_text(json.dumps(data))
    raw = path.read_bytes()
    folder = read_models_folder(tmp_path)
    path.unlink()
    assert folder.model_path("embedder") == tmp_path / "m.onnx"
    assert folder.detector is Detector.BLAZEFACE_FULL and folder.detector_runtime == "onnxruntime"
    assert folder.detector_file(folder.detector) == tmp_path / "bf.onnx"
    assert (folder.embedder_role, folder.threshold, folder.recognition["descriptor_size"]) == ("embedder", 0.42, 64)
    running = folder.running()
    assert (running["model"], running["profile"], running["model_version"]) == ("m", "rpi4", "9")
    assert running["bundle_id"] == hashlib.sha256(raw).hexdigest()[:16]


def test_an_optional_key_is_refused_only_when_asked_for(tmp_path: Path) -> None:
    """A wrong ``detector`` does not stop the entries being read (a detector asked for by name still runs, and
    ``set_default_detector`` can still rewrite the key): the error comes from ``.detector``, naming the key."""
    from converters.face.blazeface import set_default_detector
    from edge.face.models import Detector

    (tmp_path / "m.onnx").write_bytes(b"weights")
    path = _write(tmp_path, [_entry("m.onnx", b"weights")])
    path.write_text(json.dumps({**json.loads(path.read_text()), "detector": "haar"}))
    folder = read_models_folder(tmp_path)
    assert folder.detector_file(Detector.MTCNN) is None
    with pytest.raises(InputError) as info:
        _ = folder.detector
    assert str(info.value).replace(str(tmp_path), "DIR") == (
        "DIR/models.json: detector = 'haar'; expected one of 'mtcnn', 'blazeface', 'blazeface-full', "
        "'blazeface-full-tiled'"
    )
    set_default_detector(tmp_path, "mtcnn")
    assert read_models_folder(tmp_path).detector is Detector.MTCNN
