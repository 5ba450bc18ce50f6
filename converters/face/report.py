"""The quantized face models' report: Markdown next to the models and a histogram of the cosines."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from converters.face.quant_eval import EVALUATED_AS
from edge.cpu import int8_kernels
from edge.errors import require

if TYPE_CHECKING:
    from converters.face.quantize import QuantBuild


def write_histogram(path: Path, cosines: np.ndarray, threshold: float, build: QuantBuild) -> Path:
    """A PNG histogram of the per-face cosine similarities to fp32, with the gate's mean threshold marked.

    Raises:
        MissingDependencyError: matplotlib is not installed.
    """
    matplotlib = require("matplotlib", "convert", "The quantization report's histogram")
    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    try:
        lo = min(float(np.min(cosines)), threshold) - 1e-4
        ax.hist(cosines, bins=np.linspace(lo, 1.0, 41).tolist(), color="#3b6ea8", edgecolor="white")
        ax.axvline(threshold, color="#c0392b", linestyle="--", label=f"gate: mean >= {threshold:g}")
        ax.axvline(float(np.mean(cosines)), color="#27ae60", label=f"mean {np.mean(cosines):.5f}")
        ax.set_xlabel("cosine similarity to the fp32 descriptor (same chip)")
        ax.set_ylabel("faces")
        ax.set_title(f"{build.target}: {build.precision.value} ({build.mode.value}) embedder, {len(cosines)} faces")
        ax.legend(loc="upper left")
        fig.tight_layout()
        fig.savefig(path)
    finally:
        plt.close(fig)
    return path


def _settings_rows(build: QuantBuild) -> list[str]:
    rows = [
        "| net | mode | calibration | activations | weights | per-channel | reduce-range | kept float |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for net, s in build.settings.items():
        rows.append(
            f"| {net} | {s.mode.value} | {s.calibration.value} | {s.activations.value} | {s.weights.value} | "
            f"{s.per_channel} | {s.reduce_range} | {', '.join(s.keep_float_ops) or '-'} |"
        )
    return rows


def _file_rows(build: QuantBuild) -> list[str]:
    rows = ["| net | fp32 .onnx | quantized .onnx | ratio | .ort | shipped |", "|---|---|---|---|---|---|"]
    for net, f in build.onnx_files.items():
        ort = build.ort_files.get(net)
        ort_text = f"`{ort['file']}` {ort['size'] / 1e6:.3f} MB" if ort else "-"
        rows.append(
            f"| {net} | {f['fp32_size'] / 1e6:.3f} MB | `{f['file']}` {f['size'] / 1e6:.3f} MB | "
            f"{f['fp32_size'] / f['size']:.2f}x | {ort_text} | {'.ort' if ort else '.onnx'} |"
        )
    return rows


def render_markdown(build: QuantBuild) -> str:
    """The Markdown report (quant_report.md)."""
    e, d, x, c = build.embedder, build.detector, build.end_to_end, build.calibration
    t = build.thresholds
    dec = e["decisions"]
    lines = [
        f"# {build.precision.value} face models for `{build.target}` ({build.mode.value})",
        "",
        f"Verdict: **{'PASSED' if build.passed else 'FAILED'}**. Shipped (models.json): **{build.shipped}** files"
        + (f", ORT format built with `--target_platform {build.ort_platform}`." if build.ort_platform else "."),
        "",
        f"Measured on: {EVALUATED_AS}. Build host INT8 kernels: {int8_kernels().kind} (the verdict does not "
        "depend on them).",
        "",
        "## Settings",
        "",
        *_settings_rows(build),
        "",
        "Kept fp32 (not quantized): "
        + (", ".join(n for n in build.onnx_files if n not in build.settings) or "none")
        + ". Output heads kept float where `float_heads` is true.",
        "",
        f"Calibration: {c.get('images', 0)} images ({c.get('source', c.get('reason', ''))}); samples per net "
        f"{c.get('samples_used', {})} of {c.get('samples_available', {})}.",
        "",
        "## Files",
        "",
        *_file_rows(build),
        "",
        "## Against fp32 on the evaluation set (docs/evaluation.md)",
        "",
        "| measure | value | gate |",
        "|---|---|---|",
        f"| embedder cosine, mean ({e['faces']} faces, same chips) | {e['cosine_mean']:.5f} "
        f"| >= {t['embed_mean_cosine']:g} |",
        f"| embedder cosine, min / 5th percentile | {e['cosine_min']:.5f} / {e['cosine_p05']:.5f} | - |",
        f"| same/different decisions (distance <= {dec.get('threshold', 0.6):.4g}) agreeing with fp32 | "
        f"{dec['agreement']:.4f} ({dec['agree']} of {dec['pairs']}) "
        f"| >= {t['embed_decision_agreement']:g} |",
        f"| detector box IoU with fp32 twin, min / mean ({d['faces']} faces) | "
        f"{d['iou_min']:.3f} / {d['iou_mean']:.3f} | min >= {t['detect_iou']:g} |",
        f"| faces lost by the quantized detector | {d['lost']} | <= {t['detect_max_lost']} |",
        f"| detections fp32 / quantized (all images) | {d['fp32_detections']} / {d['quant_detections']} | - |",
        f"| end to end (quantized detector + embedder): cosine mean / min | "
        f"{x['cosine_mean']:.5f} / {x['cosine_min']:.5f} | not gated |",
        f"| end to end: decisions agreeing with fp32 | {x['decisions']['agreement']:.4f} of {x['decisions']['pairs']} "
        "| not gated |",
        "",
        "Histogram of the per-face cosines: `cosine_hist.png`.",
        "",
        "Seconds: " + ", ".join(f"{k} {v:.0f}" for k, v in build.seconds.items()),
    ]
    if dec["disagreements"]:
        lines += ["", "Pairs decided differently (embedder, fp32 vs quantized distance):", ""]
        lines += [
            f"- {p['a']} / {p['b']} ({'same' if p['same'] else 'different'} person): "
            f"{p['fp32']:.4f} vs {p['quant']:.4f}"
            for p in dec["disagreements"]
        ]
    if build.failures:
        lines += ["", "## Failures", ""] + [f"- {f}" for f in build.failures]
    return "\n".join(lines) + "\n"
