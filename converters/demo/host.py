"""The main job (``edge-deploy demo``): convert the face models, enroll a gallery, recognise, print matches.

Everything comes from photos shipped in Python packages (see converters.face.facedata): the gallery is one crop
of each person's original photo; the queries are other views of the same photos (seeded pose, scale, light,
blur and JPEG changes). One person is held out of the gallery, so the demo shows 'unknown' too.

What it proves, against the views' annotated faces: every face the folder's detector finds is named right (or
'unknown' for the held-out person), and it finds no fewer of them than face_recognition's detector (dlib's
HOG, one upsample) does in the same views.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np

from converters.demo.pi import PiRun
from converters.face.boxes import match_boxes
from converters.face.facedata import EVAL_PHOTOS, make_eval_images
from converters.face.reference import HOG_UPSAMPLE
from edge.face.gallery import Gallery
from edge.face.models import open_face_pipeline, read_models_folder
from edge.face.recognize import recognize_image
from edge.profiles import TargetProfile
from edge.progress import ProgressFn, silent, timed, tracked
from edge.runtime import default_threads

#: The person left out of the gallery, to show an unknown face being reported as unknown.
HELD_OUT = "t1_person6"
#: Seed of the query views (the evaluation set uses seed 0).
DEMO_SEED = 1
#: Margin around the annotated face box when cropping an enrollment photo, as a fraction of the box side.
CROP_MARGIN = 0.8


@dataclass
class DemoResult:
    """Counts and per-image matches of one demo run.

    Attributes:
        detector: the detector that ran (``edge.face.models.Detector`` value).
        reference: face_recognition's detector on the same views (``reference_counts``).
    """

    out_dir: Path
    models_dir: Path
    conversion: str
    enrolled: dict[str, int]
    detector: str = ""
    reference: dict | None = None
    images: list[dict] = field(default_factory=list)
    pi: PiRun | None = None

    def _faces(self) -> list[dict]:
        return [f for im in self.images for f in im["faces"]]

    @property
    def counts(self) -> dict[str, int]:
        faces = self._faces()
        annotated = [f for f in faces if f["expected"] is not None or f["held_out"]]
        return {
            "images": len(self.images),
            "annotated_faces": sum(im["annotated"] for im in self.images),
            "found": len(annotated),
            "named_correctly": sum(f["correct"] for f in annotated),
            "wrong_name": sum(not f["correct"] for f in annotated),
            "extra_detections": len(faces) - len(annotated),
        }

    @property
    def checks(self) -> dict[str, bool]:
        """What the demo proves: no found face named wrong; no fewer faces found than face_recognition."""
        c = self.counts
        return {
            "no_wrong_name": c["wrong_name"] == 0,
            "found_at_least_face_recognition": self.reference is not None and c["found"] >= self.reference["found"],
        }

    @property
    def passed(self) -> bool:
        return all(self.checks.values())

    def to_dict(self) -> dict:
        return {
            "out_dir": str(self.out_dir),
            "passed": self.passed,
            "checks": self.checks,
            "detector": self.detector,
            "counts": self.counts,
            "face_recognition": self.reference,
            "held_out": HELD_OUT,
            "enrolled": self.enrolled,
            "models": str(self.models_dir),
            "images": self.images,
            "emulated_pi": self.pi.to_dict() if self.pi is not None else None,
        }

    def summary(self) -> str:
        lines = [self.conversion, "", f"gallery: {len(self.enrolled)} people ({HELD_OUT} held out)", ""]
        for im in self.images:
            lines.append(f"{im['image']}:")
            for f in im["faces"]:
                who = f["name"] or "unknown"
                truth = f["expected"] or ("held out" if f["held_out"] else "not a face")
                mark = "ok" if f["correct"] else ("--" if f["expected"] is None and not f["held_out"] else "WRONG")
                lines.append(f"  {who:16} distance {f['distance']:.3f}  (truth: {truth}) {mark}")
        lines += ["", *self.verdict_lines()]
        if self.pi is not None:
            lines += ["", self.pi.summary()]
        lines.append(f"results: {self.out_dir / 'results.json'}")
        return "\n".join(lines)

    def verdict_lines(self) -> list[str]:
        """Faces found and named against the annotations, beside face_recognition's count, and the verdict."""
        c, ref, checks = self.counts, self.reference, self.checks
        theirs = f"{ref['found']} (extra detections {ref['extra_detections']})" if ref is not None else "not run"
        failed = []
        if not checks["no_wrong_name"]:
            failed.append(f"{c['wrong_name']} found face(s) named wrong")
        if ref is None:
            failed.append("face_recognition's count not measured")
        elif not checks["found_at_least_face_recognition"]:
            failed.append(f"fewer faces found than face_recognition ({c['found']} < {ref['found']})")
        return [
            f"faces found: {c['found']} of {c['annotated_faces']} annotated in {c['images']} images "
            f"({self.detector}; extra detections {c['extra_detections']})",
            f"  face_recognition's detector (dlib HOG, upsample {HOG_UPSAMPLE}) on the same images: {theirs}",
            f"faces named: {c['named_correctly']} of {c['found']} found correctly, {c['wrong_name']} wrong "
            f"({HELD_OUT} as unknown)",
            "PASSED: every found face named right, and no fewer found than face_recognition"
            if self.passed
            else "FAILED: " + "; ".join(failed),
        ]


def reference_counts(views: list) -> dict:
    """face_recognition's detector (dlib's HOG, one upsample) on ``views`` (``EvalImage``s), counted as the
    demo counts its own detector: annotated faces it boxes (``match_boxes``), and the rest.

    Raises:
        MissingDependencyError: dlib is not installed (the ``reference`` extra).
    """
    from converters.face.reference import ReferencePipeline

    reference = ReferencePipeline()
    annotated = found = extra = 0
    for image in views:
        boxes = reference.boxes(image.rgb)
        matched = len(match_boxes([f.box for f in image.faces], boxes))
        annotated, found, extra = annotated + len(image.faces), found + matched, extra + len(boxes) - matched
    return {"images": len(views), "annotated_faces": annotated, "found": found, "extra_detections": extra}


def demo_views() -> list:
    """The query views: the evaluation photos' seeded augmentations at ``DEMO_SEED``, originals left out."""
    return [im for im in make_eval_images(seed=DEMO_SEED) if not im.name.endswith("/original")]


def write_gallery_photos(folder: Path) -> None:
    """One crop per annotated person of each original photo, except the held-out one."""
    for photo in EVAL_PHOTOS:
        rgb = photo.load()
        h, w = rgb.shape[:2]
        for face in photo.faces:
            if face.identity == HELD_OUT:
                continue
            x1, y1, x2, y2 = face.box
            m = CROP_MARGIN * max(x2 - x1, y2 - y1)
            crop = rgb[max(0, int(y1 - m)) : min(h, int(y2 + m)), max(0, int(x1 - m)) : min(w, int(x2 + m))]
            person = folder / face.identity
            person.mkdir(parents=True, exist_ok=True)
            cv2.imwrite(str(person / f"{photo.name}.png"), cv2.cvtColor(crop, cv2.COLOR_RGB2BGR))


def _label(faces: list[dict], image) -> None:
    """Mark each found face with its annotated identity (by box overlap) and whether the name is right."""
    matches = {j: i for i, j, _ in match_boxes([a.box for a in image.faces], [f["box"] for f in faces])}
    for j, f in enumerate(faces):
        identity = image.faces[matches[j]].identity if j in matches else None
        f["held_out"] = identity == HELD_OUT
        f["expected"] = None if identity in (None, HELD_OUT) else identity
        f["correct"] = (f["name"] == f["expected"]) if identity is not None else f["name"] is None


def _conversion_summary(models_dir: Path) -> str:
    """What the bundle's reports say about the models (fp32 checks, and the gate when quantized)."""
    lines = []
    for name in ("fp32_report.json", "report.json"):
        path = models_dir / name
        if path.is_file():
            r = json.loads(path.read_text(encoding="utf-8"))
            proof, agree = r.get("dlib_proof", {}), r.get("pipeline_agreement", {})
            worst = max((c["max_abs_diff"] for c in r.get("source_checks", [])), default=0.0)
            lines.append(f"face models {models_dir} (checks {'PASSED' if r.get('passed') else 'FAILED'}):")
            lines.append(f"  ONNX vs source networks: max |diff| {worst:.2e}")
            if proof.get("ran"):
                lines.append(
                    f"  embedder vs dlib on {proof['chips']} real chips: max |diff| {proof['max_abs_diff']:.2e}"
                )
            if agree.get("ran"):
                lines.append(
                    f"  pipeline vs face_recognition: {agree['decision_agreement']:.2%} of "
                    f"{agree.get('pairs_decided_by_both')} decided evaluation pairs agree"
                )
            break
    quant = models_dir / "quant_report.json"
    if quant.is_file():
        q = json.loads(quant.read_text(encoding="utf-8"))
        e = q["embedder"]
        lines.append(
            f"  {q['precision']} gate {'PASSED' if q['passed'] else 'FAILED'}: embedder cosine to fp32 mean "
            f"{e['cosine_mean']:.5f}, decisions agree {e['decisions']['agreement']:.4f}; shipped: {q['shipped']}"
        )
    return "\n".join(lines)


def run_face_demo(
    models_dir: Path,
    out_dir: Path,
    progress: ProgressFn = silent,
    threads: int | None = None,
    detector: str | None = None,
) -> DemoResult:
    """Enroll and recognise with the models in ``models_dir``; writes gallery_photos/, gallery.npz, queries/.
    Counts face_recognition's detector on the same views too (``reference_counts``).

    ``detector``: one ``open_face_pipeline`` knows (the folder must hold its model); None: the folder's own.

    Raises:
        MissingDependencyError: dlib is not installed (face_recognition's detector).
    """
    out_dir = Path(out_dir)
    photos = out_dir / "gallery_photos"
    write_gallery_photos(photos)
    queries = out_dir / "queries"
    queries.mkdir(parents=True, exist_ok=True)
    detector_name = detector or read_models_folder(Path(models_dir)).detector.value
    with open_face_pipeline(models_dir, threads or default_threads(), detector=detector) as pipeline:
        progress(f"enrolling the gallery from {photos}")
        gallery = Gallery()
        report = gallery.enroll_folder(photos, pipeline)
        gallery.save(out_dir / "gallery.npz")
        result = DemoResult(
            out_dir, Path(models_dir), _conversion_summary(Path(models_dir)), report.enrolled, detector_name
        )
        views = demo_views()
        progress(f"recognising faces in {len(views)} other views of the shipped photos")
        for image in tracked(progress, views, "views"):
            name = image.name.replace("/", "_") + ".jpg"
            cv2.imwrite(str(queries / name), cv2.cvtColor(image.rgb, cv2.COLOR_RGB2BGR))
            faces = recognize_image(pipeline, gallery, np.ascontiguousarray(image.rgb), 0.6)  # its detector's cut
            _label(faces, image)
            result.images.append({"image": str(queries / name), "annotated": len(image.faces), "faces": faces})
    with timed(progress, "counting face_recognition's detector (dlib HOG) on the same views", "demo: dlib HOG views"):
        result.reference = reference_counts(views)
    return result


def run_main_job(
    profile: TargetProfile,
    out_dir: Path,
    cache_dir: Path,
    broker=None,
    emulate: bool = True,
    threads: int | None = None,
    progress: ProgressFn = silent,
) -> DemoResult:
    """The README's main job: bundle -> verify -> recognise on the host -> emulated Pi -> MQTT.

    Raises:
        EdgeDeployError subclasses from the stage that failed (conversion, gate, bundle, emulation).
    """
    from converters.demo.pi import build_and_verify, run_on_emulated_pi

    out_dir = Path(out_dir)
    bundle, pi = build_and_verify(profile, out_dir, cache_dir, progress)
    result = run_face_demo(bundle.folder / "models" / "face", out_dir, progress, threads)
    if emulate:
        run_on_emulated_pi(profile, bundle, pi, out_dir, broker, progress)
    result.pi = pi
    (out_dir / "results.json").write_text(json.dumps(result.to_dict(), indent=2) + "\n", encoding="utf-8")
    return result
