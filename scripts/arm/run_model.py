"""Load one model with the device runtime and run it N times on fixed inputs (for exact cost counting).

    python3 scripts/arm/run_model.py --model face_embedder.onnx --runs 3 [--backend litert] [--input x.npy]
    python3 scripts/arm/run_model.py --model emb.int8.ort --runs 3 --inputs eval.npz [--save out.npz]

With ``--mark`` the inferences are marked for the counting plugin (scripts/arm/insncount.c): region 0 is
empty (the marks' own cost), region 1 the first inference, region 2 the other runs. Without a plugin the
marks are harmless syscalls that fail with ENOSYS. Device code only (edge.runtime).
Inputs: ``--input`` (a .npy for the first input; an NCHW array is transposed for an NHWC model), ``--inputs``
(a .npz with an array per input name, as ``convert model --eval`` takes them: the first rows, as many as the
model's batch, 1 when it is dynamic), or seeded random values; dynamic dimensions become 1.
Prints one JSON line: backend, inputs, outputs and a checksum of the last outputs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from marks import marker  # scripts/arm/marks.py: this script's folder is on sys.path


def _feeds(model, input_npy: Path | None, np, inputs_npz: Path | None = None) -> dict:
    if inputs_npz is not None:
        from edge.runtime import first_batch

        with np.load(inputs_npz, allow_pickle=False) as data:
            return first_batch(str(inputs_npz), model.inputs, data)
    rng = np.random.default_rng(0)
    feeds = {}
    for k, spec in enumerate(model.inputs):
        if k == 0 and input_npy is not None:
            value = np.load(input_npy)
            nhwc = value.transpose(0, 2, 3, 1) if value.ndim == 4 else value
            if tuple(spec.shape) != value.shape and tuple(spec.shape) == nhwc.shape:  # a TFLite model
                value = np.ascontiguousarray(nhwc)
            feeds[spec.name] = value.astype(spec.dtype, copy=False)
            continue
        shape = tuple(d if isinstance(d, int) else 1 for d in spec.shape)
        if np.issubdtype(spec.dtype, np.integer):
            info = np.iinfo(spec.dtype)
            feeds[spec.name] = rng.integers(max(info.min, -128), min(info.max, 255), shape).astype(spec.dtype)
        else:
            feeds[spec.name] = rng.uniform(0, 255, shape).astype(spec.dtype)
    return feeds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run one model N times on fixed inputs.")
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--runs", type=int, required=True, help="inferences to run (0: load only)")
    parser.add_argument("--backend", default=None, help="onnxruntime or litert (default: from the file)")
    parser.add_argument("--input", type=Path, default=None, help=".npy for the first input")
    parser.add_argument("--inputs", type=Path, default=None, help=".npz with an array per input name")
    parser.add_argument("--save", type=Path, default=None, help="write the last outputs here (.npz)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--mark", action="store_true", help="mark regions for the counting plugin")
    args = parser.parse_args(argv)
    mark = marker(args.mark)

    import numpy as np

    from edge.errors import EdgeDeployError
    from edge.runtime import open_model

    try:
        with open_model(args.model, threads=args.threads, backend=args.backend) as model:
            run = model.prepare(_feeds(model, args.input, np, args.inputs))
            outputs = {}
            mark(0, 0)
            mark(0, 1)
            mark(1, 0)
            if args.runs >= 1:
                outputs = run()
            mark(1, 1)
            mark(2, 0)
            for _ in range(args.runs - 1):
                outputs = run()
            mark(2, 1)
            if args.save is not None:
                np.savez(args.save, **{k: np.asarray(v) for k, v in outputs.items()})
            summary = {
                "backend": model.backend,
                "inputs": [s.describe() for s in model.inputs],
                "outputs": {k: [list(v.shape), float(np.asarray(v, np.float64).sum())] for k, v in outputs.items()},
            }
    except EdgeDeployError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return exc.exit_code
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
