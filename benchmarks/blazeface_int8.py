"""Static INT8 BlazeFace full range: does it find the faces the fp32 detector finds? (issue #13, "INT8 behind the
gate where it passes")

    .venv/bin/python -m benchmarks run blazeface_int8            # writes the ``blazeface-int8`` section
    .venv/bin/python -m benchmarks run blazeface_int8 --quick    # 50 calibration images, prints only

BlazeFace full range (mediapipe 0.10.21's ``.tflite``, our ONNX translation: ``export_blazeface_onnx``) is
quantized as the face build quantizes its embedder (``converters.quantize.quantize_model``, static QDQ with each
profile's ``[quant]`` settings: rpi4 uint8 activations, rpi5 int8; per-channel int8 weights), with its two output
heads (the last Conv of the box regressor and of the score logits, and the reshapes after them) kept in fp32,
calibrated on the face build's calibration images (``calibration_images``, letterboxed to 192x192 as the
detector feeds them) with min-max and with percentile ranges. Each candidate then runs unfused
(``Optimization.NONE``: QDQ as dequantize -> float op -> quantize, so the counts do not depend on this host's
INT8 kernels) on the evaluation set's 21 images with their 54 annotated faces, on the whole frame and tiled
(``DEFAULT_TILING``), at MediaPipe's threshold (0.6). Found / missed / false as in ``detector_quality.py``
(IoU >= 0.3, one to one). The gate this would need before an INT8 detector could ship: every face the fp32
detector finds is found, and no false detection is added.

One more candidate runs on LiteRT, where the Pi profiles run BlazeFace (``runtime.face_detector_runtime``):
MediaPipe's file keeps its weights sparse and fp16 (DENSIFY and DEQUANTIZE ops), which ai-edge-quantizer leaves
alone, so ``dense_copy`` first replaces those chains by the fp32 weights LiteRT computes from them; then
ai-edge-quantizer's ``static_wi8_ai8`` (int8 weights and activations, heads included: the recipe has no float
heads) calibrated on the same images with plain min-max (its default, a moving average of each image's range,
clipped the score logits' positive tail: no face found). It runs whole (quantized input, dequantized outputs).

Then what each would cost on the Pi's cores, accuracy aside (``--cpus``, default both; skipped by ``--quick``):
steady instructions of one inference of the network on arm_frame's frame (grace_hopper letterboxed to 640x480,
then to 192x192), counted by the TCG plugin on emulated Cortex-A72 and A76 (``scripts/arm/run_model.py``,
``edge.runtime``, one thread), against MediaPipe's sparse file on LiteRT, which the Pi profiles run. The
onnxruntime INT8 rows load the min-max QDQ model of the core's profile (rpi4 on the A72, rpi5 on the A76) with
onnxruntime's full graph optimisation, as a device would (fused QLinear kernels).

    .venv/bin/python -m benchmarks run blazeface_int8 --cpus cortex-a72   # one core only
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from benchmarks.harness.report import REPO, machine_line, write_section
from converters.face.blazeface import FULL_RANGE, export_blazeface_onnx, fetch_blazeface
from converters.face.boxes import match_boxes
from converters.face.facedata import calibration_images, make_eval_images
from converters.quantize import QuantMode, quantize_model, settings_for
from edge.errors import ConversionError
from edge.face.detect_blazeface import BlazeFaceDetector, letterbox_window
from edge.face.detect_mtcnn import integral_image
from edge.face.tiles import DEFAULT_TILING
from edge.profiles import CalibrationMethod, load_profile
from edge.runtime import Optimization, open_model

NAME = "blazeface_int8"
SUMMARY = "Static INT8 BlazeFace full range: faces found against fp32, and its cost on the Pi's cores"
#: the docs/benchmarks.md sections it writes
SECTIONS = ("blazeface-int8",)

CACHE = REPO / ".cache" / "bench"
MODEL_SCRIPT = REPO / "scripts" / "arm" / "run_model.py"
TARGETS = ("rpi4", "rpi5")
METHODS = (CalibrationMethod.MINMAX, CalibrationMethod.PERCENTILE)
PASSES = {"whole frame": None, "tiled": DEFAULT_TILING}
LITERT_INT8 = "INT8 LiteRT (ai-edge-quantizer static_wi8_ai8, min-max)"
#: The signature ``dense_copy`` gives the file (ai-edge-quantizer calibrates by signature) and its input's name.
SIGNATURE, SIGNATURE_INPUT = "serving_default", "input"
#: Each core's profile: whose QDQ settings its onnxruntime INT8 row runs.
CORE_PROFILES = {"cortex-a72": "rpi4", "cortex-a76": "rpi5"}
DEFAULT_CPUS = ",".join(CORE_PROFILES)
#: The dense copy's raw outputs may differ from the sparse file's by float rounding only (measured: 7e-5).
DENSE_TOLERANCE = 1e-3


def calibration_feeds(count: int, input_name: str) -> list[dict[str, np.ndarray]]:
    """The face build's calibration images, each letterboxed to the detector's 192x192 input as it feeds it."""
    feeds = []
    for _name, rgb in calibration_images(count):
        tensor, _ = letterbox_window(integral_image(rgb), (0, rgb.shape[0], 0, rgb.shape[1]), FULL_RANGE.input_shape[1])
        feeds.append({input_name: tensor})
    return feeds


class _QuantizedIoDetector(BlazeFaceDetector):
    """BlazeFace decoding (anchors, NMS, letterbox) of the fp32 file, the network a full-integer ``.tflite``:
    the letterboxed input quantized to its int8 grid, the outputs dequantized (``edge.runtime`` feeds as given)."""

    def __init__(self, fp32_model: Path, int8_model: Path, **kwargs) -> None:
        super().__init__(fp32_model, **kwargs)
        self._int8 = open_model(int8_model, threads=kwargs.get("threads", 1))

    def run_raw(self, tensor: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        spec = self._int8.inputs[0]
        scale, zero = spec.quantization or (1.0, 0)
        info = np.iinfo(spec.dtype)
        fed = np.clip(np.round(tensor / scale) + zero, info.min, info.max).astype(spec.dtype)
        out = self._int8.run({spec.name: fed})
        by_width = {}
        for o in self._int8.outputs:
            o_scale, o_zero = o.quantization or (1.0, 0)
            by_width[o.shape[-1]] = (out[o.name][0].astype(np.float32) - o_zero) * np.float32(o_scale)
        return by_width[16], by_width[1][:, 0]

    def close(self) -> None:
        self._int8.close()
        super().close()


def detections(model: Path, images, optimization: Optimization, int8_tflite: Path | None = None) -> dict:
    """Each pass's boxes on every image (``int8_tflite``: that file's network, ``model``'s decoding)."""
    out = {}
    for label, tiling in PASSES.items():
        kwargs = {"threads": 2, "tiling": tiling, "optimization": optimization}
        detector = (
            _QuantizedIoDetector(model, int8_tflite, **kwargs) if int8_tflite else BlazeFaceDetector(model, **kwargs)
        )
        with detector:
            out[label] = [[d.box for d in detector.detect(image.rgb)] for image in images]
    return out


def counts(boxes: list[list], images, reference: list[list] | None) -> dict:
    """Found, missed and false against the annotations; faces the reference found and these boxes did not."""
    found = false = lost = 0
    for got, image, ref in zip(boxes, images, reference or [None] * len(images), strict=True):
        truth = [f.box for f in image.faces]
        hit = {i for i, _, _ in match_boxes(truth, got)}
        found, false = found + len(hit), false + len(got) - len(hit)
        if ref is not None:
            lost += len({i for i, _, _ in match_boxes(truth, ref)} - hit)
    faces = sum(len(image.faces) for image in images)
    return {"found": found, "missed": faces - found, "false": false, "lost": lost}


def dense_copy(model: Path, out: Path) -> Path:
    """A copy of a ``.tflite`` whose weights are plain fp32 constants, with a ``serving_default`` signature.

    Every DEQUANTIZE of a constant, or of a DENSIFY of one (MediaPipe's sparse fp16 weights), becomes the fp32
    tensor LiteRT's reference kernels compute for it (read once with ``experimental_preserve_all_tensors``); the
    DENSIFY and DEQUANTIZE ops go, and the tensors and buffers no one uses any more are dropped and the rest
    renumbered. Other operators are untouched.
    """
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    tree = schema.ModelT.InitFromPackedBuf(bytearray(model.read_bytes()), 0)
    graph = tree.subgraphs[0]
    codes = [max(c.builtinCode, c.deprecatedBuiltinCode) for c in tree.operatorCodes]
    densify, dequantize = schema.BuiltinOperator.DENSIFY, schema.BuiltinOperator.DEQUANTIZE
    densified = {int(t) for op in graph.operators if codes[op.opcodeIndex] == densify for t in op.outputs}

    def constant(t: int) -> bool:
        data = tree.buffers[graph.tensors[t].buffer].data
        return data is not None and len(data) > 0

    weights = [
        op
        for op in graph.operators
        if codes[op.opcodeIndex] == dequantize and (int(op.inputs[0]) in densified or constant(int(op.inputs[0])))
    ]
    reference = Interpreter(
        model_path=str(model),
        experimental_preserve_all_tensors=True,
        experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
    )
    reference.allocate_tensors()
    entry = reference.get_input_details()[0]
    reference.set_tensor(entry["index"], np.zeros(entry["shape"], entry["dtype"]))
    reference.invoke()
    for op in weights:
        value = np.ascontiguousarray(reference.get_tensor(int(op.outputs[0])), np.float32)
        buffer = schema.BufferT()
        buffer.data = np.frombuffer(value.tobytes(), np.uint8)
        tree.buffers.append(buffer)
        tensor = graph.tensors[int(op.outputs[0])]
        tensor.buffer, tensor.type, tensor.sparsity = len(tree.buffers) - 1, schema.TensorType.FLOAT32, None
        tensor.shape = np.array(value.shape, np.int32)
    gone = {id(op) for op in weights}
    graph.operators = [op for op in graph.operators if id(op) not in gone and codes[op.opcodeIndex] != densify]
    _drop_unused(tree)
    tree.signatureDefs = [_signature(schema, graph)]
    builder = flatbuffers.Builder(1024)
    builder.Finish(tree.Pack(builder), file_identifier=b"TFL3")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(builder.Output())
    return out


def _drop_unused(tree) -> None:
    """Drop the tensors no operator (nor the graph's ends) uses and the buffers no tensor (nor metadata) uses,
    renumbering the rest everywhere they are named."""
    graph = tree.subgraphs[0]
    ends = [*graph.inputs, *graph.outputs]
    used = sorted({int(t) for op in graph.operators for t in [*op.inputs, *op.outputs] if t >= 0} | set(map(int, ends)))
    tensor_ids = {old: new for new, old in enumerate(used)}

    def renumber(ids) -> np.ndarray:
        return np.array([tensor_ids[int(t)] if t >= 0 else -1 for t in ids], np.int32)

    graph.tensors = [graph.tensors[t] for t in used]
    for op in graph.operators:
        op.inputs, op.outputs = renumber(op.inputs), renumber(op.outputs)
    graph.inputs, graph.outputs = renumber(graph.inputs), renumber(graph.outputs)
    metadata = tree.metadata or []
    kept = sorted({0} | {t.buffer for t in graph.tensors} | {m.buffer for m in metadata})
    buffer_ids = {old: new for new, old in enumerate(kept)}
    tree.buffers = [tree.buffers[b] for b in kept]
    for t in graph.tensors:
        t.buffer = buffer_ids[t.buffer]
    for m in metadata:
        m.buffer = buffer_ids[m.buffer]


def _signature(schema, graph):
    """A ``serving_default`` signature over the graph's one input and its outputs (``output_0``, ...)."""

    def tensor_map(name: str, index: int):
        entry = schema.TensorMapT()
        entry.name, entry.tensorIndex = name, int(index)
        return entry

    signature = schema.SignatureDefT()
    signature.signatureKey, signature.subgraphIndex = SIGNATURE, 0
    signature.inputs = [tensor_map(SIGNATURE_INPUT, graph.inputs[0])]
    signature.outputs = [tensor_map(f"output_{k}", t) for k, t in enumerate(graph.outputs)]
    return signature


def check_dense(source: Path, dense: Path, tensor: np.ndarray) -> float:
    """The largest raw-output difference between ``source`` and its ``dense_copy`` on one input.

    Raises:
        ConversionError: above ``DENSE_TOLERANCE``, naming both files.
    """
    with open_model(source, threads=1) as a, open_model(dense, threads=1) as b:
        one, two = a.run({a.inputs[0].name: tensor}), b.run({b.inputs[0].name: tensor})
    by_shape = {v.shape: v for v in two.values()}
    worst = max(float(np.abs(v - by_shape[v.shape]).max()) for v in one.values())
    if worst > DENSE_TOLERANCE:
        raise ConversionError(f"{dense}: raw outputs {worst:.3g} away from {source}'s; expected <= {DENSE_TOLERANCE}")
    return worst


def litert_int8(dense: Path, out: Path, samples: list[np.ndarray]) -> Path:
    """ai-edge-quantizer's ``static_wi8_ai8`` of ``dense_copy``'s file, calibrated on ``samples`` with plain min-max.

    (``Quantizer.calibrate`` has no way to pass the range update; its ``Calibrator`` has, given the recipe.)
    """
    from ai_edge_quantizer import calibrator, quantizer, recipe, recipe_manager

    def widest(seen: dict, new: dict) -> dict:
        if not seen:
            return new
        return {"min": np.minimum(seen["min"], new["min"]), "max": np.maximum(seen["max"], new["max"])}

    plan = recipe_manager.RecipeManager()
    plan.load_quantization_recipe(recipe.static_wi8_ai8())
    ranges = calibrator.Calibrator(dense.read_bytes(), num_threads=2, qsv_update_func=widest)
    ranges.calibrate({SIGNATURE: [{SIGNATURE_INPUT: s} for s in samples]}, plan)
    tool = quantizer.Quantizer(str(dense))
    tool.load_quantization_recipe(plan.get_quantization_recipe())
    tool.quantize(ranges.get_model_qsvs()).export_model(str(out), overwrite=True)
    return out


def measure(calibration: int) -> dict:
    """Faces found by fp32 and every INT8 candidate; the candidates' files stay in ``CACHE / "blazeface-int8"``."""
    images = make_eval_images(0)
    work = CACHE / "blazeface-int8"
    export = export_blazeface_onnx(CACHE / "blazeface", FULL_RANGE)
    with open_model(export.onnx, threads=1) as model:
        input_name = model.inputs[0].name  # the translation's one input
    feeds = calibration_feeds(calibration, input_name)
    fp32 = detections(export.onnx, images, Optimization.ALL)
    rows = [{"model": "fp32", **{p: counts(fp32[p], images, None) for p in PASSES}}]
    files = {"onnxruntime fp32 (the ONNX translation)": export.onnx}
    for target in TARGETS:
        profile = load_profile(target)
        for method in METHODS:
            settings = settings_for(profile, QuantMode.STATIC_QDQ, calibration=method, float_heads=True)
            out = quantize_model(export.onnx, work / f"{target}-{method.value}.onnx", settings, feeds)
            got = detections(out, images, Optimization.NONE)
            label = f"INT8 {target} ({settings.activations.value} activations, {method.value})"
            rows.append({"model": label, **{p: counts(got[p], images, fp32[p]) for p in PASSES}})
            if method is CalibrationMethod.MINMAX:
                files[f"onnxruntime INT8 {target} (min-max)"] = out
    sparse = fetch_blazeface(variant=FULL_RANGE)
    dense = dense_copy(sparse, work / "full_range_dense.tflite")
    check_dense(sparse, dense, feeds[0][input_name])
    int8 = litert_int8(dense, work / "full_range_int8.tflite", [f[input_name] for f in feeds])
    got = detections(export.onnx, images, Optimization.NONE, int8_tflite=int8)
    rows.append({"model": LITERT_INT8, **{p: counts(got[p], images, fp32[p]) for p in PASSES}})
    files = {"LiteRT fp32 (MediaPipe's sparse file, shipped)": sparse, "LiteRT fp32, dense copy": dense,
             "LiteRT INT8 (static_wi8_ai8)": int8, **files}  # fmt: skip
    faces = sum(len(image.faces) for image in images)
    return {
        "machine": machine_line(),
        "images": len(images),
        "faces": faces,
        "calibration": calibration,
        "rows": rows,
        "files": {k: str(v) for k, v in files.items()},
    }


def arm_costs(files: dict[str, str], cpus: list[str]) -> dict[str, dict[str, list[int]]]:
    """Per core, per file: [instructions, SDOT + UDOT] of one steady inference on arm_frame's frame; an onnxruntime
    INT8 file only on the core its profile is for."""
    from benchmarks.harness.arm_frames import frame_files
    from converters.arm.cost import DEFAULT_PLUGIN, build_plugin, count_instructions
    from converters.arm.guest import prepare_guest
    from edge.face.detect_blazeface import letterbox

    build_plugin()
    work = CACHE / "blazeface-int8"
    frame, _ = frame_files(work)
    tensor = letterbox(np.load(frame), FULL_RANGE.input_shape[1])[0]
    feeds = {"float": work / "frame-input.npy", "int8": work / "frame-input-int8.npy"}
    np.save(feeds["float"], tensor)
    with open_model(Path(files["LiteRT INT8 (static_wi8_ai8)"]), threads=1) as model:
        scale, zero = model.inputs[0].quantization or (1.0, 0)
    np.save(feeds["int8"], np.clip(np.round(tensor / scale) + zero, -128, 127).astype(np.int8))
    runs, result = 4, {}
    for cpu in cpus:
        guest = prepare_guest(cpu)
        result[cpu] = {}
        for label, path in files.items():
            if "onnxruntime INT8" in label and CORE_PROFILES.get(cpu) not in label:
                continue
            feed = feeds["int8" if "LiteRT INT8" in label else "float"]
            args = ["--model", path, "--runs", str(runs), "--mark", "--input", str(feed)]
            region = count_instructions(guest, MODEL_SCRIPT, args, DEFAULT_PLUGIN).regions[2]
            result[cpu][label] = [region.total // (runs - 1), (region.sdot + region.udot) // (runs - 1)]
            print(f"  {cpu} {label}: {result[cpu][label][0] / 1e6:.2f} M", flush=True)
    return result


def markdown(result: dict, command: str) -> str:
    lines = [
        "## Static INT8 BlazeFace full range: faces found against fp32, and its cost on the Pi's cores",
        "",
        f"`{command}` — {result['machine']}",
        "",
        "BlazeFace full range quantized as the face build quantizes its embedder (static QDQ, the profile's "
        "`[quant]` settings, per-channel int8 weights; the two output heads kept fp32), calibrated on "
        f"{result['calibration']} of the face build's calibration images letterboxed to 192×192, then run unfused "
        "(QDQ as dequantize → float op → quantize: host-independent) on the evaluation set's "
        f"{result['images']} images ({result['faces']} annotated faces), at MediaPipe's 0.6. `lost` = faces the fp32 "
        "detector finds and this one misses. The gate an INT8 detector would need: nothing lost, no false "
        "detection added. The LiteRT row: ai-edge-quantizer's `static_wi8_ai8` (output heads int8 too) of the "
        "sparse file's dense fp32 copy, same images, min-max ranges, run whole on LiteRT (XNNPACK) on this host.",
        "",
        "| model | " + " | ".join(f"{p}: found / missed / false / lost" for p in PASSES) + " | gate |",
        "|---|" + "---:|" * len(PASSES) + "---|",
    ]
    base, passed = result["rows"][0], []
    for row in result["rows"]:
        cells = [f"{row[p]['found']} / {row[p]['missed']} / {row[p]['false']} / {row[p]['lost']}" for p in PASSES]
        ok = all(row[p]["lost"] == 0 and row[p]["false"] <= base[p]["false"] for p in PASSES)
        if row is not base and ok:
            passed.append(row["model"])
        verdict = "" if row is base else ("passes" if ok else "**fails**")
        lines.append(f"| {row['model']} | " + " | ".join(cells) + f" | {verdict} |")
    lines.append("")
    if passed:
        lines.append(f"Passing: {', '.join(passed)}. No face build quantizes BlazeFace yet; the folders ship it fp32.")
    else:
        lines.append(
            "None passes, so no INT8 BlazeFace ships: the face folders keep the fp32 detector (models.json "
            "`detector.blazeface_full` fp32), and the ARM frame counts (`arm-frame`) run it in fp32."
        )
    if result.get("arm"):
        lines += ["", *cost_lines(result["arm"])]
    return "\n".join(lines) + "\n"


SHIPPED = "LiteRT fp32 (MediaPipe's sparse file, shipped)"


def cost_lines(arm: dict[str, dict[str, list[int]]]) -> list[str]:
    """The cost table: each file's instructions per inference on each core, against the shipped file's."""
    lines = [
        "**What each would cost on the Pi's cores**, accuracy aside: steady instructions of one inference of the "
        "network on arm_frame's frame (grace_hopper letterboxed to 640×480, then to 192×192), TCG plugin on the "
        "emulated core, one thread, `edge.runtime` (`scripts/arm/run_model.py`); the onnxruntime INT8 file of "
        "the core's own profile (rpi4: A72, rpi5: A76), min-max, loaded with full graph optimisation (fused "
        "QLinear kernels, as on a device). Instruction counts: the host's CPU features do not enter them.",
        "",
        "| network | core | M instr. / inference | × shipped | SDOT+UDOT / inference |",
        "|---|---|---:|---:|---:|",
    ]
    verdicts = []
    for cpu, costs in arm.items():
        shipped = costs[SHIPPED][0]
        for label, (total, dots) in sorted(costs.items(), key=lambda kv: kv[1][0]):
            lines.append(f"| {label} | {cpu} | {total / 1e6:.2f} | {total / shipped:.2f}× | {dots:,} |")
        best, (total, _) = min(((k, v) for k, v in costs.items() if k != SHIPPED), key=lambda kv: kv[1][0])
        if total < shipped:
            verdicts.append(
                f"- {cpu}: the cheapest other network, {best}, saves {(shipped - total) / 1e6:.1f} M instructions a "
                "frame against the shipped file (had it passed the gate above)."
            )
        else:
            verdicts.append(
                f"- {cpu}: nothing is cheaper than the shipped file (next: {best}, {total / shipped:.2f}×)."
            )
    lines += ["", *verdicts]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calibration", type=int, default=200, help="calibration images (default 200)")
    parser.add_argument("--quick", action="store_true", help="50 calibration images, no ARM counts; writes no docs")
    parser.add_argument(
        "--cpus", default=DEFAULT_CPUS, help=f"emulated cores to count on (default {DEFAULT_CPUS}; '' none)"
    )
    args = parser.parse_args(argv)
    calibration = 50 if args.quick else args.calibration
    cpus = [] if args.quick else [c.strip() for c in args.cpus.split(",") if c.strip()]
    unknown = sorted(set(cpus) - set(CORE_PROFILES))
    if unknown:
        parser.error(f"--cpus {','.join(unknown)}: expected some of {', '.join(CORE_PROFILES)}")
    result = measure(calibration)
    if cpus:
        result["arm"] = arm_costs(result["files"], cpus)
    command = ".venv/bin/python -m benchmarks run blazeface_int8"
    command += f" --calibration {calibration}" if calibration != 200 else ""
    command += f" --cpus '{','.join(cpus)}'" if ",".join(cpus) != DEFAULT_CPUS else ""
    md = markdown(result, command)
    print(md)
    if not args.quick:
        write_section("blazeface-int8", md)
    return 0
