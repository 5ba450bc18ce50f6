"""The language model to TFLite through litert-torch's generative API (prefill + decode, external KV cache).

litert-torch pulls jax, transformers, torchao and its own converter (~2 GB) that the main environment must
not carry, so it lives in ``.venv-litert-torch`` (``bash scripts/setup_litert_torch.sh``) and this module
runs ``scripts/slm/litert_export.py`` with that venv's python in a subprocess, with a timeout. The
result runs on the device with ``edge.text.litert_decoder.LiteRtDecoder`` (ai-edge-litert only).
"""

from __future__ import annotations

import enum
import json
import math
import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from converters.paths import REPO_ROOT
from converters.slm.perplexity import PerplexityResult, _log_softmax

if TYPE_CHECKING:
    from converters.slm.divergence import WindowLogits
from converters.tools import log_tail, run_tool, side_venv_program
from edge.errors import ConversionError, InputError
from edge.text.litert_decoder import LiteRtDecoder

VENV = REPO_ROOT / ".venv-litert-torch"
SETUP_SCRIPT = "scripts/setup_litert_torch.sh"
EXPORT_SCRIPT = REPO_ROOT / "scripts" / "slm" / "litert_export.py"
#: glog info/warning lines and torchao's optional CUDA kernels: noise in every litert-torch run.
NOISE = re.compile(r"^([IW]\d{4} |WARNING: All log messages before absl|Failed to load .*torchao)")


class TfliteQuant(enum.Enum):
    """litert-torch's quantization recipes we offer (names are its ``--quantize`` values)."""

    NONE = "none"
    DYNAMIC_INT8 = "dynamic_int8"
    WEIGHT_ONLY_INT8 = "weight_only_int8"


@dataclass(frozen=True)
class TfliteOptions:
    """Conversion settings.

    Attributes:
        kv_cache_max_len: positions of the fixed KV buffer (prompt plus generated tokens).
        prefill_lengths: one ``prefill_N`` signature per length (the device chunks longer prompts).
        timeout_s: kill the conversion after this many seconds.
        threads: torch threads in the conversion process.
        venv: the litert-torch environment.
    """

    kv_cache_max_len: int = 512
    prefill_lengths: tuple[int, ...] = (32,)
    timeout_s: float = 1800.0
    threads: int = 1
    venv: Path = field(default=VENV)


@dataclass(frozen=True)
class TfliteDecoder:
    """A converted ``.tflite`` decoder.

    Attributes:
        path: the file.
        quant: the recipe applied.
        kv_cache_max_len: positions of its KV buffer.
        prefill_lengths: its prefill signatures.
        size_bytes: file size.
        seconds: wall time of the conversion process (load + export + convert).
        log: the conversion log.
    """

    path: Path
    quant: TfliteQuant
    kv_cache_max_len: int
    prefill_lengths: tuple[int, ...]
    size_bytes: int
    seconds: float
    log: Path


def venv_python(venv: Path = VENV) -> Path:
    """The python of a ready litert-torch venv.

    Raises:
        MissingDependencyError: the venv is missing or its set-up did not finish (naming the set-up script).
    """
    return side_venv_program(venv, "python", "litert-torch", SETUP_SCRIPT)


def _check_options(options: TfliteOptions) -> None:
    if options.kv_cache_max_len < 2:
        raise InputError(f"kv_cache_max_len = {options.kv_cache_max_len}; expected at least 2")
    if not options.prefill_lengths or any(n < 2 for n in options.prefill_lengths):
        raise InputError(f"prefill_lengths = {options.prefill_lengths}; expected one or more lengths of at least 2")
    if max(options.prefill_lengths) > options.kv_cache_max_len:
        raise InputError(
            f"prefill_lengths = {options.prefill_lengths}; expected none above kv_cache_max_len "
            f"= {options.kv_cache_max_len}"
        )


def convert_tflite(
    hf_dir: Path, out_dir: Path, quant: TfliteQuant = TfliteQuant.NONE, options: TfliteOptions | None = None
) -> TfliteDecoder:
    """Convert the llama decoder in ``hf_dir`` to ``out_dir/model_<quant>.tflite`` with litert-torch.

    Args:
        hf_dir: an HF llama folder (``config.json`` + ``model.safetensors``; see ``gguf_source``).
        out_dir: where to write the model and ``litert_export_<quant>.log``.
        quant: the litert-torch quantization recipe.
        options: sizes, timeout, venv.

    Returns:
        The converted model record.

    Raises:
        InputError: the folder is incomplete or the options are out of range.
        MissingDependencyError: the litert-torch venv is not ready.
        ConversionError: the conversion failed or timed out (with its log's tail).
    """
    opts = options or TfliteOptions()
    _check_options(opts)
    hf_dir, out_dir = Path(hf_dir), Path(out_dir)
    for name in ("config.json", "model.safetensors"):
        if not (hf_dir / name).is_file():
            raise InputError(f"{hf_dir / name}: missing; expected an HF llama folder")
    python = venv_python(opts.venv)
    out_dir.mkdir(parents=True, exist_ok=True)
    log = out_dir / f"litert_export_{quant.value}.log"
    cmd = [str(python), str(EXPORT_SCRIPT), "--hf-dir", str(hf_dir), "--out-dir", str(out_dir)]
    cmd += ["--name", "model", "--kv-cache-max-len", str(opts.kv_cache_max_len), "--quantize", quant.value]
    for n in opts.prefill_lengths:
        cmd += ["--prefill-len", str(n)]
    env = {**os.environ, "EDGE_LITERT_THREADS": str(opts.threads), "TF_CPP_MIN_LOG_LEVEL": "2"}
    start = time.perf_counter()
    what = f"{hf_dir}: litert-torch conversion ({quant.value})"
    proc = run_tool(cmd, opts.timeout_s, what, ConversionError, env=env, log=log, keep_stdout=True, noise=NOISE)
    seconds = time.perf_counter() - start
    return _record(proc.stdout, quant, opts, seconds, log)


def _record(stdout: str, quant: TfliteQuant, opts: TfliteOptions, seconds: float, log: Path) -> TfliteDecoder:
    lines = stdout.strip().splitlines()
    try:
        info = json.loads(lines[-1])
        path = Path(info["path"])
    except (IndexError, json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ConversionError(
            f"litert_export.py printed no result record; last lines of {log}:\n{log_tail(log, noise=NOISE)}"
        ) from exc
    if not path.is_file():
        raise ConversionError(f"{path}: litert-torch reported this file but it does not exist; see {log}")
    final = path.with_name(f"model_{quant.value}.tflite")
    path.replace(final)
    return TfliteDecoder(
        path=final,
        quant=quant,
        kv_cache_max_len=opts.kv_cache_max_len,
        prefill_lengths=tuple(opts.prefill_lengths),
        size_bytes=final.stat().st_size,
        seconds=round(seconds, 1),
        log=log,
    )


def tflite_perplexity(model_path: Path, windows: list[list[int]], threads: int = 2) -> PerplexityResult:
    """Perplexity of a ``.tflite`` decoder over token windows, scored like ``perplexity.perplexity``.

    Args:
        model_path: the converted model.
        windows: token windows (see ``perplexity.text_windows``), each shorter than its KV buffer.
        threads: LiteRT threads.

    Raises:
        InputError: a window does not fit the model's KV buffer.
        InferenceError: LiteRT failed.
    """
    decoder = LiteRtDecoder(model_path, threads)
    nll, count = 0.0, 0
    try:
        for ids in windows:
            logp = _log_softmax(decoder.sequence_logits(ids)[:-1])
            nll -= float(logp[np.arange(len(ids) - 1), ids[1:]].sum())
            count += len(ids) - 1
    finally:
        decoder.close()
    return PerplexityResult(math.exp(nll / count), count, len(windows))


@contextmanager
def tflite_window_logits(model_path: Path, threads: int = 2) -> Iterator[tuple[WindowLogits, int]]:
    """A ``.tflite`` decoder as the teacher-forced gate reads a model (``divergence.WindowLogits``), and the
    longest window its KV buffer holds; the interpreter is closed on exit.

    Raises:
        InferenceError: LiteRT cannot load the model.
    """
    decoder = LiteRtDecoder(model_path, threads)
    try:
        yield (lambda ids: decoder.sequence_logits(ids)[:-1]), decoder.context_length
    finally:
        decoder.close()
