"""Quantization stage: ONNX fp32 -> INT8 QDQ (static), INT8 dynamic, fp16, INT4 / INT8 weight-only (MatMulNBits).

The next stage, ORT format for the target CPU, is ``converters.compile``.

The target profile decides what differs between cores (activation/weight types, per-channel, reduce-range,
which op types stay float, INT4 block size); calibration data is passed in, never picked here.
"""

from __future__ import annotations

import enum
import tempfile
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from edge.errors import ConversionError, InputError
from edge.profiles import CalibrationMethod, QuantType, TargetProfile


class QuantMode(enum.Enum):
    STATIC_QDQ = "static-qdq"
    DYNAMIC = "dynamic"
    FP16 = "fp16"
    INT4_WEIGHT_ONLY = "int4"
    #: 8-bit blockwise weights of every weight MatMul (MatMulNBits), activations float: for transformers whose
    #: activations per-tensor INT8 cannot hold (``convert model --weight-only``)
    INT8_WEIGHT_ONLY = "int8-weight-only"


@dataclass(frozen=True)
class QuantSettings:
    """Everything that decides a quantized graph; recorded verbatim in reports and manifests."""

    mode: QuantMode
    activations: QuantType = QuantType.UINT8
    weights: QuantType = QuantType.INT8
    per_channel: bool = True
    reduce_range: bool = False
    calibration: CalibrationMethod = CalibrationMethod.MINMAX
    keep_float_ops: tuple[str, ...] = ()
    #: Keep the output heads float: the last Conv/Gemm/MatMul before each graph output and the
    #: Softmax/reshaping ops after it (tiny layers whose rounding moves scores and boxes; see
    #: docs/quantization.md).
    float_heads: bool = False
    int4_block_size: int = 32
    int4_accuracy_level: int = 4
    extra: Mapping[str, object] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "mode": self.mode.value,
            "activations": self.activations.value,
            "weights": self.weights.value,
            "per_channel": self.per_channel,
            "reduce_range": self.reduce_range,
            "calibration": self.calibration.value,
            "keep_float_ops": list(self.keep_float_ops),
            "float_heads": self.float_heads,
            "int4_block_size": self.int4_block_size,
            "int4_accuracy_level": self.int4_accuracy_level,
            "extra": dict(self.extra),
        }


def settings_for(profile: TargetProfile, mode: QuantMode, **overrides: object) -> QuantSettings:
    """The profile's quantization settings for ``mode``; keyword overrides win.

    Args:
        profile: the target; its ``[quant]`` table gives the defaults.
        mode: what kind of quantization.
        **overrides: any QuantSettings field except ``mode`` (e.g. ``calibration=CalibrationMethod.ENTROPY``).

    Returns:
        The settings.

    Raises:
        InputError: an override that is not a setting.
    """
    q = profile.quant
    unknown = sorted(set(overrides) - (set(QuantSettings.__dataclass_fields__) - {"mode"}))
    if unknown:
        allowed = ", ".join(k for k in QuantSettings.__dataclass_fields__ if k != "mode")
        raise InputError(f"quantization override {', '.join(unknown)} is not a setting; expected one of {allowed}")
    base: dict[str, Any] = dict(
        mode=mode,
        activations=q.activations,
        weights=q.weights,
        per_channel=q.per_channel,
        reduce_range=q.reduce_range,
        calibration=q.calibration,
        keep_float_ops=q.keep_float_ops,
        int4_block_size=q.int4_block_size,
        int4_accuracy_level=q.int4_accuracy_level,
    )
    base.update(overrides)
    return QuantSettings(**base)


def _ort_quant_type(t: QuantType):
    from onnxruntime.quantization import QuantType as OrtQuantType

    return {QuantType.INT8: OrtQuantType.QInt8, QuantType.UINT8: OrtQuantType.QUInt8}[t]


def _ort_calibration(method: CalibrationMethod):
    from onnxruntime.quantization import CalibrationMethod as OrtCal

    return {
        CalibrationMethod.MINMAX: OrtCal.MinMax,
        CalibrationMethod.ENTROPY: OrtCal.Entropy,
        CalibrationMethod.PERCENTILE: OrtCal.Percentile,
    }[method]


class _FeedsReader:
    """onnxruntime's CalibrationDataReader over a list of feed dicts."""

    def __init__(self, feeds: Sequence[Mapping[str, np.ndarray]]) -> None:
        self._feeds = list(feeds)
        self._it = iter(self._feeds)

    def get_next(self):
        return next(self._it, None)

    def rewind(self) -> None:
        self._it = iter(self._feeds)


def _nodes_of_types(model_path: Path, op_types: Iterable[str]) -> list[str]:
    import onnx

    wanted = set(op_types)
    if not wanted:
        return []
    model = onnx.load(str(model_path), load_external_data=False)
    return [n.name for n in model.graph.node if n.op_type in wanted]


#: Ops that only reshape or normalise a head's output: walked through on the way back from a graph output.
_HEAD_PASS_THROUGH = frozenset(
    {"Softmax", "Sigmoid", "Reshape", "Transpose", "Flatten", "Identity", "Squeeze", "DepthToSpace"}
)
_HEAD_COMPUTE = frozenset({"Conv", "Gemm", "MatMul"})


def output_head_nodes(model_path: Path) -> list[str]:
    """Names of the nodes that form each graph output's head.

    From every graph output, walk back through ops that only reshape or normalise (Softmax, Reshape, ...)
    to the first Conv/Gemm/MatMul; all of those nodes are the head.
    """
    import onnx

    model = onnx.load(str(model_path), load_external_data=False)
    producer = {out: node for node in model.graph.node for out in node.output}
    names: list[str] = []
    for output in model.graph.output:
        node = producer.get(output.name)
        while node is not None and node.name not in names:
            names.append(node.name)
            if node.op_type in _HEAD_COMPUTE or node.op_type not in _HEAD_PASS_THROUGH:
                break
            node = producer.get(node.input[0])
    return names


def _excluded_nodes(model_path: Path, settings: QuantSettings) -> list[str]:
    nodes = _nodes_of_types(model_path, settings.keep_float_ops)
    if settings.float_heads:
        nodes += [n for n in output_head_nodes(model_path) if n not in nodes]
    return nodes


def _preprocess(model_in: Path, workdir: Path) -> Path:
    """ORT's recommended pre-processing (shape inference + optimisation) before quantization."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    out = workdir / "preprocessed.onnx"
    try:
        quant_pre_process(str(model_in), str(out), skip_symbolic_shape=True)
    except Exception as exc:  # onnxruntime raises untyped errors
        raise ConversionError(f"{model_in}: quantization pre-processing failed ({exc})") from exc
    return out


def quantize_model(
    model_in: Path,
    model_out: Path,
    settings: QuantSettings,
    calibration_feeds: Sequence[Mapping[str, np.ndarray]] | None = None,
) -> Path:
    """Quantize one ONNX model.

    Args:
        model_in: fp32 ONNX model.
        model_out: where to write the quantized model.
        settings: what to do (see ``settings_for``).
        calibration_feeds: input dicts for static quantization (required for ``STATIC_QDQ``).

    Returns:
        ``model_out``.

    Raises:
        InputError: static quantization without calibration data.
        ConversionError: onnxruntime's tooling failed (message names the model).
    """
    from onnxruntime import quantization as q

    model_out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="edq-") as tmp:
        try:
            if settings.mode is QuantMode.STATIC_QDQ:
                if not calibration_feeds:
                    raise InputError(f"{model_in}: static INT8 quantization needs calibration inputs; got none")
                pre = _preprocess(model_in, Path(tmp))
                q.quantize_static(
                    str(pre),
                    str(model_out),
                    _FeedsReader(calibration_feeds),
                    quant_format=q.QuantFormat.QDQ,
                    per_channel=settings.per_channel,
                    reduce_range=settings.reduce_range,
                    activation_type=_ort_quant_type(settings.activations),
                    weight_type=_ort_quant_type(settings.weights),
                    nodes_to_exclude=_excluded_nodes(pre, settings),
                    calibrate_method=_ort_calibration(settings.calibration),
                    extra_options=dict(settings.extra),
                )
            elif settings.mode is QuantMode.DYNAMIC:
                pre = _preprocess(model_in, Path(tmp))
                q.quantize_dynamic(
                    str(pre),
                    str(model_out),
                    per_channel=settings.per_channel,
                    reduce_range=settings.reduce_range,
                    weight_type=_ort_quant_type(settings.weights),
                    nodes_to_exclude=_excluded_nodes(pre, settings),
                )
            elif settings.mode is QuantMode.FP16:
                _to_fp16(model_in, model_out)
            else:
                _to_nbits(model_in, model_out, settings, 8 if settings.mode is QuantMode.INT8_WEIGHT_ONLY else 4)
        except (InputError, ConversionError):
            raise
        except Exception as exc:  # onnxruntime's tooling raises untyped errors
            raise ConversionError(f"{model_in}: {settings.mode.value} quantization failed ({exc})") from exc
    return model_out


def _to_fp16(model_in: Path, model_out: Path) -> None:
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model = onnx.load(str(model_in))
    # keep_io_types: callers keep feeding float32 and reading float32.
    onnx.save(convert_float_to_float16(model, keep_io_types=True), str(model_out))


def _to_nbits(model_in: Path, model_out: Path, settings: QuantSettings, bits: int) -> None:
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    quant = MatMulNBitsQuantizer(
        onnx.load(str(model_in)),
        bits=bits,
        block_size=settings.int4_block_size,
        is_symmetric=True,
        accuracy_level=settings.int4_accuracy_level,
    )
    quant.process()
    quant.model.save_model_to_file(str(model_out), use_external_data_format=False)


def weight_matmuls(path: Path) -> list[str]:
    """Names of the MatMul nodes whose second input is a constant 2-D initializer (what MatMulNBits replaces)."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    shapes = {init.name: tuple(init.dims) for init in model.graph.initializer}
    return [n.name for n in model.graph.node if n.op_type == "MatMul" and len(shapes.get(n.input[1], ())) == 2]


def op_counts(model_path: Path) -> Counter:
    """How many nodes of each op type a model has (to check the structure of quantized graphs)."""
    import onnx

    model = onnx.load(str(model_path), load_external_data=False)
    return Counter(n.op_type for n in model.graph.node)
