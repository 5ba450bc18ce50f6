"""``report.json`` and ``report.md`` of an SLM build: what went in, what was done, what was measured."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from converters.slm.divergence import HELD_OUT_TEXTS
from converters.versions import library_versions
from edge.digest import file_sha256

if TYPE_CHECKING:
    from converters.slm.build import SlmOptions
    from converters.slm.divergence import Divergence
    from converters.slm.gguf_source import HfFolder
    from converters.slm.perplexity import PerplexityGate

REPORT_SCHEMA_VERSION = 1
EVAL_TEXT_NOTE = (
    "U.S. Constitution (a U.S. government work, public domain), as shipped in the wordcloud 1.9.6 sdist "
    "on PyPI (examples/constitution.txt)"
)


def build_report(
    out_dir: Path,
    folder: HfFolder,
    record: dict,
    counts: dict[str, int],
    result: PerplexityGate,
    timings: dict[str, float],
    opts: SlmOptions,
) -> dict:
    """The report as a JSON-ready dict."""
    files = sorted(p for p in out_dir.iterdir() if p.is_file() and not p.name.startswith("report."))
    return {
        "schema_version": REPORT_SCHEMA_VERSION,
        "source": asdict(folder.source),
        "model": {"architecture": "llama", **asdict(folder.llama)},
        "profile": record["profile"].name,
        "precision": record["precision"].value,
        "method": record["method"],
        "settings": record["settings"],
        "graph": {
            "MatMulNBits": counts.get("MatMulNBits", 0),
            "MatMul": counts.get("MatMul", 0),
            "MatMulInteger": counts.get("MatMulInteger", 0),
            "GroupQueryAttention": counts.get("GroupQueryAttention", 0),
            "GatherBlockQuantized": counts.get("GatherBlockQuantized", 0),
            "nodes": sum(counts.values()),
        },
        "greedy_agreement": record.get("greedy"),
        "tflite": record.get("tflite"),
        "perplexity": {
            "text": str(opts.eval_text.name),
            "text_source": EVAL_TEXT_NOTE,
            "window": opts.eval_window,
            "tokens_scored": result.candidate.tokens_scored,
            "fp32": result.reference.perplexity,
            "quantized": result.candidate.perplexity,
            "ratio": result.ratio,
            "limit": result.limit,
            "passed": result.passed,
        },
        "divergence": _divergence(record.get("divergence")),
        "files": {p.name: {"bytes": p.stat().st_size, "sha256": file_sha256(p)} for p in files},
        "timings_s": timings,
        "versions": library_versions(),
    }


def _divergence(divergence: Divergence | None) -> dict | None:
    if divergence is None:
        return None
    texts = [p.name for p in HELD_OUT_TEXTS]
    return {"texts": texts, "gated": False, **divergence.to_dict()}


def render_markdown(report: dict) -> str:
    """A short human summary of :func:`build_report`'s dict."""
    ppl, src = report["perplexity"], report["source"]
    verdict = "passed" if ppl["passed"] else "FAILED"
    lines = [
        f"# Small-LM build: {report['profile']} / {report['precision']} ({report['method']})",
        "",
        f"Source: `{src['file']}` {_origin(src)} ({src['licence']}), sha256 `{src['sha256'][:16]}...`",
        "",
        f"Graph: {report['graph']['MatMulNBits']} MatMulNBits, {report['graph']['MatMul']} MatMul, "
        f"{report['graph']['MatMulInteger']} MatMulInteger, {report['graph']['nodes']} nodes.",
        f"Settings: {json.dumps(report['settings'])}",
        "",
        f"Perplexity gate {verdict}: {ppl['quantized']:.3f} vs fp32 {ppl['fp32']:.3f}, ratio {ppl['ratio']:.4f} "
        f"(limit {ppl['limit']}), {ppl['tokens_scored']} tokens of {ppl['text_source']}.",
        "",
        *_divergence_lines(report.get("divergence")),
        *_greedy_lines(report.get("greedy_agreement")),
        *_tflite_lines(report.get("tflite")),
        "| file | bytes | sha256 |",
        "|---|---:|---|",
    ]
    lines += [f"| {name} | {f['bytes']} | `{f['sha256'][:16]}...` |" for name, f in report["files"].items()]
    lines += ["", "Stage timings (s): " + ", ".join(f"{k} {v}" for k, v in report["timings_s"].items()), ""]
    return "\n".join(lines)


def _origin(src: dict) -> str:
    return "(a local GGUF)" if src["package"] == "file" else f"from PyPI package {src['package']} {src['version']}"


def _divergence_lines(div: dict | None) -> list[str]:
    if not div:
        return []
    return [
        f"Teacher-forced against fp32 (reported, not gated), {div['tokens_scored']} tokens of "
        f"{' + '.join(div['texts'])}: KL divergence mean {div['mean_kld']:.3g}, p99 {div['p99_kld']:.3g}, "
        f"max {div['max_kld']:.3g}; same top-1 {div['same_top1_percent']:.2f} %; perplexity "
        f"{div['perplexity']:.3f} vs fp32 {div['perplexity_fp32']:.3f} (ratio {div['perplexity_ratio']:.4f}).",
        "",
    ]


def _greedy_lines(greedy: dict | None, candidate: str = "quantized") -> list[str]:
    if not greedy:
        return []
    verdict = "passed" if greedy["passed"] else "FAILED"
    lines = [f"Greedy agreement {verdict} (first {greedy['required_tokens']} tokens equal to fp32's):", ""]
    for p in greedy["prompts"]:
        lines.append(f"- {p['prompt']!r}: {p['leading_equal']} equal; {candidate} {p['candidate']!r}")
    return [*lines, ""]


def _tflite_lines(twin: dict | None) -> list[str]:
    if not twin:
        return []
    if not twin["greedy_agreement"]["passed"]:
        runs = "not named in generation.json (it failed its gate; the device runs the ONNX)"
    elif twin["runtime_default"]:
        runs = "the device's default (generation.json runtime = litert)"
    else:
        runs = "beside the ONNX"
    head = f"LiteRT twin `{twin['file']}` ({twin['quant']}, {twin['bytes']} bytes), {runs}; its greedy answers:"
    return [head, "", *_greedy_lines(twin["greedy_agreement"], "LiteRT")]


def write_reports(out_dir: Path, report: dict) -> tuple[Path, Path]:
    """Write ``report`` (from :func:`build_report`) as ``report.json`` and ``report.md`` into ``out_dir``.

    Returns:
        Their paths.
    """
    json_path, md_path = out_dir / "report.json", out_dir / "report.md"
    json_path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    md_path.write_text(render_markdown(report), encoding="utf-8")
    return json_path, md_path
