"""Peak memory of the whole face pipeline per detector: INT8 against fp32, MTCNN against BlazeFace.

Issue #13's goal: the INT8 pipeline's peak RSS at most 0.6x the fp32 pipeline's. The face speed race
(``benchmarks/face_speed.py``) measures it with MTCNN, whose memory grows with every pyramid shape (its sessions
run without onnxruntime's arena; glibc's heap keeps the big levels' blocks: ``MMAP_LEVER``); this measures the
same thing for each detector a folder can run, so the goal is read per detector. One fresh process per row
(``benchmarks/harness/face_rss_child.py``: imports only numpy, onnxruntime and ``edge``) loads the pipeline and runs it
on the same photos, 1 thread; VmHWM from /proc/self/status, median of ``--repeats`` processes. "Above baseline"
subtracts a process with the same imports and photos but no model; the libraries' resident pages set a floor no
smaller model goes below, and the folder's model files bound what INT8 weights can save. Two more rows run MTCNN
with glibc's mmap threshold fixed (``MMAP_LEVER``), a lever measured against its CPU time, not a default.

    .venv/bin/python -m benchmarks run face_rss            # docs/benchmarks.md, section face-rss
    .venv/bin/python -m benchmarks run face_rss --quick    # 1 process per row, 3 photos; prints, writes no docs
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from benchmarks.harness.face_speed_models import (
    CACHE,
    CALIBRATION,
    build_fp32,
    build_int8,
    eval_photos,
    rss_child,
    with_blazeface,
)
from benchmarks.harness.face_speed_report import RSS_RATIO_GOAL
from benchmarks.harness.report import machine_line, write_section
from edge.profiles import load_profile

NAME = "face_rss"
SUMMARY = "Peak RSS of the face pipeline per detector, INT8 against fp32"
#: the docs/benchmarks.md sections it writes
SECTIONS = ("face-rss",)

#: A measured lever, not a default: glibc's allocator with a fixed mmap threshold (its dynamic one rises to the
#: largest block freed, so the activations of big pyramid levels then come from the heap and stay there).
MMAP_LEVER = {"MALLOC_MMAP_THRESHOLD_": "131072"}
MMAP_LABEL = "glibc mmap threshold fixed at 128 KiB"

DETECTORS = {
    "MTCNN": "mtcnn",
    "BlazeFace full range tiled": "blazeface-full-tiled",
    "BlazeFace full range": "blazeface-full",
}


def measure(target: str, photos: int, repeats: int, progress) -> dict:
    """Peak RSS per pipeline: the fp32 and INT8 folders (each with BlazeFace full range added), every detector."""
    fp32_dir = build_fp32(CACHE, progress)
    int8_dir, _ = build_int8(fp32_dir, load_profile(target), CACHE, CALIBRATION, progress)
    fp32, int8 = with_blazeface(fp32_dir, progress), with_blazeface(int8_dir, progress)
    npz = CACHE / "face-rss-photos.npz"
    chosen = [rgb for _name, rgb in eval_photos()[:photos]]
    np.savez(npz, **{f"p{i:03d}": p for i, p in enumerate(chosen)})
    variants: dict[str, tuple[list[str], dict[str, str] | None]] = {"baseline": (["baseline"], None)}
    for label, detector in DETECTORS.items():
        for precision, folder in (("fp32", fp32), (f"INT8 ({target})", int8)):
            variants[f"{precision}, {label}"] = (["pipeline", "--folder", str(folder), "--detector", detector], None)
    for precision, folder in (("fp32", fp32), (f"INT8 ({target})", int8)):
        args = ["pipeline", "--folder", str(folder), "--detector", "mtcnn"]
        variants[f"{precision}, MTCNN, {MMAP_LABEL}"] = (args, MMAP_LEVER)
    rows = {}
    for name, (args, env) in variants.items():
        progress(f"peak RSS: {name} ({repeats} processes)")
        runs = [rss_child(args, npz, 1, env) for _ in range(repeats)]
        runs.sort(key=lambda r: r["vmhwm_kib"])
        median = runs[len(runs) // 2]
        rows[name] = {
            "faces": median["faces"],
            "vmhwm_kib": median["vmhwm_kib"],
            "runs_kib": [r["vmhwm_kib"] for r in runs],
            "rss_file_kib": median["rss_file_kib"],
            "run_cpu_s": sorted(r["run_cpu_s"] for r in runs)[len(runs) // 2],
            "resident_files_kib": median["resident_files_kib"],
        }
    return {
        "target": target,
        "photos": len(chosen),
        "repeats": repeats,
        "rows": rows,
        "fp32_model_kib": model_kib(fp32),
    }


#: The files of a face folder that hold weights.
MODEL_SUFFIXES = (".onnx", ".ort", ".tflite", ".npz")


def model_kib(folder: Path) -> int:
    """Every model file of ``folder`` together, KiB: more than any one pipeline of it loads."""
    return sum(p.stat().st_size for p in Path(folder).iterdir() if p.suffix in MODEL_SUFFIXES) // 1024


def markdown(result: dict, command: str, machine: str) -> str:
    rows, target = result["rows"], result["target"]
    base, base_files = rows["baseline"]["vmhwm_kib"], rows["baseline"]["rss_file_kib"]
    lines = [
        "## Peak RSS of the face pipeline per detector: INT8 vs fp32",
        "",
        f"`{command}` — {machine}",
        "",
        f"One fresh process per row loads the pipeline and runs it on the same {result['photos']} evaluation "
        f"photos, 1 thread (`benchmarks/harness/face_rss_child.py`: numpy, onnxruntime and `edge` only); VmHWM, median "
        f"of {result['repeats']} processes. INT8 = the {target} build (embedder INT8; MTCNN's nets as that "
        'build ships them; BlazeFace fp32, as `convert blazeface` adds it). "Files": the pages of mapped files '
        "resident at the process's end (RssFile: the libraries' code and read-only data it touched, which no "
        "smaller model removes), a part of the peak; the kernel maps a faulting page's neighbours too when they are "
        "cached, so these move by several MiB between runs (not between the rows of one run).",
        "",
        "| pipeline | faces found | peak RSS MiB | above baseline MiB | files MiB | files above baseline MiB | CPU s |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, row in rows.items():
        lines.append(
            f"| {name} | {row['faces']} | {row['vmhwm_kib'] / 1024:.1f} | {(row['vmhwm_kib'] - base) / 1024:.1f} | "
            f"{row['rss_file_kib'] / 1024:.1f} | {(row['rss_file_kib'] - base_files) / 1024:.1f} | "
            f"{row['run_cpu_s']:.2f} |"
        )
    lines += ["", f"Goal (issue #13): INT8 pipeline peak RSS ≤ {RSS_RATIO_GOAL}× fp32's."]
    lines += goal_lines(rows, target)
    lines += weight_bound_lines(rows, result.get("fp32_model_kib"))
    lines += lever_lines(rows, target)
    lines += resident_file_lines(rows, target)
    return "\n".join(lines)


def goal_lines(rows: dict, target: str) -> list[str]:
    """Per detector: INT8 against fp32 and the goal, and the floor the imports and the libraries' pages set."""
    base, base_files = rows["baseline"]["vmhwm_kib"], rows["baseline"]["rss_file_kib"]
    lines = []
    for label in DETECTORS:
        fp32, int8 = rows[f"fp32, {label}"]["vmhwm_kib"], rows[f"INT8 ({target}), {label}"]["vmhwm_kib"]
        ratio, above = int8 / fp32, (int8 - base) / max(fp32 - base, 1)
        verdict = "met" if ratio <= RSS_RATIO_GOAL else "**not met**"
        figures = f"{int8 / 1024:.1f} / {fp32 / 1024:.1f} MiB = {ratio:.3f}×"
        allowed = RSS_RATIO_GOAL * fp32 - base  # what the INT8 pipeline may add to the process floor
        files = rows[f"INT8 ({target}), {label}"]["rss_file_kib"] - base_files
        floor = (base + files) / fp32
        reach = "out of reach with these libraries" if floor > RSS_RATIO_GOAL else "within reach"
        lines.append(
            f"- {label}: {figures} — {verdict} (above the baseline: {above:.3f}×). The floor (imports and photos, "
            f"no model) is {base / fp32:.3f}× of fp32's peak: the goal leaves the INT8 models and their sessions "
            f"{allowed / 1024:.1f} MiB; they take {(int8 - base) / 1024:.1f} MiB, {files / 1024:.1f} MiB of it "
            f"the libraries' pages the run touched. With no memory at all for its models and their arenas, the INT8 "
            f"pipeline would still be {floor:.3f}× fp32's peak: the goal is {reach}."
        )
    return lines


def weight_bound_lines(rows: dict, weights: int | None) -> list[str]:
    """The most INT8 weights could save: the folder's model files in a quarter of the bytes, against each peak."""
    if not weights:
        return []
    saved = 0.75 * weights  # int8 weights take a quarter of fp32's bytes
    peaks = {label: rows[f"fp32, {label}"]["vmhwm_kib"] for label in DETECTORS}
    best = ", ".join(f"{label} {(peak - saved) / peak:.3f}×" for label, peak in peaks.items())
    return [
        f"- What INT8 weights can save at most: every model file of the fp32 folder together is "
        f"{weights / 1024:.1f} MiB; held once, in a quarter of the bytes, they would save {saved / 1024:.1f} MiB, "
        f"so even with every network INT8 a pipeline stays at or above {best} of its fp32 peak (the goal: "
        f"{RSS_RATIO_GOAL}×). The rest of the peak (Python, numpy, OpenCV, the runtimes, the photos, the "
        "activations) is the same at either precision."
    ]


def lever_lines(rows: dict, target: str) -> list[str]:
    """MTCNN with glibc's mmap threshold fixed: the memory it saves and the CPU time it costs."""
    lever = []
    for precision in ("fp32", f"INT8 ({target})"):
        plain, fixed = rows[f"{precision}, MTCNN"], rows[f"{precision}, MTCNN, {MMAP_LABEL}"]
        lever.append(
            f"{precision} {plain['vmhwm_kib'] / 1024:.1f} → {fixed['vmhwm_kib'] / 1024:.1f} MiB at "
            f"{fixed['run_cpu_s'] / max(plain['run_cpu_s'], 1e-9):.2f}× the CPU time"
        )
    ratio = rows[f"INT8 ({target}), MTCNN, {MMAP_LABEL}"]["vmhwm_kib"] / rows[f"fp32, MTCNN, {MMAP_LABEL}"]["vmhwm_kib"]
    return [
        f"- A lever measured, not taken: with {MMAP_LABEL} (`{' '.join(f'{k}={v}' for k, v in MMAP_LEVER.items())}`; "
        "glibc's dynamic threshold otherwise rises to the largest block freed, and MTCNN's big pyramid levels are "
        f"then served from a heap that keeps them), MTCNN's peak goes {'; '.join(lever)} (every large block "
        f"mapped and faulted in afresh); INT8 / fp32 {ratio:.3f}×. No profile sets it."
    ]


def resident_file_lines(rows: dict, target: str) -> list[str]:
    """The files with the most resident pages in the INT8 process of the last detector."""
    label = next(reversed(DETECTORS))
    biggest = rows[f"INT8 ({target}), {label}"]["resident_files_kib"]
    if not biggest:
        return []
    named = ", ".join(f"`{name}` {kib / 1024:.1f}" for name, kib in biggest)
    return [
        f"- The files with the most resident pages at the end of the INT8 {label} process "
        f"(MiB, baseline's share included): {named}."
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="rpi4", help="profile of the INT8 build (default rpi4)")
    parser.add_argument("--photos", type=int, default=12, help="evaluation photos each process runs on (default 12)")
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes per row, median reported (default 3)")
    parser.add_argument("--quick", action="store_true", help="1 process per row, 3 photos; print only")
    args = parser.parse_args(argv)
    photos, repeats = (3, 1) if args.quick else (args.photos, args.repeats)
    if photos < 1 or repeats < 1:
        parser.error("--photos and --repeats must be at least 1")

    def progress(line: str) -> None:
        print(f"[face-rss] {line}", file=sys.stderr, flush=True)

    command = f".venv/bin/python -m benchmarks run face_rss --photos {photos} --repeats {repeats}"
    machine = machine_line()
    result = measure(args.target, photos, repeats, progress)
    (CACHE / "face-rss.json").write_text(json.dumps(result, indent=2), encoding="utf-8")
    text = markdown(result, command, machine)
    print(text)
    if not args.quick:
        print(f"wrote {write_section('face-rss', text)}", file=sys.stderr)
    return 0
