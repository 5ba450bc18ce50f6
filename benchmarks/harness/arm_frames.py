"""What the emulated-ARM face benchmarks share: the 640x480 frames, and the face folders they count."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from benchmarks.harness.face_speed_models import CACHE
from converters.face.blazeface import SHORT_RANGE

FRAME_SIZE = (640, 480)
#: The build of a row whose INT8 embedder runs its TFLite twin on LiteRT (``with_litert_embedder``).
LITERT_EMBEDDER = "int8-litert-embedder"


def letterbox(rgb: np.ndarray, size: tuple[int, int] = FRAME_SIZE) -> np.ndarray:
    """``rgb`` scaled to fit ``size`` (width, height) with INTER_AREA, centred on black."""
    import cv2

    width, height = size
    scale = min(width / rgb.shape[1], height / rgb.shape[0])
    w, h = round(rgb.shape[1] * scale), round(rgb.shape[0] * scale)
    out = np.zeros((height, width, 3), np.uint8)
    x, y = (width - w) // 2, (height - h) // 2
    out[y : y + h, x : x + w] = cv2.resize(rgb, (w, h), interpolation=cv2.INTER_AREA)
    return out


def frame_files(work: Path) -> tuple[Path, Path]:
    """The frame (grace_hopper letterboxed to 640x480, .npy) and frame_speed's gallery of 100, written once."""
    from benchmarks.harness.face_frames import make_gallery
    from converters.face.facedata import package_dir
    from edge.imageio import load_image

    work.mkdir(parents=True, exist_ok=True)
    frame, gallery = work / "grace_hopper_640x480.npy", work / "gallery100.npz"
    photo = load_image(package_dir("matplotlib") / "mpl-data" / "sample_data" / "grace_hopper.jpg")
    np.save(frame, letterbox(photo))
    make_gallery().save(gallery)
    return frame, gallery


def clip_file(work: Path, frames: int) -> Path:
    """grace_hopper (the still frame's photo) filmed by a hand-held camera for ``frames`` 640x480 frames
    (``facedata.camera_clip``), uint8 [T, H, W, 3] as .npy, written once."""
    from converters.face.facedata import camera_clip, package_dir
    from edge.imageio import load_image

    work.mkdir(parents=True, exist_ok=True)
    path = work / f"grace_hopper_clip{frames}_640x480.npy"
    if not path.is_file():
        photo = load_image(package_dir("matplotlib") / "mpl-data" / "sample_data" / "grace_hopper.jpg")
        np.save(path, np.stack(camera_clip(photo, frames, FRAME_SIZE)))
    return path


def folders(profile_name: str, progress, builds: set[str] | None = None) -> dict[str, Path]:
    """The fp32 and the profile's INT8 face folders, each with BlazeFace full and short range added, and a copy
    of the INT8 one whose embedder runs its TFLite twin on LiteRT (cached).

    ``builds``: the keys wanted (None: all three); without ``LITERT_EMBEDDER`` no TFLite twin is made (onnx2tf).
    """
    from benchmarks.harness.face_speed_models import build_fp32, build_int8, race_models, with_blazeface
    from converters.face.quantize import DEFAULT_CALIBRATION_COUNT
    from edge.profiles import load_profile

    CACHE.mkdir(parents=True, exist_ok=True)
    profile = load_profile(profile_name)
    if builds is not None and LITERT_EMBEDDER not in builds:
        fp32_dir = build_fp32(CACHE, progress)
        int8_dir, _ = build_int8(fp32_dir, profile, CACHE, DEFAULT_CALIBRATION_COUNT, progress)
        out = {"fp32": fp32_dir, "int8": int8_dir}
        return {k: with_short_range(with_blazeface(v, progress), progress) for k, v in out.items() if k in builds}
    models = race_models(profile, DEFAULT_CALIBRATION_COUNT, progress)
    fp32 = with_short_range(with_blazeface(models.fp32_dir, progress), progress)
    int8 = with_short_range(with_blazeface(models.int8_dir, progress), progress)
    return {"fp32": fp32, "int8": int8, LITERT_EMBEDDER: with_litert_embedder(int8, models.tflite["int8"], progress)}


def with_litert_embedder(int8: Path, twin: Path, progress) -> Path:
    """A copy of the INT8 folder that runs its embedder's full-integer TFLite twin on LiteRT: the twin under
    models.json role ``tflite.embedder`` and ``embedder_runtime = "litert"``, as ``convert face --format
    tflite`` writes them. The twin is face_speed's (``build_tflite``: onnx2tf from the same fp32 ONNX, int8 in
    and out, calibrated on that race's chips), not the build's own, which ``quantize_face_models`` does not
    make; the same conversion ``converters.face.tflite_twins`` runs."""
    import shutil

    from converters.face.tflite_twins import run_embedder_twin
    from edge.face import models as face_models

    folder = int8.with_name(f"{int8.name}-{LITERT_EMBEDDER}")
    models_file = folder / face_models.MODELS_FILE
    if models_file.is_file() and face_models.read_models_folder(folder).embedder_role != "embedder":
        return folder
    progress(f"copying {int8.name} to run its embedder's TFLite twin ({twin.name}) on LiteRT")
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(int8, tmp)
    shutil.copyfile(twin, tmp / twin.name)
    path = tmp / face_models.MODELS_FILE
    data = json.loads(path.read_text(encoding="utf-8"))
    source = face_models.read_models_folder(tmp).entries[face_models.FaceModel.EMBEDDER.role].source
    entry = face_models.describe(tmp / twin.name, face_models.TFLITE_EMBEDDER_ROLE, "tflite", "int8", source)
    data["models"] = [m for m in data["models"] if m["role"] != entry.role] + [entry.to_dict()]
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    run_embedder_twin(tmp)
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    return folder


def with_short_range(folder: Path, progress) -> Path:
    """``folder`` with BlazeFace short range added too (``convert blazeface`` with the default range)."""
    from converters.face.blazeface import add_blazeface
    from edge.face.models import BLAZEFACE_ROLES, Detector, read_models_folder

    if BLAZEFACE_ROLES[Detector.BLAZEFACE] not in read_models_folder(folder).entries:
        progress(f"adding BlazeFace short range to {folder.name}")
        add_blazeface(folder, SHORT_RANGE)
    return folder


def one_face_frame_png(work: Path) -> Path:
    """arm_frame's frame: matplotlib's grace_hopper.jpg letterboxed to 640x480, as a PNG the page can open."""
    import cv2

    from converters.face.facedata import package_dir
    from edge.imageio import load_image

    frame = letterbox(load_image(package_dir("matplotlib") / "mpl-data" / "sample_data" / "grace_hopper.jpg"))
    path = work / "grace_hopper_640x480.png"
    cv2.imwrite(str(path), cv2.cvtColor(frame, cv2.COLOR_RGB2BGR))
    return path
