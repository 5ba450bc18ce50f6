"""Levers on the Pi frame budget that were measured and not taken: what each would save, and what it costs.

Issue #13's frame budget on emulated Cortex-A72 (section ``arm-frame``: BlazeFace full range on LiteRT, the rpi4
INT8 build, against 150 M instructions a frame). This measures two levers beyond what ships:

* **the letterbox's resampler** (``scripts/arm/run_letterbox.py``): edge/face's adaptive average pooling
  against cheaper OpenCV resamplers; executed instructions per frame on arm_frame's frame (grace_hopper
  letterboxed to 640x480, one thread), and the faces BlazeFace full range (LiteRT, whole frame, MediaPipe's
  0.6) finds with each on the evaluation set (21 images, 54 annotated faces; found = IoU >= 0.3 one to one,
  as ``benchmarks/detector_quality.py``);
* **fp16 inference on the Pi 5** (Cortex-A76 has Armv8.2 half-precision arithmetic): the same ``.tflite`` with
  the model metadata ``reduced_precision_support = "fp16accfp16"``, which makes LiteRT's XNNPACK delegate run
  in fp16 where the core can; steady instructions per inference (``scripts/arm/run_model.py``) and how far its
  outputs move from fp32's on the emulated core.

    .venv/bin/python -m benchmarks run arm_frame_levers [--cpus cortex-a72,cortex-a76] [--write]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import numpy as np

from benchmarks.harness.arm_frames import frame_files
from benchmarks.harness.report import say
from converters.arm.cost import DEFAULT_PLUGIN, build_plugin, count_instructions
from converters.arm.guest import DEFAULT_CACHE, prepare_guest
from converters.face.blazeface import FULL_RANGE, fetch_blazeface

NAME = "arm_frame_levers"
SUMMARY = "Levers on the Pi frame budget, measured and not taken: what each saves and costs"
#: the docs/benchmarks.md sections it writes
SECTIONS = ("arm-frame-levers",)

ARM = Path(__file__).resolve().parent.parent / "scripts" / "arm"
LETTERBOX_SCRIPT = ARM / "run_letterbox.py"


def _guest_script(path: Path) -> ModuleType:
    """A script of scripts/arm (written for the guest, not a package) loaded as a module."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: The letterbox variants, as the guest script runs them (the first is today's).
RESAMPLERS = _guest_script(LETTERBOX_SCRIPT).RESAMPLERS
MODEL_SCRIPT = ARM / "run_model.py"
FRAMES = 3
#: TFLite's model metadata key and the value that allows fp16 inference with fp16 accumulation.
FP16_KEY, FP16_VALUE = "reduced_precision_support", "fp16accfp16"
#: A difference of instruction counts below this share is not called a saving.
NOISE = 0.01


def with_fp16_hint(model: Path, out: Path) -> Path:
    """A copy of the ``.tflite`` ``model`` carrying the fp16 metadata (the flatbuffer rebuilt by LiteRT's schema)."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema

    tree = schema.ModelT.InitFromPackedBuf(bytearray(model.read_bytes()), 0)
    buffer = schema.BufferT()
    buffer.data = list(FP16_VALUE.encode())
    tree.buffers.append(buffer)
    entry = schema.MetadataT()
    entry.name, entry.buffer = FP16_KEY, len(tree.buffers) - 1
    tree.metadata = [*(tree.metadata or []), entry]
    builder = flatbuffers.Builder(1024)
    builder.Finish(tree.Pack(builder), file_identifier=b"TFL3")
    out.write_bytes(builder.Output())
    return out


def letterbox_counts(guest, frame: Path) -> dict[str, float]:
    """Instructions per frame of each resampler (region total / frames, after a warm-up call)."""
    args = ["--frame", str(frame), "--frames", str(FRAMES), "--mark"]
    run = count_instructions(guest, LETTERBOX_SCRIPT, args, DEFAULT_PLUGIN)
    return {name: run.regions[k].total / FRAMES for k, name in enumerate(RESAMPLERS, start=1)}


def inference_count(guest, model: Path, tensor: Path, save: Path) -> float:
    """Steady instructions of one inference (run_model.py's region 2 over its runs after the first)."""
    runs = 4
    args = ["--model", str(model), "--runs", str(runs), "--mark", "--input", str(tensor), "--save", str(save)]
    return count_instructions(guest, MODEL_SCRIPT, args, DEFAULT_PLUGIN).regions[2].total / (runs - 1)


def faces_found(model: Path) -> dict[str, tuple[int, int, int]]:
    """(found, missed, false) of BlazeFace full range on the whole evaluation photos with each resampler."""
    from converters.face.boxes import match_boxes
    from converters.face.facedata import make_eval_images
    from edge.face.detect_blazeface import BlazeFaceDetector, weighted_nms

    images = make_eval_images(0)
    result = {}
    with BlazeFaceDetector(model, threads=1) as det:
        for name, letterbox in RESAMPLERS.items():
            found = missed = false = 0
            for image in images:
                h, w = image.rgb.shape[:2]
                tensor, place = letterbox(image.rgb, det.spec.size)
                boxes, _, _ = weighted_nms(*det.decode_window(tensor, place, (0, h, 0, w)), det.nms_iou)
                truth = [f.box for f in image.faces]
                matched = match_boxes(truth, [tuple(map(float, b)) for b in boxes])
                found += len(matched)
                missed += len(truth) - len(matched)
                false += len(boxes) - len(matched)
            result[name] = (found, missed, false)
    return result


HEAD = """## Levers on the Pi frame budget, measured and not taken

`benchmarks/arm_frame_levers.py`. Section `arm-frame` counts the frame against issue #13's budgets (Cortex-A72:
150 M instructions a 640x480 one-face frame); these are levers measured beyond what ships, so the choice is
made on numbers. Instructions are counted by the TCG plugin on emulated cores (the host's CPU features do not
enter them), one thread, on arm_frame's frame (grace_hopper letterboxed to 640x480); faces on the evaluation
set's 21 images (54 annotated faces) with BlazeFace full range on LiteRT, whole frame, MediaPipe's 0.6, on this
host. Machine: {machine}.

**The letterbox's resampler** (`scripts/arm/run_letterbox.py`, per frame = region total / {frames} after a
warm-up call; the whole letterbox, uint8 frame in, the network's [-1, 1] float32 square out):
"""


def decision(counts: dict[str, float], faces: dict[str, tuple[int, int, int]], fp16: dict) -> str:
    """What the numbers say: the cheaper resamplers that keep every face, and whether fp16 saves anything."""
    today = next(iter(RESAMPLERS))
    keep = [n for n in RESAMPLERS if counts[n] < counts[today] and faces[n][0] >= faces[today][0]]
    lines = [
        "Cheaper than today's letterbox without finding fewer evaluation faces: "
        + (", ".join(keep) if keep else "none")
        + ". Whether a saving above would bring the A72 frame within its budget is read against section `arm-frame`."
    ]
    saving = {cpu: plain - half for cpu, (plain, half, _) in fp16.items() if half < (1 - NOISE) * plain}
    lines += [f"fp16 saves {s / 1e6:.2f} M instructions an inference on {cpu}." for cpu, s in saving.items()]
    if not saving:
        lines.append(f"fp16 saves nothing beyond {NOISE:.0%} on any core counted.")
    return " ".join(lines)


def letterbox_table(counts: dict[str, dict[str, float]], faces: dict[str, tuple[int, int, int]]) -> str:
    cpus = list(counts)
    columns = ["resampler", *(f"M instr. {c}" for c in cpus), "saved a frame vs today", "found", "missed", "false"]
    lines = ["| " + " | ".join(columns) + " |", "|---|" + "---:|" * (len(cpus) + 4)]
    today = next(iter(RESAMPLERS))
    for name in RESAMPLERS:
        per = " | ".join(f"{counts[c][name] / 1e6:.2f}" for c in cpus)
        saved = (counts[cpus[0]][today] - counts[cpus[0]][name]) / 1e6
        found, missed, false = faces[name]
        lines.append(f"| {name} | {per} | {saved:+.2f} M ({cpus[0]}) | {found} | {missed} | {false} |")
    lines.append("")
    for name in list(RESAMPLERS)[1:]:
        saved = (counts[cpus[0]][today] - counts[cpus[0]][name]) / 1e6
        lost = faces[today][0] - faces[name][0]
        cost = f"finds {lost} face{'s' * (lost != 1)} fewer" if lost > 0 else "finds as many faces or more"
        verb = "saves" if saved > 0 else "costs"
        lines.append(f"- {name}: {verb} {abs(saved):.2f} M instructions a frame on {cpus[0]} and {cost} than today's.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpus", default="cortex-a72,cortex-a76")
    parser.add_argument("--write", action="store_true", help="write the 'arm-frame-levers' section")
    args = parser.parse_args(argv)
    cpus = [c.strip() for c in args.cpus.split(",") if c.strip()]
    build_plugin()
    work = DEFAULT_CACHE / "frame-levers"
    work.mkdir(parents=True, exist_ok=True)
    frame, _ = frame_files(work)
    model = fetch_blazeface(variant=FULL_RANGE)
    hinted = with_fp16_hint(model, work / f"{model.stem}.fp16-hint.tflite")
    tensor = work / "frame-letterboxed.npy"  # the network's input for the frame, as edge/face makes it
    np.save(tensor, RESAMPLERS["area (edge/face today)"](np.load(frame), 192)[0])
    say("faces found with each resampler (host)")
    faces = faces_found(model)
    counts: dict[str, dict[str, float]] = {}
    fp16: dict[str, tuple[float, float, float]] = {}
    for cpu in cpus:
        guest = prepare_guest(cpu, progress=say)
        say(f"counting the resamplers on {cpu}")
        counts[cpu] = letterbox_counts(guest, frame)
        say(f"counting BlazeFace fp32 and fp16-hinted on {cpu}")
        plain = inference_count(guest, model, tensor, work / f"out-fp32-{cpu}.npz")
        half = inference_count(guest, hinted, tensor, work / f"out-fp16-{cpu}.npz")
        with np.load(work / f"out-fp32-{cpu}.npz") as a, np.load(work / f"out-fp16-{cpu}.npz") as b:
            moved = max(float(np.abs(a[k].astype(np.float64) - b[k]).max() / np.abs(a[k]).max()) for k in a.files)
        fp16[cpu] = (plain, half, moved)
    text = letterbox_table(counts, faces)
    fp16_lines = [
        "",
        f'**fp16 inference** (`{FP16_KEY} = "{FP16_VALUE}"` added to `{model.name}`; steady instructions of one',
        'inference, `scripts/arm/run_model.py`, on the frame\'s letterboxed input; "outputs moved": the largest',
        "difference between the two files' raw outputs on that core, over the largest fp32 value of that output):",
        "",
        "| core | fp32 M instr. | fp16-hinted M instr. | hinted / fp32 | outputs moved |",
        "|---|---:|---:|---:|---:|",
    ]
    fp16_lines += [f"| {c} | {p / 1e6:.2f} | {h / 1e6:.2f} | {h / p:.3f}x | {m:.2%} |" for c, (p, h, m) in fp16.items()]
    fp16_lines += ["", decision(counts[cpus[0]], faces, fp16)]
    text += "\n" + "\n".join(fp16_lines)
    print(text)
    if args.write:
        from benchmarks.harness.report import machine_line, write_section

        command = "python -m benchmarks run arm_frame_levers " + " ".join(argv if argv is not None else sys.argv[1:])
        head = HEAD.format(machine=machine_line(), frames=FRAMES)
        write_section("arm-frame-levers", head + "\n" + text + f"\n\n`{command}`")
    return 0
