"""Target profiles: one TOML file per board in ``firmware_configs/``, loaded into a frozen dataclass.

Load order: parse TOML -> reject unknown tables and keys -> convert values to enums and numbers -> check
cross-field rules. Every error names the file and the key, the value found and what is allowed, e.g.::

    firmware_configs/rpi4.toml: quant.weights = 'uint4'; expected one of int8, uint8

Boards differ in data, not code: nothing outside this module branches on a board's name.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

from edge.errors import ProfileError, did_you_mean
from edge.face.models import Detector
from edge.shipped import shipped_dir
from edge.tomlschema import REQUIRED, Field, Schema, read_tables, read_toml

SCHEMA_VERSION = 1


#: Where the shipped profiles live: the checkout's ``firmware_configs/``, or an installed wheel's copy.
DEFAULT_PROFILE_DIR = shipped_dir("firmware_configs")


class Arch(enum.Enum):
    AARCH64 = "aarch64"
    X86_64 = "x86_64"
    WASM32 = "wasm32"


class IsaFeature(enum.Enum):
    """Instruction-set features that change which kernels a runtime can pick."""

    NEON = "neon"
    DOTPROD = "dotprod"  # SDOT/UDOT (Armv8.2-A, Cortex-A76 and later)
    FP16 = "fp16"  # half-precision arithmetic (Armv8.2-A)
    I8MM = "i8mm"
    SVE = "sve"
    SSE4_2 = "sse4.2"
    AVX2 = "avx2"
    AVX512 = "avx512"
    VNNI = "vnni"
    WASM_SIMD = "wasm-simd"
    WASM_THREADS = "wasm-threads"


class Runtime(enum.Enum):
    ONNXRUNTIME = "onnxruntime"
    LITERT = "litert"
    ONNXRUNTIME_WEB = "onnxruntime-web"


class Precision(enum.Enum):
    FP32 = "fp32"
    FP16 = "fp16"
    INT8 = "int8"
    INT4 = "int4"


class ModelFormats(enum.Enum):
    """Which files a build writes (``--format`` of ``convert face``, ``convert slm``, ``convert model`` and
    ``build``; ``runtime.face_formats`` and ``runtime.slm_formats`` in a profile): ONNX (and ORT) only, or also
    TFLite twins. Either way the ONNX files are written: the twins' source and the gate's reference (and
    MTCNN's nets, which the device runs on onnxruntime). For faces (``converters/face/tflite_twins.py``)
    ``tflite`` also makes the embedder's twin the one the device runs (models.json ``embedder_runtime``), as
    for a language model (generation.json ``runtime``); for user models it writes what ``both`` does."""

    ONNX = "onnx"
    TFLITE = "tflite"
    BOTH = "both"

    @property
    def tflite(self) -> bool:
        """True when the TFLite twins are written."""
        return self is not ModelFormats.ONNX


class QuantType(enum.Enum):
    INT8 = "int8"
    UINT8 = "uint8"


class CalibrationMethod(enum.Enum):
    MINMAX = "minmax"
    ENTROPY = "entropy"
    PERCENTILE = "percentile"


class Projection(enum.Enum):
    """The weight projections of a llama layer in our graphs (fused QKV and gate/up)."""

    QKV = "qkv_proj"
    OUT = "o_proj"
    GATE_UP = "gate_up_proj"
    DOWN = "down_proj"


class LmHead(enum.Enum):
    """How an SLM's 8-bit (Q8_0) LM head is computed (``quant.lm_head``).

    ``int8``: an 8-bit ``MatMulNBits`` with exact top-8 logits (fast at accuracy level 4 with a dot product:
    Cortex-A76, x86 VNNI); ``fp32``: a ``Gemm`` over the fp32 table that onnxruntime makes from the same 8-bit
    codes at load (file unchanged, exact logits; ~100 MB more resident, ~530 MB more at the load peak):
    onnxruntime 1.32 has no fast 8-bit kernel without a dot product, nor any at accuracy level 0, so on a
    Cortex-A72 the fp32 head costs 12.3 M instructions a token against 458.7 M, and the x86 profile (level 0)
    takes it too.
    """

    INT8 = "int8"
    FP32 = "fp32"


def key(kind: Any, default: Any = REQUIRED, convert: Any = None, **bounds: Any) -> Any:
    """A profile key, declared once: the dataclass field carries its TOML schema (kind, default, bounds).

    Args:
        kind: what the TOML value must be (see :class:`edge.tomlschema.Field`).
        default: the value when the key is absent; required without it.
        convert: applied to the checked value before it is stored (``tuple`` or ``frozenset`` for lists).
        **bounds: ``low``, ``high``, ``low_open``, ``high_open`` of a number.
    """
    meta = {"toml": Field(kind, default, **bounds), "convert": convert}
    if default is REQUIRED:
        return field(metadata=meta)
    return field(default=default, metadata=meta)


def not_in_toml() -> Any:
    """A field the loader fills itself (the file it read), not a key of the file."""
    return field()


def table(spec: type) -> Any:
    """A ``[table]`` of the profile, read into the dataclass ``spec`` whose fields are declared with :func:`key`."""
    return field(metadata={"table": spec})


@dataclass(frozen=True)
class CpuSpec:
    model: str = key(str)
    arch: Arch = key(Arch)
    cores: int = key(int, high=1024)
    isa_features: frozenset[IsaFeature] = key([IsaFeature], convert=frozenset)
    qemu_cpu: str | None = key(str, None)


@dataclass(frozen=True)
class MemorySpec:
    min_mb: int = key(int, high=1 << 24)
    max_mb: int = key(int, high=1 << 24)

    @property
    def max_image_pixels(self) -> int:
        """Most pixels a photo may have on this board: ``min_mb`` MiB / 64 (a 512 MB Pi Zero 2 W: 8.4 MP).

        Decoding takes 3 bytes a pixel, the RGB copy 3 more and the detector's image pyramid about 24 (float32
        scales), so a photo at the limit needs about half the smallest board's memory at its peak.
        """
        return self.min_mb * (1 << 20) // 64


@dataclass(frozen=True)
class RuntimeSpec:
    default: Runtime = key(Runtime)
    precision: Precision = key(Precision)
    threads: int = key(int)
    #: Optional keys keep older profiles building what they did.
    face_formats: ModelFormats = key(ModelFormats, ModelFormats.ONNX)
    #: The detector a face build puts in the folder and names in models.json.
    face_detector: Detector = key(Detector, Detector.MTCNN)
    #: The runtime a BlazeFace detector runs on (models.json ``detector_runtime``): LiteRT runs MediaPipe's
    #: ``.tflite`` original, onnxruntime its ONNX translation. MTCNN runs on onnxruntime either way.
    face_detector_runtime: Runtime = key(Runtime, Runtime.ONNXRUNTIME)
    #: The language model's files a bundle build writes: ONNX only, or also its LiteRT twin (``tflite``: the
    #: device runs the twin by default; ``both``: the ONNX, the twin listed beside it).
    slm_formats: ModelFormats = key(ModelFormats, ModelFormats.ONNX)


@dataclass(frozen=True)
class QuantSpec:
    activations: QuantType = key(QuantType)
    weights: QuantType = key(QuantType)
    per_channel: bool = key(bool)
    reduce_range: bool = key(bool)
    calibration: CalibrationMethod = key(CalibrationMethod)
    keep_float_ops: tuple[str, ...] = key([str], convert=tuple)
    int4_block_size: int = key(int)
    int4_accuracy_level: int = key(int)
    int4_fp32_projections: tuple[Projection, ...] = key([Projection], (), convert=tuple)
    lm_head: LmHead = key(LmHead, LmHead.INT8)


_FRACTION = {"low": 0.0, "high": 1.0, "low_open": True}


@dataclass(frozen=True)
class Thresholds:
    """What a build for this target must meet (the accuracy gate)."""

    embed_max_abs_diff_fp32: float = key(float, low=0.0, low_open=True)
    embed_mean_cosine: float = key(float)
    embed_decision_agreement: float = key(float)
    detect_iou: float = key(float)
    detect_max_lost: int = key(int, low=0)
    #: greedy tokens generated per fixed chat prompt for the printed report and the "Paris" smoke check
    slm_greedy_tokens: int = key(int)
    #: the language model's gate, teacher-forced against fp32 on the held-out text: a build passes when it is at
    #: least as close to fp32 as llama.cpp running the same GGUF (docs/slm.md, "What it guarantees")
    slm_max_mean_kld: float = key(float, 0.0054, low=0.0)
    slm_max_p99_kld: float = key(float, 0.040, low=0.0)
    slm_min_same_top1: float = key(float, 0.958, **_FRACTION)
    slm_max_perplexity_ratio: float = key(float, 1.0042, low=1.0)
    #: ``convert model``'s gate for a user's model, by task (each flag of the same name overrides it)
    model_min_cosine: float = key(float, 0.99, **_FRACTION)
    model_min_rank_agreement: float = key(float, 0.9, **_FRACTION)
    model_min_top1: float = key(float, 0.98, **_FRACTION)
    model_max_rel_error: float = key(float, 0.05, low=0.0, low_open=True)


@dataclass(frozen=True)
class TargetProfile:
    """One target board (or runtime environment), as read from ``firmware_configs/<name>.toml``."""

    name: str = key(str)
    description: str = key(str)
    source: Path = not_in_toml()
    cpu: CpuSpec = table(CpuSpec)
    memory: MemorySpec = table(MemorySpec)
    runtime: RuntimeSpec = table(RuntimeSpec)
    quant: QuantSpec = table(QuantSpec)
    thresholds: Thresholds = table(Thresholds)
    device_tree_models: tuple[str, ...] = key([str], (), convert=tuple)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view (enums as their values), as written into manifests and ``--json``."""
        return _plain(self)


def _plain(value: Any) -> Any:
    """``value`` as JSON-ready data: dataclasses as dicts in field order, enums as values, sets sorted."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, frozenset):
        return sorted(_plain(v) for v in value)
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


# --- the schema (read by edge.tomlschema), derived from the dataclasses above ------------------------------


def _keys(spec: type) -> dict[str, Field]:
    return {f.name: f.metadata["toml"] for f in fields(spec) if "toml" in f.metadata}


def _tables() -> dict[str, type]:
    return {f.name: f.metadata["table"] for f in fields(TargetProfile) if "table" in f.metadata}


_SCHEMA: Schema = {
    "": {"schema_version": Field(int), **_keys(TargetProfile)},
    **{name: _keys(spec) for name, spec in _tables().items()},
}


def _build(spec: type, values: dict[str, Any], **extra: Any) -> Any:
    """``spec`` from a checked table: each value through its field's ``convert``."""
    args = dict(extra)
    for f in fields(spec):
        if f.name in values:
            convert = f.metadata.get("convert")
            args[f.name] = convert(values[f.name]) if convert else values[f.name]
    return spec(**args)


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError):
        return str(path)


def _check_browser_runtime(where: str, p: TargetProfile) -> None:
    """The ``[runtime]`` keys the browser decides: onnxruntime-web, ONNX files (any detector: the page runs
    MTCNN and every BlazeFace variant), the detector's ONNX translation."""
    if p.cpu.arch is Arch.WASM32 and p.runtime.face_formats.tflite:
        raise ProfileError(
            f"{where}: runtime.face_formats = '{p.runtime.face_formats.value}' with cpu.arch = 'wasm32'; "
            "expected 'onnx' (the browser runs onnxruntime-web)"
        )
    if p.cpu.arch is Arch.WASM32 and p.runtime.slm_formats.tflite:
        raise ProfileError(
            f"{where}: runtime.slm_formats = '{p.runtime.slm_formats.value}' with cpu.arch = 'wasm32'; "
            "expected 'onnx' (the browser runs onnxruntime-web)"
        )
    detector_runtimes = (Runtime.ONNXRUNTIME,) if p.cpu.arch is Arch.WASM32 else (Runtime.ONNXRUNTIME, Runtime.LITERT)
    if p.runtime.face_detector_runtime not in detector_runtimes:
        raise ProfileError(
            f"{where}: runtime.face_detector_runtime = '{p.runtime.face_detector_runtime.value}' with cpu.arch = "
            f"'{p.cpu.arch.value}'; expected " + " or ".join(f"'{r.value}'" for r in detector_runtimes)
        )
    if (p.cpu.arch is Arch.WASM32) != (p.runtime.default is Runtime.ONNXRUNTIME_WEB):
        raise ProfileError(
            f"{where}: runtime.default = '{p.runtime.default.value}' with cpu.arch = "
            f"'{p.cpu.arch.value}'; onnxruntime-web is for, and only for, wasm32"
        )


def _check_rules(where: str, p: TargetProfile) -> None:
    """Cross-field rules a single value can't show wrong."""
    if p.cpu.cores < 1:
        raise ProfileError(f"{where}: cpu.cores = {p.cpu.cores}; expected at least 1")
    if not 1 <= p.runtime.threads <= p.cpu.cores:
        raise ProfileError(f"{where}: runtime.threads = {p.runtime.threads}; expected 1 to cpu.cores ({p.cpu.cores})")
    if not 0 < p.memory.min_mb <= p.memory.max_mb:
        raise ProfileError(
            f"{where}: memory.min_mb = {p.memory.min_mb}, memory.max_mb = {p.memory.max_mb}; "
            "expected 0 < min_mb <= max_mb"
        )
    arm_only = {IsaFeature.NEON, IsaFeature.DOTPROD, IsaFeature.FP16, IsaFeature.I8MM, IsaFeature.SVE}
    x86_only = {IsaFeature.SSE4_2, IsaFeature.AVX2, IsaFeature.AVX512, IsaFeature.VNNI}
    wasm_only = {IsaFeature.WASM_SIMD, IsaFeature.WASM_THREADS}
    foreign = {
        Arch.AARCH64: x86_only | wasm_only,
        Arch.X86_64: arm_only | wasm_only,
        Arch.WASM32: arm_only | x86_only,
    }[p.cpu.arch]
    bad = sorted(f.value for f in p.cpu.isa_features & foreign)
    if bad:
        raise ProfileError(
            f"{where}: cpu.isa_features has {', '.join(bad)}, which cpu.arch = '{p.cpu.arch.value}' does not have"
        )
    _check_browser_runtime(where, p)
    for key in ("embed_mean_cosine", "embed_decision_agreement", "detect_iou"):
        value = getattr(p.thresholds, key)
        if not 0.0 < value <= 1.0:
            raise ProfileError(f"{where}: thresholds.{key} = {value}; expected a number in (0, 1]")
    if p.thresholds.slm_greedy_tokens < 0:
        raise ProfileError(
            f"{where}: thresholds.slm_greedy_tokens = {p.thresholds.slm_greedy_tokens}; expected 0 (no check) or more"
        )
    if p.quant.int4_block_size not in (16, 32, 64, 128, 256):
        raise ProfileError(
            f"{where}: quant.int4_block_size = {p.quant.int4_block_size}; expected one of 16, 32, 64, 128, 256"
        )
    if p.quant.int4_accuracy_level not in (0, 1, 2, 3, 4):
        raise ProfileError(f"{where}: quant.int4_accuracy_level = {p.quant.int4_accuracy_level}; expected 0 to 4")
    if p.cpu.arch is Arch.X86_64 and p.quant.int4_accuracy_level == 4:
        raise ProfileError(
            f"{where}: quant.int4_accuracy_level = 4 on cpu.arch = 'x86_64'; expected 0 to 3: level 4 quantizes "
            "activations to int8 and x86 CPUs compute that differently (an AVX2-only CPU changed SmolLM2's "
            "greedy answers, a VNNI one did not), so no build gate can vouch for the device (docs/slm.md)"
        )


def load_profile_file(path: Path) -> TargetProfile:
    """Load and validate one profile file.

    Args:
        path: a ``.toml`` file.

    Returns:
        The validated profile.

    Raises:
        ProfileError: naming the file and key when anything is missing, unknown or out of range.
    """
    where = _display(path)
    data = read_toml(path, where, ProfileError, "profile")
    t = read_tables(where, data, _SCHEMA, ProfileError, required_tables=tuple(k for k in _SCHEMA if k))
    top = t[""]
    if top["schema_version"] != SCHEMA_VERSION:
        raise ProfileError(f"{where}: schema_version = {top['schema_version']}; expected {SCHEMA_VERSION}")
    if top["name"] != path.stem:
        raise ProfileError(f"{where}: name = {top['name']!r}; expected {path.stem!r} (the file's name)")
    tables = {name: _build(spec, t[name]) for name, spec in _tables().items()}
    top = {k: v for k, v in top.items() if k != "schema_version"}
    profile = _build(TargetProfile, top, source=path, **tables)
    _check_rules(where, profile)
    return profile


def available_targets(profile_dir: Path = DEFAULT_PROFILE_DIR) -> list[str]:
    """Names of the profiles in ``profile_dir``, sorted."""
    return sorted(p.stem for p in profile_dir.glob("*.toml"))


def load_profile(name: str, profile_dir: Path = DEFAULT_PROFILE_DIR) -> TargetProfile:
    """Load the profile called ``name`` (e.g. ``"rpi4"``) from ``profile_dir``.

    Raises:
        ProfileError: for an unknown target (listing the known ones) or an invalid file.
    """
    names = available_targets(profile_dir)
    if name not in names:
        raise ProfileError(
            f"unknown target {name!r}; expected one of {', '.join(names) or '(none found)'} "
            f"(profiles in {_display(profile_dir)}){did_you_mean(name, names)}"
        )
    return load_profile_file(profile_dir / f"{name}.toml")


def load_all(profile_dir: Path = DEFAULT_PROFILE_DIR) -> list[TargetProfile]:
    """Every profile in ``profile_dir``, validated."""
    return [load_profile_file(profile_dir / f"{n}.toml") for n in available_targets(profile_dir)]


def detect_target(
    device_tree_model: Path = Path("/proc/device-tree/model"),
    profile_dir: Path = DEFAULT_PROFILE_DIR,
) -> TargetProfile | None:
    """The profile whose ``device_tree_models`` matches this board's ``/proc/device-tree/model``.

    Returns None when the file is absent (not a device-tree board) or no profile claims the model.
    """
    try:
        model = device_tree_model.read_bytes().rstrip(b"\x00\n").decode("utf-8", "replace")
    except OSError:
        return None
    for profile in load_all(profile_dir):
        if any(model.startswith(prefix) for prefix in profile.device_tree_models):
            return profile
    return None
