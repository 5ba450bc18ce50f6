"""Weight-only INT4 (MatMulNBits) and dynamic INT8 quantization of the exported decoder.

INT4 uses onnxruntime's ``MatMulNBitsQuantizer``: every MatMul whose second input is a constant 2-D weight
(the 7 projections of each layer and the LM head) becomes one ``MatMulNBits`` with blockwise symmetric
4-bit weights; activations stay float. Block size and accuracy level come from the target profile
(``quant.int4_block_size``, ``quant.int4_accuracy_level``). The attention MatMuls (both inputs activations)
are left alone. INT8 is ``quantize_dynamic`` on the same weight MatMuls (``MatMulInteger``).
"""

from __future__ import annotations

import contextlib
import logging
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from converters.quantize import weight_matmuls
from edge.errors import ConversionError, require

#: onnx refuses protobufs above 2 GB; an fp32 SmolLM2 is 0.65 GB, so one file is fine below this.
_SINGLE_FILE_LIMIT = 1_800_000_000


@dataclass(frozen=True)
class QuantizedModel:
    """A quantized ONNX decoder and what was done to it."""

    path: Path
    method: str
    settings: dict
    op_counts: dict[str, int]


def op_counts(path: Path) -> dict[str, int]:
    """How many nodes of each op type the graph at ``path`` has (weights are not loaded)."""
    onnx = require("onnx", "convert", "reading an ONNX graph")
    model = onnx.load(str(path), load_external_data=False)
    return dict(Counter(node.op_type for node in model.graph.node))


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """onnxruntime's quantizers log every tensor at INFO on the root logger; keep our output readable."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.setLevel(level)


def _save(model, out_path: Path) -> None:
    out_path.parent.mkdir(parents=True, exist_ok=True)
    external = model.model.ByteSize() > _SINGLE_FILE_LIMIT
    model.save_model_to_file(str(out_path), use_external_data_format=external)


def quantize_nbits(fp32_path: Path, out_path: Path, bits: int, block_size: int, accuracy_level: int) -> QuantizedModel:
    """Blockwise symmetric weight-only quantization of every weight MatMul (``MatMulNBits``).

    Args:
        fp32_path: the exported fp32 decoder.
        out_path: where to write the quantized model.
        bits: 4 or 8.
        block_size: weights per quantization block (profile ``quant.int4_block_size``).
        accuracy_level: MatMulNBits compute accuracy level 0-4 (profile ``quant.int4_accuracy_level``).

    Returns:
        The quantized model record.

    Raises:
        ConversionError: the quantizer failed or left a weight MatMul unquantized.
    """
    require("onnxruntime", "convert", f"INT{bits} weight-only quantization")
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    targets = weight_matmuls(fp32_path)
    try:
        with _quiet():
            quantizer = MatMulNBitsQuantizer(
                str(fp32_path),
                bits=bits,
                block_size=block_size,
                is_symmetric=True,
                accuracy_level=accuracy_level,
            )
            quantizer.process()
            _save(quantizer.model, Path(out_path))
    except (RuntimeError, ValueError, AssertionError) as exc:
        raise ConversionError(f"{fp32_path}: INT{bits} quantization failed ({type(exc).__name__}: {exc})") from exc
    counts = op_counts(out_path)
    if counts.get("MatMulNBits", 0) != len(targets):
        raise ConversionError(
            f"{out_path}: {counts.get('MatMulNBits', 0)} MatMulNBits nodes; expected {len(targets)} "
            "(one per weight MatMul)"
        )
    settings = {"bits": bits, "block_size": block_size, "accuracy_level": accuracy_level, "symmetric": True}
    return QuantizedModel(Path(out_path), "matmul_nbits", settings, counts)


def quantize_int4(fp32_path: Path, out_path: Path, block_size: int, accuracy_level: int) -> QuantizedModel:
    """INT4 round-to-nearest with onnxruntime's ``MatMulNBitsQuantizer`` (see :func:`quantize_nbits`)."""
    return quantize_nbits(fp32_path, out_path, 4, block_size, accuracy_level)


def quantize_int8_dynamic(fp32_path: Path, out_path: Path, per_channel: bool = True) -> QuantizedModel:
    """Dynamic INT8 quantization of the weight MatMuls (weights S8, activations quantized at run time).

    Raises:
        ConversionError: the quantizer failed.
    """
    require("onnxruntime", "convert", "INT8 quantization")
    from onnxruntime.quantization import QuantType, quantize_dynamic

    targets = weight_matmuls(fp32_path)
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with _quiet():
            quantize_dynamic(
                str(fp32_path),
                str(out_path),
                weight_type=QuantType.QInt8,
                per_channel=per_channel,
                nodes_to_quantize=targets,
                op_types_to_quantize=["MatMul"],
            )
    except (RuntimeError, ValueError) as exc:
        raise ConversionError(f"{fp32_path}: INT8 quantization failed ({type(exc).__name__}: {exc})") from exc
    settings = {"weights": "int8", "per_channel": per_channel, "activations": "dynamic uint8"}
    return QuantizedModel(out_path, "dynamic_int8", settings, op_counts(out_path))


#: What the SmolLM2 gates run (reports' ``gate_arithmetic``).
GATE_ARITHMETIC = (
    "every MatMulNBits at accuracy level 0: the shipped 4/8-bit weights, dequantized exactly, times fp32 "
    "activations, the same on any build host; level 4's int8 activations are computed differently by x86 "
    "AVX2, x86 VNNI, Cortex-A72 (NEON) and Cortex-A76 (dot product) kernels, so their effect is checked on "
    "the emulated Pi instead (docs/slm.md, 'What the gate measures')"
)


def gate_copy(model_path: Path, out_path: Path) -> tuple[Path, int]:
    """The model the teacher-forced gate and the greedy prompts run: ``model_path`` with every ``MatMulNBits`` at
    accuracy level 0 (``GATE_ARITHMETIC``).

    Returns:
        (the model to evaluate, how many nodes had another level). With none, ``model_path`` itself and 0.

    Raises:
        ConversionError: the copy cannot be written.
    """
    onnx = require("onnx", "convert", "rewriting the ONNX graph")
    model = onnx.load(str(model_path))
    changed = 0
    for node in model.graph.node:
        for attr in node.attribute:
            if node.op_type == "MatMulNBits" and attr.name == "accuracy_level" and attr.i != 0:
                attr.i, changed = 0, changed + 1
    if not changed:
        return Path(model_path), 0
    try:
        Path(out_path).parent.mkdir(parents=True, exist_ok=True)
        onnx.save(model, str(out_path), save_as_external_data=model.ByteSize() > _SINGLE_FILE_LIMIT)
    except (OSError, ValueError) as exc:
        raise ConversionError(f"{out_path}: cannot write the gate's copy of {model_path} ({exc})") from exc
    return Path(out_path), changed
