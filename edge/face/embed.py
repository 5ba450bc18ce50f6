"""Face embedding on the device: aligned 150x150 RGB chips -> dlib's 128-d face descriptors, on any edge runtime.

The model is dlib's face-recognition ResNet: the ONNX export (``converters.face.dlib_resnet``; input ``chip``
float32 [N, 3, 150, 150] with raw 0..255 RGB values, the mean subtraction inside the graph; output
``descriptor`` float32 [N, 128]) on onnxruntime, or its TFLite twin (``converters.tflite``: input ``chip``
[1, 150, 150, 3], channels last; fp32, or full-integer INT8 with quantized input and output) on LiteRT. The
runtime comes from the file's bytes through ``edge.runtime.open_model``; layout, batch size and quantization
from the model's own tensor specs. Two chips show the same person when the Euclidean distance between their
descriptors is below ``DLIB_SAME_PERSON_THRESHOLD`` (0.6).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edge.errors import InferenceError, InputError
from edge.face.models import open_net
from edge.runtime import LoadOptions, Model, Optimization, TensorSpec

CHIP_SIZE = 150
DESCRIPTOR_SIZE = 128
INPUT_NAME = "chip"
OUTPUT_NAME = "descriptor"


def _describe(chips: object) -> str:
    if isinstance(chips, np.ndarray):
        return f"{chips.dtype} array of shape {list(chips.shape)}"
    return type(chips).__name__


def check_chips(chips: object) -> np.ndarray:
    """Check a batch of aligned chips.

    Args:
        chips: uint8 array [N, 150, 150, 3], RGB, as images come (HWC).

    Returns:
        The same array.

    Raises:
        InputError: "expected uint8 chips of shape [N,150,150,3], got ..." for anything else (N >= 1).
    """
    ok = (
        isinstance(chips, np.ndarray)
        and chips.dtype == np.uint8
        and chips.ndim == 4
        and chips.shape[0] >= 1
        and chips.shape[1:] == (CHIP_SIZE, CHIP_SIZE, 3)
    )
    if not ok:
        expected = f"[N,{CHIP_SIZE},{CHIP_SIZE},3]"
        raise InputError(f"expected uint8 chips of shape {expected}, got {_describe(chips)}")
    return chips  # type: ignore[return-value]


def _quantize(x: np.ndarray, spec: TensorSpec) -> np.ndarray:
    """Float values -> the integer tensor ``spec`` takes: ``round(x / scale) + zero_point``, saturated."""
    scale, zero_point = spec.quantization  # type: ignore[misc]
    info = np.iinfo(spec.dtype)
    return np.clip(np.round(x / scale) + zero_point, info.min, info.max).astype(spec.dtype)


def _dequantize(q: np.ndarray, spec: TensorSpec) -> np.ndarray:
    """An integer tensor -> float32: ``scale * (q - zero_point)``."""
    scale, zero_point = spec.quantization  # type: ignore[misc]
    return (scale * (q.astype(np.int64) - zero_point)).astype(np.float32)


class FaceEmbedder:
    """dlib's face descriptor from an ONNX model on onnxruntime, or a TFLite one on LiteRT.

    Use as a context manager or call ``close()``.
    """

    def __init__(
        self,
        model_path: Path,
        threads: int = 1,
        optimization: Optimization = Optimization.ALL,
        *,
        precise_int8: bool = True,
        backend: str | None = None,
    ) -> None:
        """Load the model.

        Args:
            model_path: the .onnx file written by ``converters.face.dlib_resnet.export_dlib_embedder`` (or its
                .ort), or a TFLite twin from ``converters.tflite``.
            threads: intra-op threads (>= 1).
            optimization: onnxruntime's graph optimisation; the accuracy gate uses ``Optimization.NONE`` to
                run a QDQ model unfused (docs/quantization.md). ONNX / ORT only.
            precise_int8: onnxruntime's non-saturating x86 INT8 kernels (``edge.cpu``); ONNX / ORT only.
            backend: force a backend (``"onnxruntime"``, ``"litert"``); None: the one for the file's format.

        Raises:
            InputError: if ``threads`` is not a positive int, or onnxruntime settings are given for a TFLite file.
            InferenceError: naming the file when it is missing, corrupt, or not a face embedder.
            MissingDependencyError: if the runtime is not installed.
        """
        self.model_path = Path(model_path)
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise InputError(f"threads = {threads!r}; expected a positive integer")
        self.threads = threads
        self.optimization = optimization
        # a batch of however many faces a frame has: a new shape per count
        self._options = LoadOptions(optimization, precise_int8, purpose="Face embedding", varying_shapes=True)
        self._model: Model | None = self._load(backend)
        (self._input,), (self._output,) = self._model.inputs, self._model.outputs
        self._channels_last = self._input.shape[-1] == 3
        self._one_at_a_time = self._input.shape[0] == 1  # a fixed batch of one (TFLite twins)

    @property
    def backend(self) -> str:
        """The runtime that runs the model (``"onnxruntime"`` or ``"litert"``)."""
        return self._live().backend

    def _load(self, backend: str | None) -> Model:
        if not self.model_path.is_file():
            raise InferenceError(f"{self.model_path}: face embedding model not found")
        model = open_net(self.model_path, self.threads, self._options, backend)
        chip_shapes = ([3, CHIP_SIZE, CHIP_SIZE], [CHIP_SIZE, CHIP_SIZE, 3])
        inputs = [(i.name, list(i.shape)) for i in model.inputs]
        outputs = [(o.name, list(o.shape)) for o in model.outputs]
        # The batch dimension may be named anything (or fixed), and so may the tensors: a TFLite file from
        # onnx2tf names them 'serving_default_chip:0' and 'PartitionedCall:0'. The shapes tell.
        fits = (
            len(inputs) == 1
            and inputs[0][1][1:] in chip_shapes
            and len(outputs) == 1
            and outputs[0][1][1:] == [DESCRIPTOR_SIZE]
        )
        if not fits:
            model.close()
            raise InferenceError(
                f"{self.model_path}: not a face embedder: inputs {inputs}, outputs {outputs}; expected "
                f"input {INPUT_NAME!r} [N,3,{CHIP_SIZE},{CHIP_SIZE}] or [N,{CHIP_SIZE},{CHIP_SIZE},3] and output "
                f"{OUTPUT_NAME!r} [N,{DESCRIPTOR_SIZE}]"
            )
        return model

    def _live(self) -> Model:
        if self._model is None:
            raise InferenceError(f"{self.model_path}: the face embedder is closed")
        return self._model

    def embed(self, chips: np.ndarray) -> np.ndarray:
        """Compute descriptors.

        Args:
            chips: uint8 [N, 150, 150, 3] RGB aligned chips (``dlib.get_face_chip(img, shape, 150, 0.25)``
                or ``edge.face.align``).

        Returns:
            float32 [N, 128] descriptors, in the order of the chips.

        Raises:
            InputError: for chips of another dtype or shape.
            InferenceError: if the embedder is closed or the runtime fails.
        """
        check_chips(chips)
        model = self._live()
        batch = chips if self._channels_last else chips.transpose(0, 3, 1, 2)
        batch = np.ascontiguousarray(batch, dtype=np.float32)
        if self._input.quantization is not None and self._input.dtype.kind in "iu":
            batch = _quantize(batch, self._input)
        parts = [batch[i : i + 1] for i in range(len(batch))] if self._one_at_a_time else [batch]
        out = np.concatenate([model.run({self._input.name: part})[self._output.name] for part in parts])
        if self._output.quantization is not None and self._output.dtype.kind in "iu":
            return _dequantize(out, self._output)
        return np.asarray(out, dtype=np.float32)

    def close(self) -> None:
        """Release the runtime's model (idempotent)."""
        if self._model is not None:
            self._model.close()
        self._model = None

    def __enter__(self) -> FaceEmbedder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
