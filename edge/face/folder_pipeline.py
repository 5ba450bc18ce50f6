"""The device face pipeline over a face models folder already read (``edge.face.models.ModelsFolder``).

``edge.face.models.open_face_pipeline(folder)`` reads the folder and opens it here.
"""

from __future__ import annotations

from pathlib import Path

from edge.errors import InputError
from edge.face.models import DETECTOR_NETS, FACE_NETS, Detector, FaceModel, ModelsFolder, default_min_score


def detector_choice(detector: Detector | str | None) -> Detector | None:
    """``detector`` as a Detector (None stays None: the folder's).

    Raises:
        InputError: an unknown detector name, listing the known ones.
    """
    try:
        return None if detector is None else Detector(detector)
    except ValueError:
        known = ", ".join(repr(d.value) for d in Detector)
        raise InputError(f"face detector {detector!r} is unknown; expected one of {known}") from None


def open_pipeline(
    face: ModelsFolder,
    threads: int = 1,
    unfused: bool = False,
    min_score: float | None = None,
    min_face_size: int | None = None,
    detector: Detector | str | None = None,
    detector_model: Path | None = None,
):
    """The device pipeline over the models of a converted folder, already read.

    MTCNN (or BlazeFace, if asked) finds the faces; dlib's 5-point landmark model (numpy, OpenCV) places the landmarks
    on each box, as face_recognition does on its HOG boxes; the chip is cut as dlib's ``get_face_chip`` (at
    the embedder's chip size; within ``edge.face.align.CHIP_TOLERANCE`` of it); the ONNX ResNet (or a user's
    embedder) describes it, or its TFLite twin on LiteRT where models.json says so (``ModelsFolder.embedder_role``). The
    pipeline's ``threshold`` is the folder's same-person distance (``ModelsFolder.threshold``).

    Args:
        face: a folder written by ``edge-deploy convert face``, read (``edge.face.models.read_models_folder``).
        threads: the pipeline's threads: each ONNX Runtime session's intra-op threads, and OpenCV's (set for
            the whole process with ``cv2.setNumThreads``: left at its default, OpenCV's pool splits the chip's
            warpAffine across every core and spins there after it, about 0.5 M instructions a one-face frame on
            emulated Cortex-A72 that a one-thread figure would not own).
        unfused: run the accuracy gate's arithmetic instead of the shipped files: each net's ``.onnx``
            (the ``.ort`` file's source, beside it) with onnxruntime's graph optimisations off, so that QDQ
            runs as dequantize -> float op -> quantize whatever INT8 kernels this CPU has (a TFLite embedder
            twin runs as it is: its gate measured LiteRT's arithmetic). The emulated-Pi
            check compares the Pi's own results with these.
        min_score: detections scoring lower are left out; None: ``default_min_score`` of the detector
            (MTCNN: ``edge.face.recognize.DEFAULT_MIN_SCORE``, 0.9, as the daemon and the browser page; on
            t1.jpg MTCNN's last stage also passes a fist and a metal bowl at 0.87 and 0.86; BlazeFace: 0, its
            own threshold, MediaPipe's 0.5 short range and 0.6 full range, already applies); 0 keeps every
            detection the detector returns.
        detector: None (default): the folder's (``ModelsFolder.detector``: models.json ``detector``, else MTCNN);
            ``"mtcnn"``, ``"blazeface"`` (short range), ``"blazeface-full"`` or
            ``"blazeface-full-tiled"`` (``Detector``): full range on the whole frame and, when its long side
            is at least 576 pixels, on a grid of overlapping tiles too (``edge.face.tiles.DEFAULT_TILING``;
            it finds the 80-120 pixel faces of a 1280-pixel group photo that the whole-frame pass misses, for
            about four more network runs).
        detector_model: the BlazeFace ``.onnx``/``.tflite`` to run; None: the file of its role in models.json
            (``BLAZEFACE_ROLES``; ``TFLITE_BLAZEFACE_ROLES``, the ``.tflite`` original on LiteRT, where
            models.json's ``detector_runtime`` is ``"litert"``). MTCNN always comes from models.json.
        min_face_size: smallest face side MTCNN looks for, in pixels (None: MtcnnDetector's default, 20). The
            first level of its image pyramid is scaled by 12 / min_face_size, so doubling it cuts the
            detector's work about fourfold (benchmarks/frame_speed.py measures speed and faces found).

    Returns:
        An ``edge.face.pipeline.FacePipeline`` (close it, or use it in a ``with`` block).

    Raises:
        InputError: models.json is missing or lacks a role (BlazeFace's too, when asked for without
            ``detector_model``), or the detector name is unknown; InferenceError: a model does not load, or
            ``threads`` is not a whole number >= 1.
    """
    import cv2

    from edge.face.pipeline import FacePipeline
    from edge.face.shape5 import ShapePredictor
    from edge.runtime.base import check_threads
    from edge.runtime.ort_session import Optimization

    kind = detector_choice(detector) or face.detector
    cv2.setNumThreads(check_threads(threads))
    role = face.embedder_role  # its TFLite twin, where the folder says so
    missing = [r for r in (*(model.role for model in FaceModel), role) if r not in face.entries]
    if missing:
        face.model_path(missing[0])  # raises naming the role
    paths = face.model_paths()
    paths[FaceModel.EMBEDDER] = face.model_path(role)
    optimization = Optimization.ALL
    if unfused:
        paths = {model: _onnx_source(path) if model in FACE_NETS else path for model, path in paths.items()}
        optimization = Optimization.NONE
    found = _open_detector(face, paths, threads, optimization, kind, detector_model, min_face_size)
    embedder = None
    try:
        embedder = _open_embedder(paths[FaceModel.EMBEDDER], threads, optimization)
        shape = ShapePredictor(paths[FaceModel.SHAPE5])
        threshold = _threshold_for(face, embedder)
    except BaseException:
        found.close()
        if embedder is not None:
            embedder.close()
        raise
    score = default_min_score(kind) if min_score is None else min_score
    chip = embedder.chip_size
    return FacePipeline(found, embedder, shape_predictor=shape, chip_size=chip, min_score=score, threshold=threshold)


def _onnx_source(path: Path) -> Path:
    """The ``.onnx`` an ``.ort`` file was made from (beside it), or ``path`` itself when it is one."""
    if path.suffix != ".ort":
        return path
    source = path.with_suffix(".onnx")
    if not source.is_file():
        raise InputError(f"{source}: not found; the gate's unfused arithmetic needs the .onnx beside {path.name}")
    return source


def _open_detector(
    face: ModelsFolder, paths: dict, threads: int, optimization, detector, detector_model, min_face_size
):
    if detector is Detector.MTCNN:
        from edge.face.detect_mtcnn import DEFAULT_MIN_FACE_SIZE, MtcnnDetector

        nets: dict[str, Path] = {net: paths[net] for net in DETECTOR_NETS}
        min_face = DEFAULT_MIN_FACE_SIZE if min_face_size is None else min_face_size
        return MtcnnDetector(nets, threads=threads, min_face_size=min_face, optimization=optimization)
    from edge.face.detect_blazeface import BlazeFaceDetector
    from edge.face.tiles import DEFAULT_TILING
    from edge.runtime import Optimization, detect_format
    from edge.runtime.base import ModelFormat

    tiling = DEFAULT_TILING if detector is Detector.BLAZEFACE_FULL_TILED else None
    path = face.blazeface_file(detector, detector_model)
    # unfused (the gate's arithmetic) concerns ONNX files; a .tflite runs on LiteRT as it is
    onnx_optimization = optimization if detect_format(path) is not ModelFormat.TFLITE else Optimization.ALL
    return BlazeFaceDetector(path, threads=threads, tiling=tiling, optimization=onnx_optimization)


def _open_embedder(path: Path, threads: int, optimization):
    """The embedder on the runtime its file calls for; onnxruntime's optimisation concerns ONNX files only (a
    ``.tflite`` twin runs on LiteRT as it is, its arithmetic the one its gate measured)."""
    from edge.face.embed import FaceEmbedder
    from edge.runtime import detect_format
    from edge.runtime.base import ModelFormat

    if detect_format(path) is ModelFormat.TFLITE:
        return FaceEmbedder(path, threads=threads)
    return FaceEmbedder(path, threads=threads, optimization=optimization)


def _threshold_for(face: ModelsFolder, embedder) -> float:
    """The folder's same-person threshold, after checking that models.json's descriptor size is the model's."""
    from edge.face.types import DLIB_DESCRIPTOR_SIZE

    table = face.recognition
    size = table["descriptor_size"] if table else DLIB_DESCRIPTOR_SIZE
    if embedder.descriptor_size != size:
        raise InputError(
            f"{face.models_file}: the embedder gives {embedder.descriptor_size}-d descriptors, but "
            f"models.json says {size}; expected the folder 'edge-deploy convert face' wrote"
        )
    return face.threshold
