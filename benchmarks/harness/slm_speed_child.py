"""One contender of the small-LM speed race, in its own fresh process (so its peak RSS is its own).

    python -m benchmarks.harness.slm_speed_child KIND PATH --threads N

KIND is ``ours-int4`` / ``ours-fp32`` (PATH: a converted folder, run with ``edge.text.OnnxDecoder``),
``llama.cpp`` (PATH: the GGUF, run with llama-cpp-python) or ``transformers`` (PATH: the HF folder,
``AutoModelForCausalLM`` fp32 with eager attention). The process loads its model, answers ``{"ready": ...}``
on stdout, then serves one JSON request per stdin line:

    {"op": "run", "ids": [...], "new_tokens": 32}  -> {"ttft_s", "decode_s", "decode_steps", "tokens"}
    {"op": "tokenize", "text": "..."}               -> {"ids": [...]}   (llama.cpp only: its own tokenizer)
    {"op": "quit"}                                  -> {"vm_hwm_kib", "ru_maxrss_kib"} and exit

Every contender decodes greedily (argmax of the last logits, in numpy or torch) and ignores end-of-text,
so each run makes exactly ``new_tokens`` tokens: one from the prefill, ``new_tokens - 1`` decode steps.
The protocol's stdout is a private copy of fd 1; fd 1 itself goes to stderr, so libraries that print
cannot corrupt it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.harness.procstat import vm_hwm_kib

KINDS = ("ours-int4", "ours-fp32", "llama.cpp", "transformers")
#: (kind, label) in table order: the race's contenders, one child kind each.
CONTENDERS = (
    ("ours-int4", "ours INT4 (ORT)"),
    ("ours-fp32", "ours fp32 (ORT)"),
    ("llama.cpp", "llama.cpp (GGUF)"),
    ("transformers", "transformers eager fp32"),
)
REFERENCE = "transformers"
PEER = "llama.cpp"
N_CTX = 1024


class OursRunner:
    """Our device path: ``edge.text.OnnxDecoder`` on a converted folder."""

    def __init__(self, folder: Path, threads: int) -> None:
        from edge.text.decoder import OnnxDecoder
        from edge.text.spec import load_spec

        self.decoder = OnnxDecoder(folder / load_spec(folder).model_file, threads)

    def run(self, ids: list[int], new_tokens: int) -> tuple[float, float, list[int]]:
        """Prefill + greedy decode; returns (time to first token, decode time, tokens)."""
        dec = self.decoder
        start = time.perf_counter()
        n = len(ids)
        logits, cache = dec.forward(np.array([ids]), np.ones((1, n), np.int64), np.arange(n)[None], dec.empty_cache())
        tokens = [int(np.argmax(logits[0, -1]))]
        first = time.perf_counter()
        for _ in range(new_tokens - 1):
            total = n + len(tokens)
            logits, cache = dec.forward(
                np.array([[tokens[-1]]]), np.ones((1, total), np.int64), np.array([[total - 1]]), cache
            )
            tokens.append(int(np.argmax(logits[0, -1])))
        return first - start, time.perf_counter() - first, tokens


class LlamaRunner:
    """llama.cpp through llama-cpp-python on the GGUF itself (its own Q4_1/Q8_0 kernels)."""

    def __init__(self, gguf: Path, threads: int) -> None:
        import llama_cpp

        self.lib = llama_cpp
        self.llm = llama_cpp.Llama(
            model_path=str(gguf), n_threads=threads, n_threads_batch=threads, n_ctx=N_CTX, n_batch=512, verbose=False
        )

    def _last_logits(self) -> np.ndarray:
        # without logits_all, Llama.eval no longer copies logits into .scores: read the context's last row
        row = self.lib.llama_get_logits_ith(self.llm.ctx, -1)
        return np.ctypeslib.as_array(row, shape=(self.llm.n_vocab(),))

    def run(self, ids: list[int], new_tokens: int) -> tuple[float, float, list[int]]:
        """Prefill + greedy decode from an empty cache; returns (time to first token, decode time, tokens)."""
        llm = self.llm
        llm.reset()  # n_tokens = 0: eval() clears the KV cache from there, nothing of the last run is reused
        start = time.perf_counter()
        llm.eval(ids)
        tokens = [int(np.argmax(self._last_logits()))]
        first = time.perf_counter()
        for _ in range(new_tokens - 1):
            llm.eval([tokens[-1]])
            tokens.append(int(np.argmax(self._last_logits())))
        return first - start, time.perf_counter() - first, tokens

    def tokenize(self, text: str) -> list[int]:
        """llama.cpp's own tokenization (BOS as the GGUF says, special tokens parsed)."""
        return list(self.llm.tokenize(text.encode("utf-8"), add_bos=True, special=True))


class TransformersRunner:
    """transformers' plain PyTorch path: fp32, eager attention, its default dynamic cache (``cache=``, 5.x API)."""

    def __init__(self, hf_dir: Path, threads: int) -> None:
        import torch
        from transformers import AutoModelForCausalLM

        torch.set_num_threads(threads)
        torch.set_num_interop_threads(1)
        self.torch = torch
        self.model = AutoModelForCausalLM.from_pretrained(
            str(hf_dir), dtype=torch.float32, attn_implementation="eager"
        ).eval()

    def run(self, ids: list[int], new_tokens: int) -> tuple[float, float, list[int]]:
        """Prefill + greedy decode; returns (time to first token, decode time, tokens)."""
        torch = self.torch
        with torch.inference_mode():
            start = time.perf_counter()
            out = self.model(input_ids=torch.tensor([ids]), use_cache=True, logits_to_keep=1)
            tokens = [int(out.logits[0, -1].argmax())]
            first = time.perf_counter()
            for _ in range(new_tokens - 1):
                out = self.model(input_ids=torch.tensor([[tokens[-1]]]), cache=out.cache, use_cache=True)
                tokens.append(int(out.logits[0, -1].argmax()))
            return first - start, time.perf_counter() - first, tokens


def open_runner(kind: str, path: Path, threads: int):
    """The runner of ``kind`` (see the module docstring)."""
    if kind in ("ours-int4", "ours-fp32"):
        return OursRunner(path, threads)
    if kind == "llama.cpp":
        return LlamaRunner(path, threads)
    return TransformersRunner(path, threads)


def serve(runner, out) -> None:
    """Answer requests from stdin until ``quit`` or end of input."""
    for line in sys.stdin:
        request = json.loads(line)
        if request["op"] == "quit":
            break
        if request["op"] == "tokenize":
            reply = {"ids": runner.tokenize(request["text"])}
        else:
            ttft, decode, tokens = runner.run(request["ids"], request["new_tokens"])
            reply = {"ttft_s": ttft, "decode_s": decode, "decode_steps": len(tokens) - 1, "tokens": tokens}
        out.write(json.dumps(reply) + "\n")
        out.flush()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    out.write(json.dumps({"vm_hwm_kib": vm_hwm_kib(), "ru_maxrss_kib": usage.ru_maxrss}) + "\n")
    out.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=KINDS)
    parser.add_argument("path", type=Path)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    start = time.perf_counter()
    try:
        runner = open_runner(args.kind, args.path, args.threads)
    except Exception as exc:  # any load failure goes to the parent as a message, not a hang
        out.write(json.dumps({"error": f"{args.kind}: cannot load {args.path} ({type(exc).__name__}: {exc})"}) + "\n")
        out.flush()
        return 1
    out.write(json.dumps({"ready": True, "load_s": time.perf_counter() - start, "load_hwm_kib": vm_hwm_kib()}) + "\n")
    out.flush()
    serve(runner, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
