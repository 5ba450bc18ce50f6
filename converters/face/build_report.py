"""report.md of ``edge-deploy convert face``'s fp32 build: the models, their checks against the sources, the dlib
proof and the pipeline agreement (dlib's embedder), or the calibrated threshold (a user's embedder)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from edge import __version__

if TYPE_CHECKING:
    from converters.face.build import FaceBuild


def render_build_markdown(build: FaceBuild) -> str:
    """report.md of an fp32 face build (``converters.face.build.convert_face``)."""
    d = build.to_dict()
    lines = [
        f"# Face models for `{build.target}`",
        "",
        f"edge-deploy {__version__}; verdict: **{'PASSED' if build.passed else 'FAILED'}**",
        "",
        "| role | file | format | precision | size | source package | version | licence |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for m in build.models:
        s = m.source
        lines.append(
            f"| {m.role} | `{m.file}` | {m.format} | {m.precision} | {m.size / 1e6:.2f} MB | "
            f"`{s['package']}` | {s['version']} | {s['licence']} |"
        )
    lines += [
        "",
        "## ONNX vs the source networks (seeded inputs)",
        "",
        "| model | output | max abs diff | tolerance |",
        "|---|---|---|---|",
    ]
    lines += [f"| {c.model} | {c.output} | {c.max_abs_diff:.2e} | {c.tolerance:g} |" for c in build.source_checks]
    lines += ["", "## Embedder vs dlib's own `compute_face_descriptor`", ""]
    p = d["dlib_proof"]
    lines.append(
        f"{p['chips']} real aligned 150x150 chips ({p['chips_from']}): max abs diff **{p['max_abs_diff']:.2e}** "
        f"(tolerance {p['tolerance']:g})."
        if p.get("ran")
        else f"Not run: {p['reason']}."
    )
    lines += ["", "## Our pipeline vs face_recognition's (MTCNN + 5-point + ONNX vs HOG + 5-point + dlib)", ""]
    a = d["pipeline_agreement"]
    lines.append(
        f"Same/different decisions at 0.6 agree on **{a['decision_agreement']:.2%}** of the "
        f"{a['pairs_decided_by_both']} evaluation pairs both pipelines decide (of {a['pairs']}; the others involve a "
        f"face face_recognition's HOG detector misses) (goal {a['goal']:.0%}); mean descriptor distance "
        "between the two pipelines on the same face "
        f"**{a['mean_descriptor_distance']:.4f}**. Per-pair details: `agreement.md`."
        if a.get("ran")
        else f"Not run: {a['reason']}."
    )
    if build.recognition:
        (embedder,) = [m for m in build.models if m.role == "embedder"]
        lines += ["", *_recognition_markdown(build.recognition, embedder.source)]
    if build.failures:
        lines += ["", "## Failures", ""] + [f"- {f}" for f in build.failures]
    return "\n".join(lines) + "\n"


def _recognition_markdown(r: dict, source: dict) -> list[str]:
    c = r["calibration"]
    return [
        "## The user embedder's same/different threshold",
        "",
        f"Source: `{source['file']}` (sha256 `{source['sha256']}`), licence {source['licence']} (given by: "
        f"{source['licence_given_by']}).",
        "",
        f"Chips {r['chip_size']}x{r['chip_size']} {r['channels']} ({r['layout']}), fed (pixel - mean {r['mean']}) / "
        f"std {r['std']}; descriptors {r['descriptor_size']}-d, compared by Euclidean distance.",
        "",
        f"Threshold **{r['threshold']:.4f}**: pair accuracy **{c['pair_accuracy']:.4f}** ({c['correct']} of "
        f"{c['pairs']} pairs: {c['same_pairs']} same-person, {c['different_pairs']} different; of the "
        f"{c['evaluation_pairs']} evaluation pairs, those whose two faces MTCNN found). The best accuracy holds "
        f"for thresholds in [{c['best_range'][0]:.4f}, {c['best_range'][1]:.4f}); the midpoint is taken. "
        "Recorded in models.json (`recognition.threshold`) and used by `face recognize` and the daemon.",
        "",
        "No dlib equality proof and no face_recognition agreement: there is no reference implementation of a "
        "user's model; the shipped copy is checked against the user's own model instead (table above).",
    ]
