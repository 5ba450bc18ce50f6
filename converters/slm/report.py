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
    from converters.slm.divergence import DivergenceGate
    from converters.slm.gguf_source import HfFolder

#: 2: the verdict is the teacher-forced ``gate`` (was: a perplexity gate and exact greedy agreement)
REPORT_SCHEMA_VERSION = 2


def build_report(
    out_dir: Path,
    folder: HfFolder,
    record: dict,
    counts: dict[str, int],
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
        "gate": _gate(record["gate"], opts.eval_window),
        "files": {p.name: {"bytes": p.stat().st_size, "sha256": file_sha256(p)} for p in files},
        "timings_s": timings,
        "versions": library_versions(),
    }


def _gate(gate: DivergenceGate, window: int) -> dict:
    texts = [p.name for p in HELD_OUT_TEXTS]
    return {**gate.to_dict(), "texts": texts, "window": window, **gate.divergence.to_dict()}


def render_markdown(report: dict) -> str:
    """A short human summary of :func:`build_report`'s dict."""
    src = report["source"]
    lines = [
        f"# Small-LM build: {report['profile']} / {report['precision']} ({report['method']})",
        "",
        f"Source: `{src['file']}` {_origin(src)} ({src['licence']}), sha256 `{src['sha256'][:16]}...`",
        "",
        f"Graph: {report['graph']['MatMulNBits']} MatMulNBits, {report['graph']['MatMul']} MatMul, "
        f"{report['graph']['MatMulInteger']} MatMulInteger, {report['graph']['nodes']} nodes.",
        f"Settings: {json.dumps(report['settings'])}",
        "",
        *_gate_lines(report["gate"]),
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


def _gate_lines(gate: dict) -> list[str]:
    verdict = "passed" if gate["passed"] else "FAILED"
    texts = f" of {' + '.join(gate['texts'])}" if gate.get("texts") else ""
    limits = ", ".join(f"`{k}` {v}" for k, v in gate["thresholds"].items())
    return [
        f"Gate {verdict}, teacher-forced against fp32 over {gate['tokens_scored']} held-out tokens{texts} "
        f"({gate['arithmetic']}): KL divergence mean {gate['mean_kld']:.3g}, p99 {gate['p99_kld']:.3g}, "
        f"max {gate['max_kld']:.3g}; same top-1 {gate['same_top1_percent']:.2f} %; perplexity "
        f"{gate['perplexity']:.3f} vs fp32 {gate['perplexity_fp32']:.3f} (ratio {gate['perplexity_ratio']:.4f}).",
        f"Limits (at least as close to fp32 as llama.cpp running the same GGUF): {limits}.",
        *[f"- missed: {line}" for line in gate["failures"]],
        "",
    ]


def _greedy_lines(greedy: dict | None, candidate: str = "quantized") -> list[str]:
    if not greedy:
        return []
    smoke = "; ".join(f"{p!r} names {w!r}" for p, w in greedy["smoke_check"].items())
    verdict = "passed" if greedy["passed"] else "FAILED"
    lines = [
        f"Greedy answers ({greedy['required_tokens']} tokens; not the verdict), leading tokens equal to fp32's; "
        f"smoke check ({smoke}) {verdict}:",
        "",
    ]
    for p in greedy["prompts"]:
        lines.append(f"- {p['prompt']!r}: {p['leading_equal']} equal; {candidate} {p['candidate']!r}")
    return [*lines, ""]


def _tflite_lines(twin: dict | None) -> list[str]:
    if not twin:
        return []
    if not twin["passed"]:
        runs = "not named in generation.json (it failed its gate; the device runs the ONNX)"
    elif twin["runtime_default"]:
        runs = "the device's default (generation.json runtime = litert)"
    else:
        runs = "beside the ONNX"
    head = f"LiteRT twin `{twin['file']}` ({twin['quant']}, {twin['bytes']} bytes), {runs}."
    return [head, "", *_gate_lines(twin["gate"]), *_greedy_lines(twin["greedy_agreement"], "LiteRT")]


def write_reports(out_dir: Path, report: dict) -> tuple[Path, Path]:
    """Write ``report`` (from :func:`build_report`) as ``report.json`` and ``report.md`` into ``out_dir``.

    Returns:
        Their paths.
    """
    json_path, md_path = out_dir / "report.json", out_dir / "report.md"
    json_path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    md_path.write_text(render_markdown(report), encoding="utf-8")
    return json_path, md_path
