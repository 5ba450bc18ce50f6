"""The user-embedder stage of ``edge-deploy convert face --embedder MODEL.onnx``.

After MTCNN and the 5-point model are exported: ship the user's embedder (``converters.byom.face_embedder``),
run the device pipeline over the evaluation set (docs/evaluation.md) with it, check the shipped copy against
the user's model on those real chips, and calibrate the same/different threshold on the evaluation pairs
(``converters.face.threshold``). models.json records the descriptor size, the chip it takes and the threshold
under ``recognition`` (``edge.face.models.RECOGNITION_KEY``); the device pipeline reads the threshold there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from converters.byom.face_embedder import UserEmbedder, check_copy, write_shipped_copy
from converters.face.calibration import chip_landmarks
from converters.face.facedata import make_eval_set
from converters.face.quant_eval import fp32_reference, pair_distances
from converters.face.threshold import calibrate_threshold
from converters.validate import OutputCheck
from edge import __version__
from edge.face import models as face_models
from edge.face.models import FACE_NETS, FaceModel
from edge.progress import ProgressFn, silent

#: Why the dlib proof and the face_recognition agreement do not run for a user's embedder.
NO_DLIB_REFERENCE = (
    "a user embedder (--embedder): dlib has no reference for it; the shipped copy is checked against the "
    "user's own model on the evaluation chips instead"
)
#: Where the threshold's pairs come from (models.json ``recognition.calibration.pairs_from``).
PAIRS_FROM = (
    "the evaluation pairs of docs/evaluation.md (make_eval_set(0): photos shipped in packages, same-person "
    "pairs by augmentation), those whose two faces MTCNN found, through the device pipeline (MTCNN, dlib "
    "5-point landmarks, dlib-style chip at the embedder's size)"
)


def add_user_embedder(
    user: UserEmbedder,
    model: Any,
    out_dir: Path,
    entries: list[face_models.ModelEntry],
    target: str,
    embedder_file: str,
    threads: int = 1,
    progress: ProgressFn = silent,
) -> tuple[list[face_models.ModelEntry], OutputCheck, dict]:
    """Ship the user's embedder into ``out_dir`` (which holds the detector and 5-point model), check it and
    calibrate its threshold; write models.json with ``recognition``.

    Returns:
        (every models.json entry, the copy-vs-user-model check, the ``recognition`` table).

    Raises:
        ConversionError: the shipped copy is not valid ONNX.
        ValidationError: the evaluation pairs lack a same or a different pair (threshold calibration).
    """
    progress(f"shipping the user embedder {user.path.name} ({user.chip_size}x{user.chip_size} chips, "
             f"{user.descriptor_size}-d descriptors)")  # fmt: skip
    copy = write_shipped_copy(user, model, out_dir / embedder_file)
    all_entries = [*entries, face_models.describe(copy, FaceModel.EMBEDDER.role, "onnx", "fp32", user.source())]
    face_models.write_models_file(out_dir, all_entries, target, __version__)
    progress("running the pipeline with the user embedder on the evaluation set (docs/evaluation.md)")
    eval_set = make_eval_set(seed=0)
    folder = face_models.read_models_folder(out_dir)
    nets = folder.model_paths(FACE_NETS)
    reference = fp32_reference(eval_set, nets, threads, chip_landmarks(folder))
    check = check_copy(user, reference.chips, reference.descriptors, threads)
    distances, same = pair_distances(reference)
    fit = calibrate_threshold(distances, same)
    progress(f"threshold {fit.threshold:.4f}: pair accuracy {fit.accuracy:.4f} on {fit.pairs} pairs")
    recognition = {
        "descriptor_size": user.descriptor_size,
        "distance": "euclidean",
        "threshold": fit.threshold,
        "batch": user.batch if isinstance(user.batch, int) else "dynamic",
        **user.preprocessing(),
        "calibration": {
            **fit.to_dict(),
            "evaluation_pairs": len(eval_set.pairs),
            "faces_found": reference.faces_found,
            "pairs_from": PAIRS_FROM,
        },
    }
    face_models.write_models_file(out_dir, all_entries, target, __version__, recognition=recognition)
    return all_entries, check, recognition
