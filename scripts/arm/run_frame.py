"""Run the device face pipeline on one frame N times, each stage marked for the counting plugin.

    python3 scripts/arm/run_frame.py --models DIR --frame frame.npy --gallery gallery.npz --frames N \
        [--detector mtcnn|blazeface-full|blazeface-full-tiled] [--detector-model F.tflite] [--min-face-size 40]
        [--detect-every 4 [--keep-descriptor-within 0]] [--mark] [--out r.json]

A frame is what ``benchmarks/frame_speed.py`` times: detect (``detector.detect`` and the pipeline's
``min_score``), align (``pipeline.chips``), embed (``embedder.embed``) and match every descriptor against a
gallery (``Gallery.match``), i.e. ``FacePipeline.analyze`` split into its stages, plus the match. The frame
(uint8 RGB [H, W, 3], .npy) and the gallery are read once, before the first frame. With ``--mark``, region 0
is empty (the marks' own cost), regions 1-4 are the four stages and region 5 the whole frame, each summed
over the N frames (scripts/arm/marks.py; ``converters.arm.frame`` turns two runs into a per-frame count).
With ``--detect-every N`` > 1 the frames go through ``edge.face.track.FaceTracker`` as a video's do (the
detector on the first frame and every N-th after it, the face followed by the shape predictor between); the
stages are then the pipeline's own calls, marked where the tracker makes them (the detector's ``detect``;
``points5`` and ``chips``; the embedder's ``embed``), and the tracker's bookkeeping between them is "other"
(with the chip comparison that decides whether a followed face keeps its descriptor). ``--frame`` may also hold
a clip, uint8 [T, H, W, 3]: frame i is the clip's frame i (mod T), as a camera sends them.
Device code only (edge.*, numpy, onnxruntime, cv2).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from marks import marker  # scripts/arm/marks.py: this script's folder is on sys.path

#: Region numbers, as converters.arm.frame reads them.
EMPTY, DETECT, ALIGN, EMBED, MATCH, FRAME = range(6)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run the face pipeline on one frame N times, stages marked.")
    parser.add_argument("--models", type=Path, required=True, help="face models folder (models.json)")
    parser.add_argument(
        "--frame", type=Path, required=True, help="uint8 RGB frame [H, W, 3], or a clip [T, H, W, 3], as .npy"
    )
    parser.add_argument("--gallery", type=Path, required=True, help="gallery file (edge.face.gallery.Gallery.save)")
    parser.add_argument("--frames", type=int, required=True, help="how many times the frame is analysed")
    parser.add_argument("--detector", default="mtcnn")
    parser.add_argument("--detector-model", type=Path, default=None, help="BlazeFace file (default models.json's)")
    parser.add_argument("--min-face-size", type=int, default=None, help="MTCNN's smallest face (default 20)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--detect-every", type=int, default=1, help="the detector on every N-th frame, faces followed between"
    )
    parser.add_argument(
        "--keep-descriptor-within",
        type=float,
        default=None,
        help="grey levels a followed face's chip may change and keep its descriptor (default the tracker's)",
    )
    parser.add_argument("--mark", action="store_true", help="mark regions for the counting plugin")
    parser.add_argument("--out", type=Path, default=None, help="JSON file to write (faces found, matches)")
    args = parser.parse_args(argv)
    mark = marker(args.mark)

    import numpy as np

    from edge.errors import EdgeDeployError
    from edge.face.gallery import Gallery
    from edge.face.models import open_face_pipeline

    try:
        loaded = np.load(args.frame)
        clip = list(loaded) if loaded.ndim == 4 else [loaded]
        gallery = Gallery.load(args.gallery)
        with open_face_pipeline(
            args.models,
            threads=args.threads,
            min_face_size=args.min_face_size,
            detector=args.detector,
            detector_model=args.detector_model,
        ) as pipeline:
            mark(EMPTY, 0)
            mark(EMPTY, 1)
            if args.detect_every > 1:
                faces, matches = _followed(pipeline, gallery, clip, args, mark)
            else:
                faces, matches = _detected(pipeline, gallery, clip, args.frames, mark)
    except EdgeDeployError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return exc.exit_code
    result = {"frames": args.frames, "faces": faces, "matched": [m.name for m in matches]}
    if args.out is not None:
        args.out.write_text(json.dumps(result) + "\n", encoding="utf-8")
    print(json.dumps(result))
    return 0


def _detected(pipeline, gallery, clip: list, frames: int, mark) -> tuple[list[dict], list]:
    """``frames`` frames of the clip through ``FacePipeline.analyze``'s stages, each marked."""
    import numpy as np

    faces: list[dict] = []
    matches: list = []
    for i in range(frames):
        rgb = clip[i % len(clip)]
        mark(FRAME, 0)
        mark(DETECT, 0)
        found = [d for d in pipeline.detector.detect(rgb) if d.score >= pipeline.min_score]
        mark(DETECT, 1)
        mark(ALIGN, 0)
        chips = pipeline.chips(rgb, found)
        mark(ALIGN, 1)
        mark(EMBED, 0)
        descriptors = pipeline.embedder.embed(chips) if found else np.zeros((0, 128), np.float32)
        mark(EMBED, 1)
        mark(MATCH, 0)
        matches = [gallery.match(d) for d in descriptors]
        mark(MATCH, 1)
        mark(FRAME, 1)
        faces = [{"box": [float(v) for v in d.box], "score": float(d.score)} for d in found]
    return faces, matches


def _followed(pipeline, gallery, clip: list, args, mark) -> tuple[list[dict], list]:
    """``args.frames`` frames of the clip through a ``FaceTracker``; the pipeline calls it makes marked as the
    stages."""
    from edge.face.track import FaceTracker

    def marked(call, region: int):
        def run(*a, **k):
            mark(region, 0)
            try:
                return call(*a, **k)
            finally:
                mark(region, 1)

        return run

    # Instance attributes shadow the methods: the tracker's calls reach the same code, between marks. (On the
    # tracker's paths ``chips`` always gets its landmarks, so the align marks never nest.)
    pipeline.detector.detect = marked(pipeline.detector.detect, DETECT)
    pipeline.points5 = marked(pipeline.points5, ALIGN)
    pipeline.chips = marked(pipeline.chips, ALIGN)
    pipeline.embedder.embed = marked(pipeline.embedder.embed, EMBED)
    keep = {} if args.keep_descriptor_within is None else {"keep_descriptor_within": args.keep_descriptor_within}
    tracker = FaceTracker(pipeline, args.detect_every, **keep)
    found: list = []
    matches: list = []
    for i in range(args.frames):
        mark(FRAME, 0)
        found = tracker.analyze(clip[i % len(clip)])
        mark(MATCH, 0)
        matches = [gallery.match(f.descriptor) for f in found]
        mark(MATCH, 1)
        mark(FRAME, 1)
    faces = [{"box": [float(v) for v in f.detection.box], "score": float(f.detection.score)} for f in found]
    return faces, matches


if __name__ == "__main__":
    sys.exit(main())
