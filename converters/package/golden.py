"""The golden set a bundle carries for its on-device acceptance check (format: ``edge.update.golden``).

Face: ``make_face_golden``; language model: ``make_text_golden`` (two prompts, the greedy token ids of the
bundle's own model; the device must reproduce them exactly, as the language-model gate does).

At build time the bundle's *own* face models (the files that ship, in the target's precision) run the whole
device pipeline — MTCNN, dlib's 5-point landmarks, the chip cut, the embedder — on real photos from the
evaluation set (astronaut, Tom Hanks, t1); the first ``GOLDEN_CHIPS`` aligned chips and their descriptors
are stored with the accuracy gate's tolerance (the profile's ``thresholds.embed_mean_cosine``). A device that
installs the bundle over the air must reproduce those descriptors on its own board before it keeps it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from edge.face.folder_pipeline import open_pipeline
from edge.face.models import read_models_folder
from edge.profiles import TargetProfile

#: Chips in a bundle's golden set (67.5 kB each before compression).
GOLDEN_CHIPS = 4


def make_face_golden(models: Path, bundle: Path, profile: TargetProfile) -> dict[str, Any]:
    """Write ``golden/face.npz`` and ``golden/golden.json`` into ``bundle`` from the face models in ``models``.

    Args:
        models: the bundle's ``models/face`` folder (what ships, with each ``.ort`` file's ``.onnx`` twin: the
            descriptors are those of the accuracy gate's arithmetic, whatever INT8 kernels this host has).
        bundle: the bundle folder (before its manifest is written).
        profile: the target; its ``thresholds.embed_mean_cosine`` is the tolerance.

    Returns:
        The golden set's record (for the manifest).

    Raises:
        ValidationError: the models find fewer than one face in the photos (they could not be checked).
    """
    from converters.face.facedata import EVAL_PHOTOS
    from edge.digest import file_sha256
    from edge.errors import ValidationError
    from edge.update.golden import write_face_golden

    chips: list[np.ndarray] = []
    used: list[str] = []
    # The gate's arithmetic (each .ort file's .onnx twin, unfused), not this build host's INT8 kernels: an
    # AVX2-only host's fused u8s8 kernels saturate, and a Pi would then miss a golden set it computes right.
    face = read_models_folder(models)
    with open_pipeline(face, threads=1, unfused=True) as pipeline:
        for photo in EVAL_PHOTOS:
            rgb = photo.load()
            found = pipeline.chips(rgb, pipeline.detector.detect(rgb))
            chips += list(found[: GOLDEN_CHIPS - len(chips)])
            used.append(photo.name)
            if len(chips) >= GOLDEN_CHIPS:
                break
        if not chips:
            raise ValidationError(f"{models}: the face models found no face in {', '.join(used)}; no golden set")
        batch = np.stack(chips)
        descriptors = pipeline.embedder.embed(batch)
    role = face.embedder_role  # the embedder the device runs: the pipeline above ran it too
    embedder = face.model_path(role)
    source = f"first {len(chips)} faces of {', '.join(used)} (converters.face.facedata.EVAL_PHOTOS)"
    return write_face_golden(
        bundle, batch, descriptors, profile.thresholds.embed_mean_cosine, file_sha256(embedder), source, role
    )


#: The language model's golden prompts (short: each is generated greedily on the device at every update).
GOLDEN_PROMPTS = ("What is the capital of France?", "Name three primary colours.")
GOLDEN_NEW_TOKENS = 8


def make_text_golden(models: Path, bundle: Path) -> dict[str, Any]:
    """Add the language model's prompts and greedy tokens (from the bundle's own model) to golden.json.

    Args:
        models: the bundle's ``models/slm`` folder (what ships).
        bundle: the bundle folder (before its manifest is written).

    Returns:
        The ``text`` record of golden.json.
    """
    from edge.text import SamplingConfig, TextGenerator
    from edge.update.golden import write_text_golden

    with TextGenerator(models, threads=1) as generator:
        tokens = [
            list(generator.generate(p, SamplingConfig(max_new_tokens=GOLDEN_NEW_TOKENS)).token_ids)
            for p in GOLDEN_PROMPTS
        ]
    folder = models.relative_to(bundle).as_posix()
    return write_text_golden(bundle, list(GOLDEN_PROMPTS), tokens, GOLDEN_NEW_TOKENS, folder)
