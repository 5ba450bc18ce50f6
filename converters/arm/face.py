"""The face pipeline in the emulated Pi against the same pipeline on the host.

``scripts/arm/run_face.py`` runs ``edge.face.models.open_face_pipeline`` on a models folder and photos and
writes boxes, landmarks and descriptors as JSON; ``run_face_both`` runs it on the host and in a guest and
``compare_face_results`` says how far apart they are: boxes, descriptors (max |diff|) and every pair's
same/different decision at the folder's threshold (dlib's 0.6, or a user embedder's calibrated one).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from converters.arm.guest import SCRIPTS, ArmGuest, prepare_guest, run_both
from edge.errors import InputError, ValidationError
from edge.progress import ProgressFn, silent, timed

RUN_FACE = SCRIPTS / "run_face.py"
#: Max |diff| of a descriptor between the host and the emulated Pi on the fp32 models (float rounding only).
FP32_DESCRIPTOR_TOLERANCE = 1e-4
#: The same for quantized models, where the host runs the gate's unfused arithmetic and the Pi its fused
#: integer kernels: they differ by a requantization rounding step now and then (measured max 0.0104 on the
#: rpi4 INT8 models under Cortex-A72 and A76, descriptors of norm ~1; docs/quantization.md).
INT8_DESCRIPTOR_TOLERANCE = 0.03
#: The part of insightface's t1.jpg (x1, y1, x2, y2) with persons 2 and 3: two faces at a third of the cost.
T1_CROP = (230, 130, 610, 450)


def write_probe_photos(out_dir: Path, seed: int = 0) -> list[Path]:
    """Write the few real photos the guest check uses, as PNG (small, for emulation's sake).

    astronaut (scikit-image), Tom Hanks padded and one augmentation of it (a same-person pair), and a crop
    of insightface's t1.jpg with two more people. Five faces, ten pairs, one of them the same person.

    Raises:
        InputError: scikit-image or insightface (which ship the photos) is not installed.
    """
    import numpy as np

    from converters.face.facedata import EVAL_AUGMENT, EVAL_PHOTOS, apply_augmentation, draw_params
    from edge.imageio import save_image

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    loaded = {p.name: p.load() for p in EVAL_PHOTOS}
    x1, y1, x2, y2 = T1_CROP
    hanks_aug, _ = apply_augmentation(loaded["tom_hanks"], draw_params(np.random.default_rng(seed), EVAL_AUGMENT))
    photos = {
        "astronaut": loaded["astronaut"],
        "tom_hanks": loaded["tom_hanks"],
        "tom_hanks_aug": hanks_aug,
        "t1_crop": np.ascontiguousarray(loaded["t1"][y1:y2, x1:x2]),
    }
    return [save_image(out_dir / f"{name}.png", rgb) for name, rgb in photos.items()]


@dataclass(frozen=True)
class FaceComparison:
    """How the guest's face results (``scripts/arm/run_face.py``) differ from the host's."""

    photos: int
    faces_host: int
    faces_guest: int
    box_max_abs_diff: float
    descriptor_max_abs_diff: float
    pairs: int
    decisions_agree: int
    distance_min_margin: float  # how close any host pair distance came to the 0.6 threshold

    def problems(self, descriptor_tolerance: float = 1e-4) -> list[str]:
        """Every way the guest disagrees with the host; empty when they match."""
        out = []
        if self.faces_host != self.faces_guest:
            out.append(f"faces found: host {self.faces_host}, guest {self.faces_guest} (per photo they must match)")
        if self.descriptor_max_abs_diff > descriptor_tolerance:
            out.append(f"descriptors: max |diff| {self.descriptor_max_abs_diff:.3g} > {descriptor_tolerance:g}")
        if self.decisions_agree != self.pairs:
            out.append(f"same/different decisions: {self.decisions_agree} of {self.pairs} pairs agree")
        return out

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def compare_face_results(host: Mapping, guest: Mapping, threshold: float | None = None) -> FaceComparison:
    """Compare two ``run_face.py`` outputs photo by photo, face by face, and every pair's decision at
    ``threshold`` (None: dlib's 0.6; a folder's own is ``edge.face.models.ModelsFolder.threshold``).

    Raises:
        InputError: the two outputs are not of the same photos.
    """
    from edge.face.types import DLIB_SAME_PERSON_THRESHOLD

    cut = DLIB_SAME_PERSON_THRESHOLD if threshold is None else threshold
    names = ([p["photo"] for p in host["photos"]], [p["photo"] for p in guest["photos"]])
    if names[0] != names[1]:
        raise InputError(f"host photos {names[0]} != guest photos {names[1]}; expected the same photos")
    box_diff = desc_diff = 0.0
    desc_h, desc_g = [], []
    faces_h = sum(len(p["faces"]) for p in host["photos"])
    faces_g = sum(len(p["faces"]) for p in guest["photos"])
    for ph, pg in zip(host["photos"], guest["photos"], strict=True):
        if len(ph["faces"]) != len(pg["faces"]):
            continue
        for fh, fg in zip(ph["faces"], pg["faces"], strict=True):
            box_diff = max(box_diff, max(abs(a - b) for a, b in zip(fh["box"], fg["box"], strict=True)))
            d = max(abs(a - b) for a, b in zip(fh["descriptor"], fg["descriptor"], strict=True))
            desc_diff = max(desc_diff, d)
            desc_h.append(fh["descriptor"])
            desc_g.append(fg["descriptor"])
    pairs = agree = 0
    margin = float("inf")
    for i in range(len(desc_h)):
        for j in range(i + 1, len(desc_h)):
            dh, dg = _distance(desc_h[i], desc_h[j]), _distance(desc_g[i], desc_g[j])
            pairs += 1
            agree += (dh < cut) == (dg < cut)
            margin = min(margin, abs(dh - cut))
    return FaceComparison(len(names[0]), faces_h, faces_g, box_diff, desc_diff, pairs, agree, margin)


def _distance(a: Sequence[float], b: Sequence[float]) -> float:
    return sum((x - y) ** 2 for x, y in zip(a, b, strict=True)) ** 0.5


def run_face_both(
    guest: ArmGuest,
    models: Path,
    photos: Sequence[Path],
    work: Path,
    timeout: float = 900,
    host_python: Path | None = None,
    host_unfused: bool = False,
) -> tuple[dict, dict]:
    """Run ``run_face.py`` on the host (this interpreter) and in the guest on the same models and photos.

    Args:
        guest: a prepared guest (``converters.arm.guest.prepare_guest``).
        models: face models folder (models.json), host path.
        photos: image files, host paths.
        work: folder for the two JSON outputs (``host.json``, ``<cpu>.json``).
        timeout: seconds for each run.
        host_python: the host interpreter (default: this one).
        host_unfused: the host runs the accuracy gate's arithmetic (``run_face.py --unfused``) rather than
            the shipped files, whose fused INT8 kernels differ between x86 hosts.

    Returns:
        (host result, guest result) as dicts.

    Raises:
        InferenceError: either run failed or timed out (the message carries the end of its stderr).
    """
    work = Path(work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    args = ["--models", str(Path(models).resolve())]
    photo_args = [str(Path(p).resolve()) for p in photos]
    outputs = (work / "host.json", work / f"{guest.cpu.value}.json")
    extra = ["--unfused"] if host_unfused else []
    return run_both(
        guest, RUN_FACE, lambda out: [*args, "--out", str(out), *photo_args], outputs, timeout, host_python, extra
    )


def check_face_models(
    models: Path,
    cpu: str,
    work: Path,
    wheel_dir: Path | None = None,
    descriptor_tolerance: float | None = None,
    progress: ProgressFn = silent,
) -> FaceComparison:
    """One call for the CLI: run a face models folder on the host and on an emulated core, and compare.

    A folder with quantized nets is compared with the gate's arithmetic on the host (``host_unfused``):
    what the gate measured is what the Pi must compute, whatever INT8 kernels the host has.

    Args:
        models: face models folder (``edge-deploy convert face`` output, or a bundle's models folder).
        cpu: ``"cortex-a72"`` (Pi 4) or ``"cortex-a76"`` (Pi 5).
        work: folder for the probe photos and both JSON results.
        wheel_dir: aarch64 wheels to install in the guest (a bundle's ``wheels/``); default the device
            extra downloaded into ``.cache/arm/wheels``.
        descriptor_tolerance: max |diff| allowed between host and guest descriptors (default
            ``FP32_DESCRIPTOR_TOLERANCE``, or ``INT8_DESCRIPTOR_TOLERANCE`` for quantized nets).
        progress: called with a line per stage.

    Returns:
        The comparison (its ``problems()`` is empty when the guest matches the host).

    Raises:
        ValidationError: the guest does not match the host (every problem listed).
        InferenceError: the rootfs, pip or a run failed.
    """
    from edge.face.models import read_models_folder

    folder = read_models_folder(models)
    quantized = any(e.precision not in ("fp32", "fp16") for e in folder.entries.values())
    if descriptor_tolerance is None:
        descriptor_tolerance = INT8_DESCRIPTOR_TOLERANCE if quantized else FP32_DESCRIPTOR_TOLERANCE
    guest = prepare_guest(cpu, wheel_dir=wheel_dir, progress=progress)
    photos = write_probe_photos(Path(work) / "photos")
    against = "the gate's unfused arithmetic on the host" if quantized else "the host"
    line = f"running the face pipeline on emulated {guest.cpu.value} and comparing with {against}"
    with timed(progress, line, f"arm: face pipeline {guest.cpu.value} {models}"):
        host, emulated = run_face_both(guest, models, photos, Path(work), host_unfused=quantized)
    result = compare_face_results(host, emulated, folder.threshold)
    problems = result.problems(descriptor_tolerance)
    if problems:
        raise ValidationError(f"{models} on emulated {guest.cpu.value} differs from the host: " + "; ".join(problems))
    return result
