"""Run the device face pipeline on photos and write what it found as JSON.

    python3 scripts/arm/run_face.py --models DIR --out result.json photo.png [photo.jpg ...]

The same script runs on the host and in the emulated Pi, so the two outputs can be compared. Device code
only (edge.*, numpy, onnxruntime, cv2): in the arm64 guest it has just the ``device`` wheels. Boxes,
landmarks and descriptors are written with full float precision, with each photo's pipeline time (ms).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run the device face pipeline on photos; write JSON.")
    parser.add_argument("--models", type=Path, required=True, help="face models folder (models.json)")
    parser.add_argument("--out", type=Path, required=True, help="JSON file to write")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--unfused",
        action="store_true",
        help="the accuracy gate's arithmetic: each net's .onnx with graph optimisations off (QDQ unfused)",
    )
    parser.add_argument("photos", type=Path, nargs="+")
    args = parser.parse_args(argv)

    import time

    import numpy as np
    import onnxruntime

    from edge.cpu import int8_kernels
    from edge.errors import EdgeDeployError
    from edge.face.models import open_face_pipeline
    from edge.imageio import load_image

    result = {
        "machine": platform.machine(),
        "onnxruntime": onnxruntime.__version__,
        "numpy": np.__version__,
        "unfused": args.unfused,
        "int8_kernels": int8_kernels().kind,
    }
    photos = []
    try:
        with open_face_pipeline(args.models, threads=args.threads, unfused=args.unfused) as pipeline:
            for path in args.photos:
                rgb = load_image(path)
                start = time.perf_counter()
                faces = pipeline.analyze(rgb)
                ms = (time.perf_counter() - start) * 1000.0
                photos.append({"photo": path.name, "ms": ms, "faces": [_face(f, np) for f in faces]})
    except EdgeDeployError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return exc.exit_code
    result["photos"] = photos
    args.out.write_text(json.dumps(result) + "\n", encoding="utf-8")
    return 0


def _face(face, np) -> dict:
    return {
        "box": [float(v) for v in face.detection.box],
        "score": float(face.detection.score),
        "landmarks": np.asarray(face.detection.landmarks, dtype=float).tolist(),
        "descriptor": [float(v) for v in face.descriptor],
    }


if __name__ == "__main__":
    sys.exit(main())
