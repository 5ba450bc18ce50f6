"""The main job's HTML report: the annotated photos, the gate's figures as histograms, the emulated Pi vs the host.

``write_html_report(result)`` reads what the demo already produced: its ``DemoResult`` (per-image faces with
their truth, the ``PiRun``), the models folder's ``quant_report.json`` (the INT8 gate's per-face cosines) and
the emulated-Pi work folder's ``host.json`` / ``<cpu>.json`` (per-photo times), and writes ``report/index.html``
in the demo's output folder with its PNGs beside it. One file, no script, nothing fetched: it opens offline.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from edge.errors import require
from edge.face.annotate import annotate
from edge.imageio import load_image, save_image

if TYPE_CHECKING:
    from converters.demo.host import DemoResult

#: Longest side of an annotated photo in the report (the full-size ones would make it tens of MB).
PHOTO_MAX_SIDE = 720
REPORT_DIR = "report"
_CSS = """body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222;padding:0 1em}
h1{font-size:1.6em}h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:2em}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left}
td.num{text-align:right;font-variant-numeric:tabular-nums}.ok{color:#2e7d32}.bad{color:#c62828;font-weight:bold}
figure{display:inline-block;margin:.5em;vertical-align:top}figcaption{font-size:.85em;max-width:720px}
img{max-width:100%;border:1px solid #ddd}pre{background:#f6f6f6;padding:.6em;overflow-x:auto}"""


#: Cells that say whether a name is right, and their style.
_MARKS = {"right": "ok", "WRONG": "bad"}


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _num(value: Any) -> str:
    """A number as the report prints it everywhere (tests look for these exact strings)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return _e(value)
    if isinstance(value, int):
        return str(value)
    if not math.isfinite(value):
        return _e(value)
    return f"{value:.3g}" if abs(value) < 1e-3 and value != 0 else f"{value:.4f}"


def _table(rows: Iterable[Sequence[Any]], head: Sequence[str] | None = None) -> str:
    out = ["<table>"]
    if head:
        out.append("<tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>")
    for row in rows:
        cells = (
            f'<td class="num">{_num(v)}</td>'
            if isinstance(v, int | float) and not isinstance(v, bool)
            else f'<td class="{_MARKS[v]}">{_e(v)}</td>'
            if isinstance(v, str) and v in _MARKS
            else f"<td>{_e(v)}</td>"
            for v in row
        )
        out.append("<tr>" + "".join(cells) + "</tr>")
    return "\n".join(out + ["</table>"])


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _truth(face: dict) -> tuple[str, str]:
    """(what the face is, 'ok' / 'bad' / '') from the demo's labels; faces without them are not judged."""
    if "correct" not in face:
        return "-", ""
    truth = face.get("expected") or ("held out" if face.get("held_out") else "not a face")
    return truth, "ok" if face["correct"] else "bad"


def _photo(image: dict, folder: Path, index: int) -> str:
    """One annotated photo (a PNG beside the report) with a caption listing its faces."""
    source = Path(image["image"])
    rgb = annotate(load_image(source), image["faces"])
    scale = PHOTO_MAX_SIDE / max(rgb.shape[:2])
    if scale < 1:
        import cv2

        size = (round(rgb.shape[1] * scale), round(rgb.shape[0] * scale))
        rgb = cv2.resize(rgb, size, interpolation=cv2.INTER_AREA)
    name = f"photo-{index:02d}-{source.stem}.png"
    save_image(folder / name, rgb)
    rows = []
    for f in image["faces"]:
        truth, mark = _truth(f)
        rows.append((f.get("name") or "unknown", f["distance"], truth, {"ok": "right", "bad": "WRONG"}.get(mark, "")))
    caption = f"{_e(source.name)}: {len(image['faces'])} face(s)" + (_table(rows, ("name", "distance", "truth", "")))
    return (
        f'<figure><img src="{_e(name)}" alt="{_e(source.name)} annotated"><figcaption>{caption}</figcaption></figure>'
    )


def _histogram(
    path: Path, groups: dict[str, list[float]], line: tuple[float, str] | None, xlabel: str, title: str
) -> Path:
    """A PNG histogram of one or more groups of values (stacked), with a vertical line for a threshold."""
    matplotlib = require("matplotlib", "convert", "The demo's HTML report")
    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    values = [v for vs in groups.values() for v in vs if math.isfinite(v)]
    lo, hi = min(values + ([line[0]] if line else [])), max(values + ([line[0]] if line else []))
    pad = (hi - lo) * 0.05 or 1e-3
    bins = np.linspace(lo - pad, hi + pad, 31).tolist()
    fig, ax = plt.subplots(figsize=(7, 3.6), dpi=100)
    try:
        named = [(k, [v for v in vs if math.isfinite(v)]) for k, vs in groups.items() if vs]
        ax.hist([vs for _, vs in named], bins=bins, stacked=True, label=[f"{k} ({len(vs)})" for k, vs in named])
        if line:
            ax.axvline(line[0], color="#c0392b", linestyle="--", label=line[1])
        ax.set_xlabel(xlabel)
        ax.set_ylabel("count")
        ax.set_title(title)
        ax.legend(loc="best", fontsize="small")
        fig.tight_layout()
        fig.savefig(path)
    finally:
        plt.close(fig)
    return path


def _cosine(value: Any) -> str:
    """Cosines near 1 need five decimals to tell apart (the gate's own precision)."""
    return f"{value:.5f}" if isinstance(value, float) else _e(value)


def _bars(path: Path, labels: list[str], series: dict[str, list[float]], ylabel: str, title: str) -> Path:
    """A PNG of grouped bars, one group per label, on a log scale (host and emulated times differ 10-50x)."""
    matplotlib = require("matplotlib", "convert", "The demo's HTML report")
    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.4), dpi=100)
    try:
        width = 0.8 / len(series)
        for k, (name, values) in enumerate(series.items()):
            ax.bar([i + k * width for i in range(len(labels))], values, width, label=name)
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(labels))], labels)
        ax.set_yscale("log")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.legend(loc="best", fontsize="small")
        fig.tight_layout()
        fig.savefig(path)
    finally:
        plt.close(fig)
    return path


def _gate_section(models_dir: Path, folder: Path) -> str:
    """The INT8 gate's figures from quant_report.json: cosine histogram and the decision table."""
    q = _read_json(models_dir / "quant_report.json")
    if q is None or "embedder" not in q:
        return f"<p>No quantization gate: the models in {_e(models_dir)} are shipped as exported (fp32).</p>"
    e, t = q["embedder"], q.get("thresholds", {})
    parts = [
        f"<p>{_e(q.get('precision'))} gate: <b>{'PASSED' if q.get('passed') else 'FAILED'}</b>; "
        f"shipped: {_e(q.get('shipped'))}.</p>"
    ]
    gate = t.get("embed_mean_cosine")
    if e.get("cosines"):
        line = (float(gate), f"gate: mean >= {gate:g}") if gate is not None else None
        _histogram(
            folder / "gate-cosines.png",
            {"faces": e["cosines"]},
            line,
            "cosine similarity to the fp32 descriptor (same chip)",
            "embedder: quantized vs fp32",
        )
        parts.append('<img src="gate-cosines.png" alt="histogram of the embedder cosines to fp32">')
    dec = e.get("decisions", {})
    rows = [
        ("embedder cosine to fp32, mean", _cosine(e.get("cosine_mean")), f">= {gate}" if gate is not None else "-"),
        ("embedder cosine to fp32, min", _cosine(e.get("cosine_min")), "-"),
        (
            "same/different decisions agreeing with fp32",
            dec.get("agreement"),
            f"{dec.get('agree')} of {dec.get('pairs')} pairs",
        ),
    ]
    parts.append(_table(rows, ("measure", "value", "gate / count")))
    if dec.get("disagreements"):
        pairs = [
            (p["a"], p["b"], "same" if p["same"] else "different", p["fp32"], p["quant"]) for p in dec["disagreements"]
        ]
        parts += [
            "<p>Pairs decided differently (distance fp32 vs quantized):</p>",
            _table(pairs, ("a", "b", "person", "fp32", "quantized")),
        ]
    return "\n".join(parts)


def _distance_groups(images: list[dict]) -> dict[str, list[float]]:
    """The demo's face distances to the nearest gallery person, grouped by what the face truly is."""
    groups: dict[str, list[float]] = {
        "named correctly": [],
        "held out (should be unknown)": [],
        "wrong": [],
        "other": [],
    }
    for f in (f for im in images for f in im["faces"]):
        truth, mark = _truth(f)
        key = "wrong" if mark == "bad" else "held out (should be unknown)" if truth == "held out" else "other"
        key = "named correctly" if mark == "ok" and f.get("expected") else key
        groups[key].append(float(f["distance"]))
    return groups


def _decision_section(result: DemoResult, folder: Path) -> str:
    from edge.errors import EdgeDeployError
    from edge.face.models import read_models_folder
    from edge.face.types import DLIB_SAME_PERSON_THRESHOLD

    try:
        threshold = read_models_folder(result.models_dir).threshold
    except EdgeDeployError:
        threshold = DLIB_SAME_PERSON_THRESHOLD
    groups = _distance_groups(result.images)
    if not any(math.isfinite(v) for vs in groups.values() for v in vs):
        return "<p>No face was found, so no distance to show.</p>"
    line = (threshold, f"same person below {threshold:g}")
    _histogram(
        folder / "decision-distances.png",
        groups,
        line,
        "distance to the nearest gallery person",
        "the demo's decisions",
    )
    rows = [(k, len(v), min(v) if v else "-", max(v) if v else "-") for k, v in groups.items() if v]
    return "\n".join(
        [
            '<img src="decision-distances.png" alt="histogram of the distances to the nearest gallery person">',
            _table(rows, ("faces", "count", "min distance", "max distance")),
        ]
    )


def _pi_photos(out_dir: Path, cpu: str) -> list[tuple]:
    """Per photo: faces and milliseconds on the host and on the emulated Pi (from the pi step's JSON files)."""
    host = _read_json(out_dir / "emulated-pi" / "host.json")
    guest = _read_json(out_dir / "emulated-pi" / f"{cpu}.json")
    if not host or not guest or "photos" not in host or "photos" not in guest:
        return []
    rows = []
    for h, g in zip(host["photos"], guest["photos"], strict=False):
        ratio = g["ms"] / h["ms"] if h["ms"] > 0 else float("nan")
        ms = (f"{h['ms']:.1f}", f"{g['ms']:.1f}", f"{ratio:.1f}")
        rows.append((h["photo"], len(h["faces"]), len(g["faces"]), *ms))
    return rows


def _pi_section(result: DemoResult, folder: Path) -> str:
    pi = result.pi
    if pi is None or not pi.cpu:
        return "<p>Not run (<code>--no-emulation</code>).</p>"
    c = pi.comparison
    rows = [
        ("photos", c.get("photos"), ""),
        ("faces found: host / emulated Pi", f"{c.get('faces_host')} / {c.get('faces_guest')}", ""),
        ("boxes: max |diff| (pixels)", c.get("box_max_abs_diff", "-"), ""),
        ("descriptors: max |diff|", c.get("descriptor_max_abs_diff"), ""),
        ("same/different decisions equal", f"{c.get('decisions_agree')} of {c.get('pairs')}", ""),
        ("closest host pair distance to the threshold", c.get("distance_min_margin", "-"), ""),
    ]
    parts = [
        f"<p>The bundle's face pipeline on an emulated {_e(pi.cpu)} (qemu-user) against the same pipeline "
        "on this host.</p>"
    ]
    parts.append(_table([r[:2] for r in rows], ("measure", "value")))
    photos = _pi_photos(result.out_dir, pi.cpu)
    if photos:
        times = {"this host": [float(r[3]) for r in photos], f"emulated {pi.cpu}": [float(r[4]) for r in photos]}
        _bars(folder / "pi-times.png", [r[0] for r in photos], times, "ms per photo", "the face pipeline, per photo")
        parts.append('<img src="pi-times.png" alt="milliseconds per photo on this host and on the emulated Pi">')
        head = ("photo", "faces host", "faces Pi", "ms host", "ms emulated Pi", "x slower")
        parts += [
            "<p>Per photo. For quantized models this host runs the gate's unfused arithmetic, and qemu runs "
            "10-50x slower than a real Pi: compare outputs here, measure speed on the board.</p>",
            _table(photos, head),
        ]
    elif pi.latency_ms:
        parts.append(_table([(i + 1, ms) for i, ms in enumerate(pi.latency_ms)], ("photo", "ms emulated Pi")))
    parts.append(f"<pre>{_e(pi.summary())}</pre>")
    return "\n".join(parts)


def write_html_report(result: DemoResult, folder: Path | None = None) -> Path:
    """Write the demo's report: ``index.html`` and its PNGs in ``folder``.

    Args:
        result: what ``converters.demo.host.run_main_job`` (or ``run_face_demo``) returned.
        folder: where to write; None: ``result.out_dir / REPORT_DIR``.

    Returns:
        The path of ``index.html``.

    Raises:
        InputError: a query photo of the result cannot be read; MissingDependencyError: no matplotlib.
    """
    folder = Path(folder) if folder is not None else Path(result.out_dir) / REPORT_DIR
    folder.mkdir(parents=True, exist_ok=True)
    photos = "\n".join(_photo(im, folder, i) for i, im in enumerate(result.images, 1))
    counts = _table(list(result.counts.items()), ("count", "value"))
    body = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"><title>edge-deploy demo report</title>',
        f"<style>{_CSS}</style></head><body>",
        "<h1>edge-deploy demo report</h1>",
        f"<p>Output folder: <code>{_e(result.out_dir)}</code>; models: <code>{_e(result.models_dir)}</code>; "
        f"gallery: {len(result.enrolled)} people.</p>",
        f"<p><b>{'PASSED' if result.passed else 'FAILED'}</b></p>",
        counts,
        f"<pre>{_e(result.conversion)}</pre>" if result.conversion else "",
        "<h2>Recognised faces</h2>",
        "<p>Green: named after a gallery person; orange: unknown. Label: name and distance to the nearest gallery "
        "person; dots: the five landmarks.</p>",
        photos,
        "<h2>Decisions: distance to the nearest gallery person</h2>",
        _decision_section(result, folder),
        "<h2>The accuracy gate: quantized against fp32</h2>",
        _gate_section(Path(result.models_dir), folder),
        "<h2>The emulated Pi against this host</h2>",
        _pi_section(result, folder),
        "</body></html>",
    ]
    path = folder / "index.html"
    path.write_text("\n".join(body) + "\n", encoding="utf-8")
    return path
