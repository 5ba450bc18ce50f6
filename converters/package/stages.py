"""Model stages of a bundle build: one callable per model kind that fills a folder and describes it.

A stage gets the profile, the precision and an empty folder; it converts (and quantizes, and gates) its
models into that folder and returns a :class:`StageResult`: which files it wrote, where the weights came from
(package, version, licence), the quantization settings and the gate's metrics. ``converters.package.bundle``
caches a stage's folder under a key made of the source weights' sha256s, the profile file, the tool version
and the stage's code, so a second build with nothing changed reuses it.
"""

from __future__ import annotations

import ast
import enum
import hashlib
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from converters.paths import REPO_ROOT
from converters.sources import SMOLLM2, ModelSource
from converters.versions import library_versions
from edge import __version__
from edge.digest import file_sha256
from edge.errors import ConversionError
from edge.profiles import ModelFormats, Precision, TargetProfile
from edge.progress import ProgressFn

if TYPE_CHECKING:
    from converters.slm.build import SlmBuild, TfliteTwin
    from converters.slm.tflite import TfliteOptions

#: Bump when a stage wrapper changes what it writes (its converters' code is hashed on top of this).
STAGE_CODE_VERSION = 1


class ModelKind(enum.StrEnum):
    """The kinds of models a bundle carries: one stage each, one folder ``models/<kind>`` in the bundle."""

    FACE = "face"
    SLM = "slm"


@dataclass(frozen=True)
class StageResult:
    """What a stage produced, as the manifest records it."""

    kind: ModelKind
    precision: str
    format: str
    files: tuple[str, ...]
    sources: tuple[dict[str, Any], ...]
    quantization: dict[str, Any]
    metrics: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "precision": self.precision,
            "format": self.format,
            "files": list(self.files),
            "sources": [dict(s) for s in self.sources],
            "quantization": self.quantization,
            "metrics": self.metrics,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StageResult:
        return cls(
            kind=ModelKind(data["kind"]),
            precision=data["precision"],
            format=data["format"],
            files=tuple(data["files"]),
            sources=tuple(data["sources"]),
            quantization=data["quantization"],
            metrics=data["metrics"],
        )


@dataclass(frozen=True)
class StageContext:
    """Everything a stage's ``run`` gets.

    Attributes:
        profile: the target.
        precision: what to build.
        out_dir: the (empty) folder to fill: exactly what ships in the bundle.
        work_dir: scratch space, kept after a failure (its reports explain it) and deleted after success.
        progress: called with a line per step.
        fp32_folder: returns this stage's fp32 output folder (from the cache, built when missing), for
            stages that quantize what the fp32 stage made; read it, never write to it.
        formats: ONNX only, or also the TFLite twins (``build --format``; the profile's ``runtime.face_formats``
            / ``runtime.slm_formats``): the face models' (``converters.face.tflite_twins``; ``tflite`` makes the
            embedder's twin the one the device runs, models.json ``embedder_runtime``), the language model's
            LiteRT twin (``converters.slm.tflite``; ``tflite`` makes it the device's default in generation.json).
        litert_venv: the litert-torch environment of the language model's twin (None: ``.venv-litert-torch``).
    """

    profile: TargetProfile
    precision: Precision
    out_dir: Path
    work_dir: Path
    progress: ProgressFn
    fp32_folder: Callable[[], Path]
    formats: ModelFormats = ModelFormats.ONNX
    litert_venv: Path | None = None

    @property
    def tflite(self) -> bool:
        """True when the stage also writes its TFLite twins."""
        return self.formats.tflite


StageFn = Callable[[StageContext], StageResult]


@dataclass(frozen=True)
class ModelStage:
    """One model kind: its source weights, the code that converts it, and the function that runs it.

    Attributes:
        kind: which models it builds.
        sources: returns the pretrained weights it reads (their sha256s key the cache).
        code: the modules that do the work; their import closure within the repository keys the cache.
        run: fills a folder; see :data:`StageFn`.
        twin_code: files outside ``converters``/``edge`` that make its TFLite twins (a script run in a side
            venv); they key the cache of a build with twins only.
    """

    kind: ModelKind
    sources: Callable[[], tuple[ModelSource, ...]]
    code: tuple[str, ...]
    run: StageFn
    twin_code: tuple[Path, ...] = ()

    def cache_key(self, profile: TargetProfile, precision: Precision, formats: ModelFormats = ModelFormats.ONNX) -> str:
        """Hash of (source weights' sha256, profile file content, tool and library versions, stage code, precision,
        formats): a folder built under another opencv or onnxruntime is built again, not reused.

        Raises:
            InputError: a source package is not installed.
        """
        h = hashlib.sha256()
        h.update(f"{self.kind}\0{precision.value}\0{__version__}\0{STAGE_CODE_VERSION}\0".encode())
        if formats.tflite:
            h.update(formats.value.encode() + b"\0")
        for source in self.sources():
            h.update(source.key.encode() + b"\0" + file_sha256(source.locate()).encode() + b"\0")
        h.update(Path(profile.source).read_bytes())
        h.update(json.dumps(library_versions(), sort_keys=True).encode())
        for path in self.code_files(formats.tflite):
            h.update(path.relative_to(REPO_ROOT).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
        return h.hexdigest()[:20]

    def code_files(self, tflite: bool = False) -> list[Path]:
        """The repository source files that shape this stage's output: the import closure of its modules (and,
        with TFLite twins, ``twin_code``)."""
        twin = self.twin_code if tflite else ()
        return sorted({*import_closure(self.code), Path(__file__).resolve(), *twin})


def _module_file(name: str) -> Path | None:
    base = REPO_ROOT.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _imported_names(path: Path, package: str) -> set[str]:
    """Every module name ``path`` imports (lazy imports inside functions too), relative ones resolved."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_bytes(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            parts = package.split(".")
            base = ".".join(parts[: len(parts) - node.level + 1]) if node.level else ""
            module = ".".join(p for p in (base, node.module or "") if p)
            names.add(module)
            names.update(f"{module}.{a.name}" for a in node.names)
    return names


def import_closure(modules: tuple[str, ...], roots: tuple[str, ...] = ("converters", "edge")) -> set[Path]:
    """The files of ``modules`` and of every repository module they import, transitively (read with ast)."""
    seen: set[str] = set()
    files: set[Path] = set()
    todo = list(modules)
    while todo:
        name = todo.pop()
        if name in seen or name.split(".")[0] not in roots:
            continue
        seen.add(name)
        path = _module_file(name)
        if path is None:
            continue
        files.add(path)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        todo.extend(_imported_names(path, package) - seen)
    return files


def _files_of(folder: Path) -> tuple[str, ...]:
    return tuple(sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()))


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ConversionError(f"{path}: cannot read the stage's report ({exc})") from exc


def _twin_metrics(report: dict[str, Any]) -> dict[str, Any] | None:
    """The TFLite twins' figures of a report (None without twins): per net file, precision, vs ONNX, gate."""
    twins = report.get("tflite")
    if not twins:
        return None
    nets = {}
    for net, d in twins["nets"].items():
        vs = {k: d["vs_onnx"][k] for k in ("samples", "max_abs_diff", "mean_cosine", "min_cosine")}
        gate = {k: v for k, v in d.get("gate", {}).items() if k != "decisions"}
        if "gate" in d:
            gate["decision_agreement"] = d["gate"]["decisions"]["agreement"]
        nets[net] = {"file": d["file"], "precision": d["precision"], "vs_onnx": vs, "gate": gate or None}
    return {"passed": twins["passed"], "nets": nets}


def face_metrics(report: dict[str, Any]) -> dict[str, Any]:
    checks = report.get("source_checks", [])
    agreement = {k: v for k, v in report.get("pipeline_agreement", {}).items() if k != "summary"}
    metrics = {
        "passed": report.get("passed"),
        "onnx_vs_source_max_abs_diff": max((c["max_abs_diff"] for c in checks), default=None),
        "onnx_vs_source_outputs": len(checks),
        "embedder_vs_dlib": report.get("dlib_proof"),
        "pipeline_agreement": agreement,
    }
    if report.get("tflite"):
        metrics["tflite"] = _twin_metrics(report)
    return metrics


def _twins(ctx: StageContext, fp32_dir: Path, folder: Path, inputs: tuple | None = None, int8_nets: tuple = ()) -> None:
    """The TFLite twins into ``folder``; onnx2tf's logs go to the work folder (kept after a failure)."""
    from converters.face.build import add_tflite_twins
    from converters.face.tflite_twins import raise_if_failed

    twins = add_tflite_twins(fp32_dir, folder, ctx.profile, inputs, int8_nets, ctx.progress)
    if (folder / "onnx2tf").is_dir():
        shutil.move(folder / "onnx2tf", ctx.work_dir / f"onnx2tf-{folder.name}")
    raise_if_failed(twins)


def _face_quantized(ctx: StageContext) -> dict:
    """``quantize_face_models`` over the (cached) fp32 stage; ships what the new models.json names and, beside
    each ``.ort`` file, the ``.onnx`` it was made from: the graph the accuracy gate ran unfused, which the
    emulated-Pi check runs again on the host (``open_face_pipeline(unfused=True)``)."""
    from converters.face.quantize import quantize_face_models
    from edge.face import models as face_models

    fp32_dir, q_dir = ctx.fp32_folder(), ctx.work_dir / "quant"
    fp32_report = _read_json(fp32_dir / "report.json")
    inputs = None
    if ctx.tflite:  # one calibration set and fp32 reference for the ONNX INT8 and the TFLite twins
        from converters.face.build import twin_inputs
        from converters.face.quantize import DEFAULT_CALIBRATION_COUNT

        inputs = twin_inputs(fp32_dir, ctx.profile, DEFAULT_CALIBRATION_COUNT, ctx.progress)
    ctx.progress(f"quantizing the face models to {ctx.precision.value} and checking them against fp32")
    build = quantize_face_models(
        fp32_dir, q_dir, ctx.profile, ctx.precision, progress=ctx.progress,
        calibration=inputs[0] if inputs else None, reference=inputs[1] if inputs else None,
    )  # fmt: skip
    if inputs:
        _twins(ctx, fp32_dir, q_dir, inputs, tuple(build.settings))
    quantized = face_models.read_models_folder(q_dir).entries
    entries = []
    # A role the quantizer leaves alone (e.g. the numpy landmark model) ships as its fp32 file.
    for role, entry in face_models.read_models_folder(fp32_dir).entries.items():
        chosen, folder = (quantized[role], q_dir) if role in quantized else (entry, fp32_dir)
        shutil.copy2(folder / chosen.file, ctx.out_dir / chosen.file)
        gated = (folder / chosen.file).with_suffix(".onnx")
        if chosen.file.endswith(".ort") and gated.is_file():
            shutil.copy2(gated, ctx.out_dir / gated.name)
        entries.append(chosen)
    arithmetic = _read_json(q_dir / "models.json").get("int8_arithmetic")
    face_models.write_models_file(ctx.out_dir, entries, ctx.profile.name, __version__, arithmetic)
    for name in ("quant_report.json", "quant_report.md", "cosine_hist.png", "tflite_report.json", "tflite_report.md"):
        if (q_dir / name).is_file():
            shutil.copy2(q_dir / name, ctx.out_dir / name)
    for name in ("report.json", "report.md"):
        shutil.copy2(fp32_dir / name, ctx.out_dir / f"fp32_{name}")
    twins = _read_json(q_dir / "quant_report.json") if ctx.tflite else None
    return quantized_record(build.to_dict(), fp32_report, twins)


def quantized_record(report: dict[str, Any], fp32_report: dict[str, Any], twins: dict[str, Any] | None) -> dict:
    """The manifest's ``metrics`` and ``quantization`` of a quantized face folder, from its quant_report.json
    (``report``), its fp32 folder's report.json and, with TFLite twins, the report that lists them."""
    metrics = {
        "passed": report["passed"],
        "fp32": face_metrics(fp32_report),
        "thresholds": report["thresholds"],
        "embedder": {k: v for k, v in report["embedder"].items() if not isinstance(v, list)},
        "detector": {k: v for k, v in report["detector"].items() if not isinstance(v, list)},
        "end_to_end": report["end_to_end"],
    }
    if twins is not None:
        metrics["tflite"] = _twin_metrics(twins)
    settings = {
        "mode": report["mode"],
        "shipped": report["shipped"],
        "ort_target_platform": report["ort_target_platform"],
    }
    return {"metrics": metrics, "quantization": {**settings, "nets": report["settings"]}}


def run_face(ctx: StageContext) -> StageResult:
    """dlib's ResNet-29 embedder, MTCNN and the 5-point landmarks at ``ctx.precision``: fp32 from
    ``convert_face``, int8/fp16 from ``quantize_face_models`` over the fp32 stage; each gated."""
    from converters.face.tflite_twins import run_embedder_twin

    if ctx.precision is Precision.FP32:
        from converters.face.build import convert_face

        convert_face(ctx.profile, ctx.out_dir, progress=ctx.progress)
        if ctx.tflite:
            _twins(ctx, ctx.out_dir, ctx.out_dir)
        metrics = face_metrics(_read_json(ctx.out_dir / "report.json"))
        quantization: dict[str, Any] = {"method": "none"}
    elif ctx.precision in (Precision.INT8, Precision.FP16):
        done = _face_quantized(ctx)
        metrics, quantization = done["metrics"], done["quantization"]
    else:
        raise ConversionError(
            f"precision {ctx.precision.value!r} for the face models; expected one of fp32, fp16, int8 "
            f"(set runtime.precision in {ctx.profile.source} or pass --precision)"
        )
    if ctx.formats is ModelFormats.TFLITE:  # the device runs the embedder's twin, as convert face --format tflite
        run_embedder_twin(ctx.out_dir)
    from converters.face.blazeface import add_profile_detector

    runtime = ctx.profile.runtime
    add_profile_detector(ctx.out_dir, runtime.face_detector, ctx.progress, runtime.face_detector_runtime.value)
    return face_result(ctx.precision, ctx.out_dir, quantization, metrics)


def face_result(
    precision: Precision, folder: Path, quantization: dict[str, Any], metrics: dict[str, Any]
) -> StageResult:
    """The face stage's StageResult for a filled ``folder``: its files, formats and sources from models.json
    (a source once, though a TFLite twin shares its ONNX model's)."""
    models = _read_json(folder / "models.json").get("models", [])
    sources = tuple({json.dumps(m["source"], sort_keys=True): m["source"] for m in models}.values())
    formats = "+".join(sorted({m["format"] for m in models}))
    return StageResult(ModelKind.FACE, precision.value, formats, _files_of(folder), sources, quantization, metrics)


def run_slm(ctx: StageContext) -> StageResult:
    """SmolLM2-135M-Instruct as an ONNX decoder with KV cache, tokenizer and generation.json; with
    ``ctx.formats`` tflite or both, also its LiteRT twin, gated by greedy agreement with the fp32 ONNX."""
    from converters.slm.build import SlmOptions, convert_slm

    options = SlmOptions(work_dir=ctx.work_dir, tflite=slm_twin(ctx.formats, ctx.litert_venv))
    build = convert_slm(ctx.profile, ctx.precision, ctx.out_dir, ctx.progress, options)
    return slm_result(build, ctx.out_dir)


def slm_twin(formats: ModelFormats, venv: Path | None = None) -> TfliteTwin | None:
    """The LiteRT twin ``convert_slm`` writes for ``formats``: none for onnx; for tflite the device's default
    (generation.json ``runtime = "litert"``), for both listed beside the ONNX the device runs."""
    from converters.slm.build import TfliteTwin

    if not formats.tflite:
        return None
    return TfliteTwin(default=formats is ModelFormats.TFLITE, options=litert_options(venv))


def litert_options(venv: Path | None = None) -> TfliteOptions:
    """litert-torch's settings for a bundle's twin: the defaults (KV buffer, prefill), in ``venv`` if given."""
    from converters.slm.tflite import TfliteOptions

    return TfliteOptions() if venv is None else TfliteOptions(venv=venv)


def slm_result(build: SlmBuild, folder: Path) -> StageResult:
    """The slm stage's StageResult for ``build`` (a passed ``convert_slm``) whose files are in ``folder``: the
    teacher-forced gate (verdict, arithmetic, thresholds, figures) in ``metrics`` and, with a LiteRT twin, the
    twin's file, recipe, size, whether it is the default, its gate and greedy answers in ``metrics.tflite``;
    format ``onnx+tflite``."""
    gate = build.gate
    metrics: dict[str, Any] = {**gate.to_dict(), **gate.divergence.to_dict()}
    if build.tflite is not None:
        metrics["tflite"] = build.tflite.to_dict()
    quantization = {"method": build.method, "settings": build.settings, "op_counts": dict(build.op_counts)}
    return StageResult(
        ModelKind.SLM,
        build.precision.value,
        "onnx+tflite" if build.tflite is not None else "onnx",
        _files_of(folder),
        (SMOLLM2.provenance(),),  # the twin is converted from the same GGUF: one source and licence
        quantization,
        metrics,
    )


def _face_sources() -> tuple[ModelSource, ...]:
    from converters import sources

    named = [getattr(sources, name, None) for name in ("DLIB_RESNET", "DLIB_SHAPE5")]
    return (*(s for s in named if s is not None), *sources.MTCNN_NETS.values())


def _slm_sources() -> tuple[ModelSource, ...]:
    return (SMOLLM2,)


#: The modules whose import closure (with this file) keys each stage's cache.
_FACE_CODE = ("converters.face.build", "converters.face.quantize")
_SLM_CODE = ("converters.slm.build",)
#: The script litert-torch runs in its own venv (``converters.slm.tflite.EXPORT_SCRIPT``): it shapes the twin.
_SLM_TWIN_CODE = (REPO_ROOT / "scripts" / "slm" / "litert_export.py",)

STAGES: dict[ModelKind, ModelStage] = {
    ModelKind.FACE: ModelStage(ModelKind.FACE, _face_sources, _FACE_CODE, run_face),
    ModelKind.SLM: ModelStage(ModelKind.SLM, _slm_sources, _SLM_CODE, run_slm, _SLM_TWIN_CODE),
}
