"""What the emulated-ARM model benchmarks share: a face folder's INT8 files, and real inputs for its nets."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from converters.arm.face import write_probe_photos
from edge.face import models as face_models
from edge.face.models import FaceModel


def int8_file(int8_dir: Path, fp32_file: Path) -> Path:
    """The INT8 twin of an fp32 model in a quantized face folder: ``<stem>.int8.ort`` (else ``.int8.onnx``)."""
    for suffix in (".int8.ort", ".int8.onnx"):
        path = int8_dir / f"{fp32_file.stem}{suffix}"
        if path.is_file():
            return path
    raise FileNotFoundError(f"{int8_dir}: no {fp32_file.stem}.int8.ort or .int8.onnx")


def model_inputs(fp32: Path, work: Path) -> dict[str, Path]:
    """Real inputs: an aligned chip of the astronaut for the embedder, her photo at 128x128 for PNet."""
    import cv2

    from edge.imageio import load_image

    photo = load_image(write_probe_photos(work / "photos")[0])
    with face_models.open_face_pipeline(fp32) as pipeline:
        chip = pipeline.chips(photo, pipeline.detector.detect(photo))[:1]
    level = cv2.resize(photo, (128, 128), interpolation=cv2.INTER_AREA).astype(np.float32)
    level = ((level - 127.5) * 0.0078125).transpose(2, 0, 1)[None]
    paths = {FaceModel.EMBEDDER: work / "chip_nchw.npy", FaceModel.PNET: work / "pnet_level.npy"}
    np.save(paths[FaceModel.EMBEDDER], np.ascontiguousarray(chip.transpose(0, 3, 1, 2), dtype=np.float32))
    np.save(paths[FaceModel.PNET], np.ascontiguousarray(level))
    return paths
