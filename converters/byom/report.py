"""What ``convert model`` writes about a build: models.json (passed builds), report.json and report.md."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from converters.quantize import QuantMode
from converters.versions import library_versions
from edge import __version__
from edge.cpu import int8_kernels
from edge.face.models import MODELS_FILE, MODELS_SCHEMA_VERSION
from edge.profiles import Arch

if TYPE_CHECKING:
    from converters.byom.build import ModelBuild

#: The role models.json gives the user's model.
MODEL_ROLE = "model"
#: The licence recorded when ``--licence`` was not given: said explicitly, never guessed.
UNKNOWN_LICENCE = "unknown (user model)"


def licence_record(licence: str | None, flag: str) -> dict[str, str]:
    """``licence`` and ``licence_given_by`` of a user's model: as given with ``flag`` (e.g. ``"edge-deploy
    convert model --licence"``), or ``UNKNOWN_LICENCE`` given by nobody when the flag was absent or blank."""
    given = licence.strip() if licence else None
    if not given:
        return {"licence": UNKNOWN_LICENCE, "licence_given_by": f"nobody: no {flag.split()[-1]} given"}
    return {"licence": given, "licence_given_by": flag}


def _source(build: ModelBuild) -> dict:
    job = build.job
    return {
        "path": str(job.model),
        "sha256": build.source.sha256,
        "format": build.source.format,
        **licence_record(job.licence, "edge-deploy convert model --licence"),
    }


#: How the gate ran a quantized candidate (report "evaluated_as").
EVALUATED_AS_INT8 = (
    "the quantized .onnx with onnxruntime's graph optimisations off (ORT_DISABLE_ALL): QDQ runs as dequantize -> "
    "float op -> quantize, the target's integer arithmetic up to float rounding, whatever INT8 kernels the build "
    "host has; the shipped .ort is the same graph fused for the target"
)
EVALUATED_AS_DYNAMIC = (
    "the dynamic-INT8 .onnx with onnxruntime's graph optimisations off (ORT_DISABLE_ALL): activations are "
    "quantized at run time (DynamicQuantizeLinear) and MatMulInteger/ConvInteger accumulate in int32 with this "
    "host's integer kernels (not yet checked against an AVX2-only or an ARM host)"
)
EVALUATED_AS_WEIGHT_ONLY = (
    "the weight-only INT8 .onnx with onnxruntime's graph optimisations off (ORT_DISABLE_ALL): every weight "
    "MatMul is a MatMulNBits of 8-bit blocks at accuracy level 0, fp32 activations and arithmetic, so the "
    "figures are the same on any host; the shipped .ort is the same graph at the same level"
)
EVALUATED_AS_FP32 = (
    "the fp32 ONNX model with onnxruntime's default optimisations against the source (an ONNX source on "
    "onnxruntime too, a torch.export program in torch)"
)


def _evaluated_as(build: ModelBuild) -> str:
    if build.settings is None:
        return EVALUATED_AS_FP32
    return {QuantMode.DYNAMIC: EVALUATED_AS_DYNAMIC, QuantMode.INT8_WEIGHT_ONLY: EVALUATED_AS_WEIGHT_ONLY}.get(
        build.settings.mode, EVALUATED_AS_INT8
    )


def _gate(build: ModelBuild) -> dict:
    return {
        "task": build.job.task.value,
        "passed": build.passed,
        "failures": build.failures,
        "thresholds": build.job.thresholds.to_dict(),
        "figures": build.figures,
        "evaluated_as": _evaluated_as(build),
    }


def record(build: ModelBuild) -> dict:
    """The whole build as JSON-ready data (report.json, and ``--json``)."""
    job = build.job
    return {
        "tool": "edge-deploy",
        "tool_version": __version__,
        "versions": library_versions(),
        "target": job.profile.name,
        "precision": job.precision.value,
        "passed": build.passed,
        "out_dir": str(job.out_dir),
        "source": _source(build),
        "inputs": [{"name": s.name, "dtype": str(s.dtype), "shape": list(s.shape)} for s in build.inputs],
        "outputs": list(build.source.outputs),
        "files": build.files,
        "shipped": build.files[build.shipped]["file"] if build.shipped else None,
        "settings": build.settings.to_dict() if build.settings else None,
        "quant_ops": build.quant_ops,
        "calibration": build.calibration,
        "evaluation": build.evaluation,
        "gate": _gate(build),
        "target_runtime": build.target_runtime,
        "build_host_int8_kernels": int8_kernels().to_dict(),
        "seconds": build.seconds,
    }


def _int8_arithmetic(build: ModelBuild) -> str | None:
    if build.settings is None:
        return None
    if build.settings.mode is QuantMode.INT8_WEIGHT_ONLY:
        return (
            "weight-only: MatMulNBits (8-bit blocks) at accuracy level 0 computes in fp32 on the gate's host and "
            "on the device alike"
        )
    device = {
        Arch.X86_64: "x86: sessions on a CPU without VNNI get session.x64quantprecision=1 (edge.cpu)",
        Arch.AARCH64: "ARM: onnxruntime's NEON (or dot-product) integer kernels",
        Arch.WASM32: "browser: onnxruntime-web's wasm integer kernels",
    }[build.job.profile.cpu.arch]
    graph = "dynamic-INT8" if build.settings.mode is QuantMode.DYNAMIC else "QDQ"
    return f"gate: {graph} .onnx unfused (ORT_DISABLE_ALL), independent of the build host; device: {device}"


def write_models_json(build: ModelBuild, folder: Path) -> Path:
    """models.json in the face folders' schema (one entry, role "model") plus the task and gate figures."""
    info = build.files[build.shipped]
    entry = {
        "role": MODEL_ROLE,
        "file": info["file"],
        "format": "ort" if info["file"].endswith(".ort") else "onnx",
        "precision": build.job.precision.value,
        "sha256": info["sha256"],
        "size": info["size"],
        "source": _source(build),
    }
    data: dict[str, object] = {
        "schema_version": MODELS_SCHEMA_VERSION,
        "target": build.job.profile.name,
        "tool_version": __version__,
        "versions": library_versions(),
        "models": [entry],
        "task": build.job.task.value,
        "inputs": record(build)["inputs"],
        "gate": _gate(build),
    }
    arithmetic = _int8_arithmetic(build)
    if arithmetic:
        data["int8_arithmetic"] = arithmetic
    path = folder / MODELS_FILE
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return path


def _figure_lines(figures: dict) -> list[str]:
    lines = []
    if "embedding" in figures:
        e = figures["embedding"]
        lines.append(
            f"- embedding: cosine to the source mean {e['cosine_mean']:.5f}, min {e['cosine_min']:.5f}; nearest "
            f"neighbour agrees on {e['rank_agree']} of {e['samples']} ({e['rank_agreement']:.4f})"
        )
    if "classification" in figures:
        c = figures["classification"]
        agree = f"{c['top1_agree']} of {c['samples']} ({c['top1_agreement']:.4f})"
        lines.append(f"- classification: top-1 agrees on {agree}")
    for name, f in figures["outputs"].items():
        diff = f"max abs difference {f['max_abs']:.3g}, relative {f['max_rel']:.3g}"
        lines.append(f"- output `{name}` {f['shape']}: {diff}")
    for name, f in figures.get("fp32_copy", {}).get("outputs", {}).items():
        lines.append(f"- fp32 copy vs source, output `{name}`: max abs difference {f['max_abs']:.3g}")
    twin = figures.get("tflite")
    if twin and twin.get("variant") == "int8":
        lines += _int8_twin_lines(twin)
    elif twin:
        lines.append(
            f"- TFLite twin (LiteRT) vs fp32 copy on {twin['samples']} samples: max abs difference "
            f"{twin['max_abs_diff']:.3g}, min cosine {twin['min_cosine']:.6f}" + _twin_inputs(twin)
        )
    return lines


def _twin_inputs(twin: dict) -> str:
    """``; inputs as in the ONNX model: input_ids 1x64 int64, ...`` (older reports: nothing)."""
    if "inputs" not in twin:
        return ""
    shapes = ", ".join(f"{t['name']} {'x'.join(map(str, t['shape']))} {t['dtype']}" for t in twin["inputs"])
    return f"; {'NHWC input' if twin['layout'] == 'NHWC' else 'inputs as in the ONNX model'}: {shapes}"


def _quantized(t: dict) -> str:
    """``int8 (scale 0.0123, zero point -5)``, or the dtype of a float tensor."""
    return t["dtype"] if t["scale"] is None else f"{t['dtype']} (scale {t['scale']:.6g}, zero point {t['zero_point']})"


def _int8_twin_lines(twin: dict) -> list[str]:
    """The INT8 TFLite twin's gate: its file, graph, edges' quantization and the task figures against the source."""
    ops = ", ".join(f"{n} {op}" for op, n in sorted(twin["graph"]["ops"].items()))
    weights = ", ".join(f"{n} {dtype}" for dtype, n in twin["graph"]["weights"].items()) or "none"
    edges = [f"output `{n}` {_quantized(o)}" for n, o in twin["quantized_outputs"].items()]
    head = [
        f"- TFLite INT8 twin `{twin['file']}` (full integer, LiteRT) vs the source on {twin['samples']} samples: "
        + ("PASSED" if twin["passed"] else "FAILED"),
        f"- TFLite twin: input `{twin['input']['name']}` {_quantized(twin['input'])}, " + ", ".join(edges),
        f"- TFLite twin graph: {ops}; conv/dense weights: {weights}",
    ]
    return head + ["- TFLite twin: " + line[2:] for line in _figure_lines(twin)]


def _images(data: dict) -> str:
    """How an image folder became tensors, for report.md (empty for a .npz)."""
    p = data.get("preprocessing")
    if not p:
        return ""
    norm = f", (pixel - {p['mean']}) / {p['std']}" if p["mean"] is not None else ", raw pixels"
    size = "x".join(map(str, p["size"]))
    skipped = f"; {len(p['skipped'])} other files skipped" if p["skipped"] else ""
    return f" (images, {p['channels']} {size} {p['layout'].upper()} {p['dtype']}{norm}{skipped})"


def _calibration_source(calibration: dict) -> str:
    if "file" not in calibration:
        return f"({calibration['reason']})"
    return f"from `{calibration['file']}`{_images(calibration)}"


def _runtime_line(checked: dict) -> str:
    if not checked:
        return "not checked"
    files = ", ".join(f"`{name}`" for name in checked["loaded"])
    return f"{checked['runtime']} {checked['version']} loads {files} ({checked['how']})"


def render_markdown(build: ModelBuild) -> str:
    """report.md: what was built, on which data, the figures and the verdict."""
    data = record(build)
    job = build.job
    lines = [
        f"# {job.model.name}: {job.precision.value} for {job.profile.name} ({job.task.value})",
        "",
        f"- Source: `{job.model}` (sha256 `{build.source.sha256}`; licence: {_source(build)['licence']})",
        "- Inputs: " + ", ".join(f"`{s.name}` {s.dtype} {s.shape_text()}" for s in build.inputs),
        f"- Shipped: `{data['shipped']}`" + ("" if build.passed else " (gate failed: no models.json)"),
        f"- Calibration: {build.calibration.get('samples', 0)} samples {_calibration_source(build.calibration)}",
        f"- Evaluation: {build.evaluation['samples']} samples from `{build.evaluation['file']}`"
        f"{_images(build.evaluation)} "
        f"({build.evaluation['shared_with_calibration']} also in the calibration data)",
        f"- Evaluated as: {data['gate']['evaluated_as']}",
        f"- Target runtime: {_runtime_line(build.target_runtime)}",
        "",
        "## Figures",
        "",
        *_figure_lines(build.figures),
        "",
        "## Verdict",
        "",
        "PASSED" if build.passed else "FAILED:\n\n" + "\n".join(f"- {f}" for f in build.failures),
        "",
    ]
    if build.settings:
        ops = ", ".join(f"{n} {op}" for op, n in build.quant_ops.items()) or "no quantized ops"
        lines[8:8] = [f"- Quantized graph ({build.settings.mode.value}): {ops}"]
    return "\n".join(lines)


def write_reports(build: ModelBuild, folder: Path) -> None:
    """report.json and report.md into ``folder``."""
    (folder / "report.json").write_text(json.dumps(record(build), indent=2) + "\n", encoding="utf-8")
    (folder / "report.md").write_text(render_markdown(build), encoding="utf-8")


def summary(build: ModelBuild) -> str:
    """A few lines for the CLI."""
    job = build.job
    head = f"{job.model.name}: {job.precision.value} for {job.profile.name} ({job.task.value}) in {job.out_dir}:"
    verdict = "PASSED" if build.passed else "FAILED:\n  " + "\n  ".join(build.failures)
    return "\n".join([head, *("  " + line[2:] for line in _figure_lines(build.figures)), verdict])
