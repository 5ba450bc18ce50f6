"""GGUF files quantized by llama.cpp itself, through `convert slm`'s reader, export and INT4 repack, against
transformers loading the same file.

The suite's K-quant proofs (tests/integration/test_gguf_archs.py) use random K-quant blocks: gguf-py cannot
quantize to K types, and building llama.cpp (llama-cpp-python, the `bench` extra) takes minutes, too long for
CI. This script is the check with llama.cpp's own quantizer (`llama_cpp.llama_model_quantize`, which searches
the best scales as a real Q4_K_M file has them): a tiny random-weight F32 GGUF (the tests' writer, llama,
hidden 256) is quantized to each file type people download, then

* our fp32 ONNX export against transformers: max |logit difference| on a 7-token prompt, 8 greedy tokens;
* the INT4 "grid" model (the file's codes repacked into MatMulNBits, accuracy level 0; weights on no
  MatMulNBits grid re-rounded to 8 bits): how many weights kept the file's codes and how many were
  re-rounded, max |logit difference| / max |logit|, greedy tokens.

    .venv/bin/pip install -e '.[bench]'            # builds llama.cpp (several minutes)
    .venv/bin/python -m benchmarks run gguf_llamacpp_quants [--write]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

NAME = "gguf_llamacpp_quants"
SUMMARY = "GGUF files quantized by llama.cpp through our reader, export and INT4 repack"
#: the docs/benchmarks.md sections it writes
SECTIONS = ("gguf-llamacpp",)

#: llama.cpp file types (``llama_ftype``) people download, by name.
FILE_TYPES = {"Q8_0": 7, "Q4_0": 2, "Q4_1": 3, "Q5_K_M": 17, "Q4_K_M": 15, "Q6_K": 18, "Q5_K_S": 16, "Q4_K_S": 14}


def quantize_with_llama_cpp(src: Path, out: Path, ftype: int) -> None:
    """llama.cpp's own quantizer on ``src`` (F32 GGUF) into ``out``.

    Raises:
        RuntimeError: llama.cpp returned an error code.
    """
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.nthread = 1
    code = llama_cpp.llama_model_quantize(str(src).encode(), str(out).encode(), params)
    if code != 0:
        raise RuntimeError(f"llama_model_quantize({src.name}, ftype {ftype}) returned {code}")


def tensor_types(path: Path) -> str:
    """The file's 2-D tensor types and how many of each, e.g. ``Q4_K x12, Q6_K x3``."""
    from converters.slm.gguf_file import scan_gguf

    counts: dict[str, int] = {}
    for t in scan_gguf(path).tensors:
        if len(t.shape) == 2:
            counts[t.tensor_type.name] = counts.get(t.tensor_type.name, 0) + 1
    return ", ".join(f"{k} x{v}" for k, v in sorted(counts.items()))


def check(path: Path, work: Path) -> dict:
    """Our fp32 export and INT4 repack of ``path`` against transformers."""
    from converters.slm.export import export_onnx
    from converters.slm.gguf_source import read_gguf, write_hf_folder
    from converters.slm.gqa_graph import build_gqa_onnx
    from converters.slm.grid_quant import repack_grid
    from testsupport.gguf_models import ours_run, reference_model, reference_run

    folder = write_hf_folder(read_gguf(path), work / "hf")
    ref_logits, ref_tokens = reference_run(reference_model(path))
    fp32_logits, fp32_tokens = ours_run(export_onnx(folder.path, work / "fp32" / "model.onnx").path)
    fused = build_gqa_onnx(folder.path, work / "gqa" / "model.onnx")
    counts = repack_grid(fused, work / "int4" / "model.onnx", accuracy_level=0, reround=True)
    grid_logits, grid_tokens = ours_run(work / "int4" / "model.onnx")
    scale = float(np.abs(ref_logits).max())
    return {
        "types": tensor_types(path),
        "fp32_max_abs": float(np.abs(fp32_logits - ref_logits).max()),
        "fp32_greedy": fp32_tokens == ref_tokens,
        "grid_counts": counts,
        "grid_rel": float(np.abs(grid_logits - ref_logits).max()) / scale,
        "grid_greedy": sum(a == b for a, b in zip(grid_tokens, ref_tokens, strict=True)),
        "max_logit": scale,
    }


def table(rows: dict[str, dict]) -> str:
    lines = [
        "| llama.cpp file type | 2-D tensor types in the file | fp32 export: max abs logit diff | greedy | "
        "INT4 grid: codes kept (4-bit / 8-bit) | re-rounded to 8 bits | max logit diff / max logit | greedy |",
        "|---|---|---:|---|---:|---:|---:|---|",
    ]
    for name, r in rows.items():
        c = r["grid_counts"]
        lines.append(
            f"| {name} | {r['types']} | {r['fp32_max_abs']:.2e} | {'8 of 8' if r['fp32_greedy'] else '**differs**'} | "
            f"{c.get('int4', 0)} / {c.get('int8', 0) - c.get('rerounded_int8', 0)} | {c.get('rerounded_int8', 0)} | "
            f"{r['grid_rel']:.1e} | {r['grid_greedy']} of 8 |"
        )
    return "\n".join(lines)


HEAD = """## GGUF files quantized by llama.cpp itself: our reader, export and INT4 repack vs transformers

`benchmarks/gguf_llamacpp_quants.py`: the tests' tiny random-weight llama GGUF (2 layers, hidden and FFN 256,
vocab 48) written in F32, then quantized by llama.cpp's own `llama_model_quantize` (llama-cpp-python
{version}, the `bench` extra) to each file type, read by `convert slm`'s GGUF reader and compared with
transformers {tf_version} loading the same file (fp32, the reference): prefill logits of a 7-token prompt
and 8 greedy tokens through our KV cache. "codes kept" counts the weight MatMuls whose file codes
MatMulNBits holds as they are (4-bit, or 8-bit codes with offsets for 5-bit types); "re-rounded" those on
no MatMulNBits grid (Q6_K, F32), re-rounded to symmetric 8 bits, which the gates judge. Machine: {machine}.
Not in the suite: building llama.cpp takes minutes (the suite's K-quant proofs use random K blocks).
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--types", default=",".join(FILE_TYPES), help="comma list of llama.cpp file types")
    parser.add_argument("--write", action="store_true", help="write the 'gguf-llamacpp' section")
    args = parser.parse_args(argv)
    import gguf
    import llama_cpp
    import transformers

    from testsupport.gguf_models import write_gguf

    rows = {}
    with tempfile.TemporaryDirectory(prefix="gguf-llamacpp-") as tmp:
        src = write_gguf(Path(tmp) / "tiny-llama-F32.gguf", "llama", gguf.GGMLQuantizationType.F32, wide=True)
        for name in [t.strip() for t in args.types.split(",") if t.strip()]:
            out = Path(tmp) / f"tiny-llama-{name}.gguf"
            quantize_with_llama_cpp(src, out, FILE_TYPES[name])
            rows[name] = check(out, Path(tmp) / name)
            print(name, rows[name], file=sys.stderr, flush=True)
    text = table(rows)
    print(text)
    if args.write:
        from benchmarks.harness.report import machine_line, write_section

        head = HEAD.format(version=llama_cpp.__version__, tf_version=transformers.__version__, machine=machine_line())
        write_section(
            "gguf-llamacpp", head + "\n" + text + "\n\n`python -m benchmarks run gguf_llamacpp_quants --write`"
        )
    return 0
