"""The models and chips the face speed race runs on, built once and cached under ``.cache/bench/``.

* fp32 folder: ``converters.face.build._export`` + ``models.json`` (dlib's ResNet-29 embedder, MTCNN, shape5);
* INT8 folder: ``converters.face.quantize.quantize_face_models`` (static QDQ per target profile, with the
  accuracy gate; it ships ORT-format files and keeps the QDQ ``.onnx`` next to them), keyed by the fp32
  embedder's sha256;
* TFLite: ``converters.tflite.convert.export_tflite`` (onnx2tf, its own venv) on the fp32 embedder, INT8 calibrated
  on the same embedder chips as the ONNX INT8 model, keyed by the fp32 embedder's sha256;
* chips: real aligned chips the fp32 pipeline cuts from the evaluation photos (``make_eval_set(0)``).

Host side: imports converters (torch for the export), never used on the device.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.harness.procstat import child_env, child_python
from converters.face.blazeface import FULL_RANGE
from converters.tools import run_tool
from edge.digest import file_sha256
from edge.errors import ConversionError, EdgeDeployError, InferenceError, InputError
from edge.face import models as face_models
from edge.face.models import FaceModel
from edge.profiles import Precision, TargetProfile
from edge.progress import ProgressFn, silent
from testsupport.needs import ONNX2TF, install_on_first_use

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache" / "bench"
#: How much of a sha256 names a cache folder.
KEY_CHARS = 16


@dataclass(frozen=True)
class RaceModels:
    """Every file the race needs.

    Attributes:
        fp32_dir: fp32 models folder (models.json).
        int8_dir: INT8 models folder (models.json pointing at the shipped ORT-format files).
        onnx_fp32, onnx_int8: the embedder as ONNX fp32 and as static QDQ INT8 ONNX.
        ort_int8: the embedder's shipped ORT-format INT8 file.
        tflite: TFLite files of the embedder by variant ("fp32", "int8", "int8_float_io").
        quant_report: ``quant_report.json`` of the INT8 build (the gate's verdict and measurements).
    """

    fp32_dir: Path
    int8_dir: Path
    onnx_fp32: Path
    onnx_int8: Path
    ort_int8: Path
    tflite: dict[str, Path]
    quant_report: dict


def _usable(folder: Path) -> bool:
    try:
        face_models.read_models_folder(folder)
    except EdgeDeployError:
        return False
    return True


def build_fp32(cache: Path, progress: ProgressFn = silent) -> Path:
    """The fp32 face models folder, exported once into ``cache/face-fp32`` (``export_face_models``)."""
    from converters.face.build import export_face_models

    return export_face_models(cache / "face-fp32", "host", progress)


def build_int8(fp32_dir: Path, profile: TargetProfile, cache: Path, calibration_count: int, progress: ProgressFn):
    """The INT8 folder of ``quantize_face_models`` (gate checked, report kept), cached by embedder sha256.

    Returns:
        (int8 folder, calibration set or None when the folder came from the cache).
    """
    from converters.face.calibration import collect_calibration
    from converters.face.quantize import quantize_face_models

    key = face_models.read_models_folder(fp32_dir).entries[face_models.FaceModel.EMBEDDER.role].sha256[:KEY_CHARS]
    folder = cache / f"face-int8-{profile.name}-c{calibration_count}-{key}"
    if _usable(folder) and (folder / "quant_report.json").is_file():
        return folder, None
    calib = collect_calibration(fp32_dir, calibration_count, threads=2, progress=progress)
    # check=False: a failed gate is reported in the benchmark (with its reasons), not hidden by an exception.
    quantize_face_models(
        fp32_dir, folder, profile, Precision.INT8, calibration_count, progress, calibration=calib, check=False
    )
    return folder, calib


def build_tflite(onnx_fp32: Path, cache: Path, calib_nchw: np.ndarray | None, progress: ProgressFn) -> dict[str, Path]:
    """fp32, int8 (int8 I/O) and int8_float_io TFLite embedders, cached by the ONNX file's sha256.

    Args:
        onnx_fp32: the fp32 ONNX embedder.
        cache: cache root.
        calib_nchw: float32 [N, 3, 150, 150] raw 0..255 chips to calibrate on; when None they are
            collected again (only needed if the TFLite cache is empty).
        progress: one line per step.
    """
    from converters.tflite.convert import export_tflite

    folder = cache / f"tflite-{file_sha256(onnx_fp32)[:KEY_CHARS]}"
    files = {v: folder / f"{onnx_fp32.stem}_{v}.tflite" for v in ("fp32", "int8", "int8_float_io")}
    if all(p.is_file() for p in files.values()):
        return files
    if calib_nchw is None:
        raise ConversionError(f"{folder}: TFLite files missing and no calibration chips given to make them")
    nhwc = np.ascontiguousarray(calib_nchw.transpose(0, 2, 3, 1), dtype=np.float32)
    install_on_first_use(ONNX2TF, "benchmarks/face_speed.py (the TFLite embedders)")
    export_tflite(onnx_fp32, folder, int8=True, calibration=nhwc, input_name="chip", progress=progress)
    return files


def race_models(profile: TargetProfile, calibration_count: int, progress: ProgressFn = silent) -> RaceModels:
    """Build (or reuse from ``.cache/bench``) every model of the race."""
    CACHE.mkdir(parents=True, exist_ok=True)
    fp32_dir = build_fp32(CACHE, progress)
    int8_dir, calib = build_int8(fp32_dir, profile, CACHE, calibration_count, progress)
    onnx_fp32 = face_models.read_models_folder(fp32_dir).model_path(face_models.FaceModel.EMBEDDER.role)
    chips = None
    if calib is not None:
        chips = np.concatenate([f["chip"] for f in calib.feeds[FaceModel.EMBEDDER]])
    elif not (CACHE / f"tflite-{file_sha256(onnx_fp32)[:KEY_CHARS]}").is_dir():
        from converters.face.calibration import collect_calibration

        calib = collect_calibration(fp32_dir, calibration_count, threads=2, progress=progress)
        chips = np.concatenate([f["chip"] for f in calib.feeds[FaceModel.EMBEDDER]])
    tflite = build_tflite(onnx_fp32, CACHE, chips, progress)
    report = json.loads((int8_dir / "quant_report.json").read_text(encoding="utf-8"))
    int8_onnx = int8_dir / report["onnx_files"]["embedder"]["file"]
    return RaceModels(
        fp32_dir=fp32_dir,
        int8_dir=int8_dir,
        onnx_fp32=onnx_fp32,
        onnx_int8=int8_onnx,
        ort_int8=face_models.read_models_folder(int8_dir).model_path(face_models.FaceModel.EMBEDDER.role),
        tflite=tflite,
        quant_report=report,
    )


def eval_photos(limit: int | None = None) -> list[tuple[str, np.ndarray]]:
    """(name, uint8 RGB) of the evaluation photos: originals and their seeded augmentations."""
    from converters.face.facedata import make_eval_images

    images = make_eval_images(0)
    return [(im.name, im.rgb) for im in images[:limit]]


def real_chips(fp32_dir: Path, photos: list[tuple[str, np.ndarray]], limit: int) -> np.ndarray:
    """Up to ``limit`` aligned chips (uint8 [N, 150, 150, 3]) the fp32 device pipeline cuts from ``photos``."""
    chips: list[np.ndarray] = []
    with face_models.open_face_pipeline(fp32_dir, threads=2) as pipeline:
        for _name, rgb in photos:
            found = pipeline.detector.detect(rgb)
            if found:
                chips.extend(pipeline.chips(rgb, found))
            if len(chips) >= limit:
                break
    if not chips:
        raise InputError(f"the fp32 pipeline of {fp32_dir} found no face in {len(photos)} evaluation photos")
    return np.stack(chips[:limit])


#: The .tflite original that ``convert blazeface`` keeps in the folder beside its ONNX translation.
BLAZEFACE_FULL_TFLITE = FULL_RANGE.name
#: calibration images of the INT8 build (``--calibration``; serve_fps.py and face_rss.py use the same cached folder)
CALIBRATION = 200


def with_blazeface(folder: Path, progress) -> Path:
    """A copy of a face folder with BlazeFace full range added (``edge-deploy convert blazeface --range full``)."""
    import shutil

    from converters.face.blazeface import add_blazeface
    from edge.face.models import BLAZEFACE_ROLES, Detector, read_models_folder

    copy = folder.with_name(folder.name + "-blazeface-full")
    if copy.is_dir() and BLAZEFACE_ROLES[Detector.BLAZEFACE_FULL] in read_models_folder(copy).entries:
        return copy
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(folder, copy)
    progress(f"adding BlazeFace full range to {copy.name}")
    add_blazeface(copy, FULL_RANGE)
    return copy


#: The peak-RSS child process (``python -m``), and how long one may take.
CHILD = "benchmarks.harness.face_rss_child"
RSS_TIMEOUT_S = 900.0


def rss_child(args: list[str], npz: Path, threads: int, env: dict[str, str] | None = None) -> dict:
    """One fresh ``face_rss_child.py`` process: its JSON line (faces, VmHWM and ru_maxrss in KiB). ``env``: variables
    set for it on top of this process's environment."""
    argv = [*child_python(CHILD), args[0], str(npz), *args[1:], "--threads", str(threads)]
    done = run_tool(argv, RSS_TIMEOUT_S, f"{CHILD} {' '.join(args)}", InferenceError, env=child_env(env))
    return json.loads(done.stdout.strip().splitlines()[-1])
