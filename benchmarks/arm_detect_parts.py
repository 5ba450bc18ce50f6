"""Where BlazeFace's detect stage goes on the Pi's cores: executed instructions of each part, before and after.

The whole-frame count (``benchmarks/arm_frame.py``, section ``arm-frame``) put BlazeFace full range's detect
stage on LiteRT at 69.5 M instructions a 640x480 frame on emulated Cortex-A72, the network alone 44.6 M.
This splits the stage (``scripts/arm/run_detect_parts.py``): integral image, letterbox (area resize),
network, decoding, NMS, for three codes of parts 1, 2 and 4 (``--code`` there): the first code, the integral
image (what a tiled frame runs) and now, on grace_hopper letterboxed to 640x480 (arm_frame's frame), one
thread, per frame = (run of 3 frames - run of 1 frame) / 2.

    .venv/bin/python -m benchmarks run arm_detect_parts [--cpus cortex-a72,cortex-a76] [--write]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks.harness.arm_frames import frame_files
from benchmarks.harness.report import say
from converters.arm.cost import DEFAULT_PLUGIN, build_plugin, count_instructions
from converters.arm.guest import DEFAULT_CACHE, prepare_guest
from converters.face.blazeface import FULL_RANGE, fetch_blazeface

NAME = "arm_detect_parts"
SUMMARY = "BlazeFace's detect stage in parts: instructions of each on emulated Pi cores"
#: the docs/benchmarks.md sections it writes
SECTIONS = ("arm-detect-parts",)

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "arm" / "run_detect_parts.py"
PARTS = {
    1: "integral image",
    2: "letterbox (area resize)",
    3: "network (LiteRT)",
    4: "scores + decoding",
    5: "weighted NMS + 5 points",
    6: "the parts together",
    7: "`detect()` as the pipeline calls it (current code)",
}


#: run_detect_parts.py's ``--code`` of each column
CODES = {"before": "before", "integral image": "integral", "now": "now"}


def per_frame(guest, model: Path, frame: Path, code: str) -> dict[int, float]:
    """Instructions per frame of each region: (3 frames - 1 frame) / 2."""
    totals = []
    for n in (1, 3):
        args = ["--model", str(model), "--frame", str(frame), "--frames", str(n), "--mark", "--code", code]
        run = count_instructions(guest, SCRIPT, args, DEFAULT_PLUGIN)
        totals.append({r: c.total for r, c in run.regions.items()})
    return {r: (totals[1][r] - totals[0][r]) / 2 for r in PARTS}


def table(counts: dict[str, dict[str, dict[int, float]]]) -> str:
    lines = [
        "| part | core | before (M instr.) | integral image (M instr.) | now (M instr.) | now / integral image |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for cpu, by in counts.items():
        for r, name in PARTS.items():
            b, i, n = (by[label][r] / 1e6 for label in CODES)
            ratio = f"{n / i:.2f}x" if i > 0.005 else ""
            lines.append(f"| {name} | {cpu} | {b:.2f} | {i:.2f} | {n:.2f} | {ratio} |" if r != 7 else
                         f"| {name} | {cpu} | | | {n:.2f} | |")  # fmt: skip
    return "\n".join(lines)


HEAD = """## BlazeFace's detect stage in parts on emulated Cortex-A72 / A76

BlazeFace full range on LiteRT (`face_detection_full_range_sparse.tflite`), grace_hopper letterboxed to
640x480 (arm_frame's frame, one face), one thread; executed instructions per frame of each part, counted by
the TCG plugin between region marks (`scripts/arm/run_detect_parts.py`), per frame = (3 frames - 1 frame) /
2. "before" runs the first integral image (numpy row-by-row cumulative sums), area resize (float64 column
cumsum) and decoding (every anchor decoded, then the score cut), copied into that script; "integral image"
is OpenCV's `integral` and four-corner integer box sums (whole rows taken first, then single values of
them), one float32 division per value (the float64 quotient's float32, bit for bit): what `detect` ran on
every frame until now, and still runs on a tiled frame (one integral image for the frame and its tiles);
"now" is what `edge/face` runs on a whole frame: no integral image; the frame widened to uint16, each
output row the sum of its window's input rows (taken whole), the result transposed so that the columns'
windows are whole rows too, summed the same way, transposed back and divided once (every sum exact: a
window holds at most 16 pixels here, 257 at most on this path). Both newer codes put the [-1, 1] mapping in
place and decode only the anchors that score. All three give bit-identical network inputs
(`tests/unit/test_mtcnn_nms.py`: `test_the_resize_equals_the_previous_code_bit_for_bit` and
`test_area_resize_of_a_whole_image_equals_the_integral_images_box_sums_bit_for_bit`) and the same
detections. Machine: {machine} (instruction counts of the emulated cores: the host's CPU features do not
enter them).
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpus", default="cortex-a72,cortex-a76")
    parser.add_argument("--write", action="store_true", help="write the 'arm-detect-parts' section")
    args = parser.parse_args(argv)
    build_plugin()
    work = DEFAULT_CACHE / "detect-parts"
    work.mkdir(parents=True, exist_ok=True)
    frame, _ = frame_files(work)
    model = fetch_blazeface(variant=FULL_RANGE)
    counts: dict[str, dict[str, dict[int, float]]] = {}
    for cpu in [c.strip() for c in args.cpus.split(",") if c.strip()]:
        guest = prepare_guest(cpu, progress=say)
        counts[cpu] = {}
        for label, code in CODES.items():
            say(f"counting {label} on {cpu}")
            counts[cpu][label] = per_frame(guest, model, frame, code)
    text = table(counts)
    print(text)
    if args.write:
        from benchmarks.harness.report import machine_line, write_section

        command = "python -m benchmarks run arm_detect_parts " + " ".join(argv if argv is not None else sys.argv[1:])
        write_section("arm-detect-parts", HEAD.format(machine=machine_line()) + "\n" + text + f"\n\n`{command}`")
    return 0
