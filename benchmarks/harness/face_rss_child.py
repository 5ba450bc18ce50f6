"""One fresh process for the face speed race's peak-memory measurement: load a face pipeline, run it on photos.

    python -m benchmarks.harness.face_rss_child KIND PHOTOS.npz [--folder DIR | --model FILE] [--threads N]

KIND is ``baseline`` (the pipeline's imports: numpy, onnxruntime, edge.face; photos loaded; no model),
``pipeline`` (the device pipeline ``edge.face.models.open_face_pipeline(DIR)``: the folder's detector, or
``--detector``, + shape5 + embedder, as a Pi runs it),
``embedder`` (only ``edge.face.embed.FaceEmbedder(MODEL)`` on the aligned chips in PHOTOS.npz, one by one)
or ``dlib`` (face_recognition's pipeline through dlib: HOG, 5-point model, ResNet). Prints one JSON line:
the faces found, the CPU seconds (user + system) of loading and running the pipeline, peak RSS from
``/proc/self/status`` (VmHWM) and ``getrusage`` (ru_maxrss), and at the end the resident pages of mapped files
(RssFile) and anonymous ones (RssAnon) and the files with the most, all in KiB.

Imports only numpy, onnxruntime and ``edge`` (or dlib), so nothing of the host-side converters inflates
the number.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.harness.procstat import proc_status, resident_files, vm_hwm_kib

KINDS = ("baseline", "pipeline", "embedder", "dlib")


def run(kind: str, photos: list[np.ndarray], folder: Path | None, threads: int, detector: str | None = None) -> int:
    """Load the pipeline of ``kind`` and run it over ``photos``; return how many faces it found (or described).

    ``folder`` is the models folder for "pipeline", the embedder file for "embedder".
    """
    if kind == "baseline":
        # the imports' own footprint (runtime, OpenCV) is the floor every pipeline stands on
        from edge.runtime.ort_session import import_onnxruntime

        import_onnxruntime()
        import edge.face.detect_mtcnn  # noqa: F401
        import edge.face.pipeline  # noqa: F401

        return 0
    if kind == "pipeline":
        from edge.face.models import open_face_pipeline

        with open_face_pipeline(folder, threads=threads, detector=detector) as pipeline:
            return sum(len(pipeline.analyze(rgb)) for rgb in photos)
    if kind == "embedder":
        from edge.face.embed import FaceEmbedder

        with FaceEmbedder(folder, threads=threads) as embedder:
            return sum(len(embedder.embed(chip[None])) for chip in photos)
    from converters.face.reference import ReferencePipeline  # imports only edge.errors and dlib

    reference = ReferencePipeline()
    return sum(len(reference.analyze(rgb)) for rgb in photos)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=KINDS)
    parser.add_argument("photos", type=Path, help=".npz of uint8 RGB photos")
    parser.add_argument("--folder", type=Path, help="models folder (kind 'pipeline')")
    parser.add_argument("--model", type=Path, help="embedder model file (kind 'embedder')")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--detector", help="kind 'pipeline': the detector (default: the folder's, else mtcnn)")
    args = parser.parse_args(argv)
    with np.load(args.photos) as data:
        photos = [data[k] for k in sorted(data.files)]
    start = time.process_time()
    faces = run(args.kind, photos, args.model if args.kind == "embedder" else args.folder, args.threads, args.detector)
    cpu_s = time.process_time() - start  # loading and running, user + system (page faults included)
    peak = {
        "kind": args.kind,
        "faces": faces,
        "photos": len(photos),
        "vmhwm_kib": vm_hwm_kib(),
        "ru_maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "run_cpu_s": round(cpu_s, 3),
        # at the end: pages of mapped files (the libraries' code the run touched) and anonymous ones (heap, arenas)
        "rss_file_kib": proc_status("RssFile"),
        "rss_anon_kib": proc_status("RssAnon"),
        "resident_files_kib": resident_files(),
    }
    print(json.dumps(peak))
    return 0


if __name__ == "__main__":
    sys.exit(main())
