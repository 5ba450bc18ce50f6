"""Face embedding on the device: aligned RGB chips -> face descriptors (dlib's: 150x150 -> 128-d), on any edge runtime.

The model is dlib's face-recognition ResNet: the ONNX export (``converters.face.dlib_resnet``; input ``chip``
float32 [N, 3, 150, 150] with raw 0..255 RGB values, the mean subtraction inside the graph; output
``descriptor`` float32 [N, 128]) on onnxruntime, or its TFLite twin (``converters.tflite``: input ``chip``
[1, 150, 150, 3], channels last; fp32, or full-integer INT8 with quantized input and output) on LiteRT. The
runtime comes from the file's bytes through ``edge.runtime.open_model``; layout, batch size and quantization
from the model's own tensor specs. Two chips show the same person when the Euclidean distance between their
descriptors is below ``DLIB_SAME_PERSON_THRESHOLD`` (0.6).

A user's own embedder (``edge-deploy convert face --embedder MODEL.onnx``) is shipped in the same form: one
input of raw 0..255 RGB chips (its normalisation put inside the graph by the conversion), NCHW or NHWC, of any
fixed square size S, and one output [N, D]: the chip size and the descriptor size are read from the model
(``chip_size``, ``descriptor_size``), and its same-person threshold from models.json (``edge.face.models``).
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


def check_chips(chips: object, size: int = CHIP_SIZE) -> np.ndarray:
    """Check a batch of aligned chips.

    Args:
        chips: uint8 array [N, size, size, 3], RGB, as images come (HWC).
        size: the chip side the embedder takes (dlib's 150).

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
        and chips.shape[1:] == (size, size, 3)
    )
    if not ok:
        expected = f"[N,{size},{size},3]"
        raise InputError(f"expected uint8 chips of shape {expected}, got {_describe(chips)}")
    return chips  # type: ignore[return-value]


def nchw_float32(chips: np.ndarray) -> np.ndarray:
    """uint8 chips [N, S, S, C] -> float32 [N, C, S, S], the same values (a uint8 is exact in float32).

    OpenCV's ``blobFromImages`` (scale 1, no mean, no resize) splits the channels plane by plane in C: on
    emulated Cortex-A72 0.11 M instructions for a 150x150 chip, where numpy's transposed copy with the cast
    took 0.55 M.
    """
    import cv2

    return np.asarray(cv2.dnn.blobFromImages(list(chips), 1.0))


def _quantize(x: np.ndarray, spec: TensorSpec) -> np.ndarray:
    """Float values -> the integer tensor ``spec`` takes: ``round(x / scale) + zero_point``, saturated."""
    scale, zero_point = spec.quantization  # type: ignore[misc]
    info = np.iinfo(spec.dtype)
    return np.clip(np.round(x / scale) + zero_point, info.min, info.max).astype(spec.dtype)


def _dequantize(q: np.ndarray, spec: TensorSpec) -> np.ndarray:
    """An integer tensor -> float32: ``scale * (q - zero_point)``."""
    scale, zero_point = spec.quantization  # type: ignore[misc]
    return (scale * (q.astype(np.int64) - zero_point)).astype(np.float32)


def _chip_geometry(input_shape: list, output_shape: list) -> tuple[int, bool, int] | None:
    """(chip side, channels last, descriptor size) of an embedder's tensor shapes, or None when they are not
    one 3-channel square image [N,3,S,S] / [N,S,S,3] in and one fixed-size vector [N,D] out."""
    if len(input_shape) != 4 or len(output_shape) != 2:
        return None
    size = output_shape[1]
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        return None
    for dims, last in ((input_shape[1:], False), (input_shape[1:], True)):
        side, channels = (dims[0], dims[2]) if last else (dims[1], dims[0])
        square = dims[:2] if last else dims[1:]
        if channels == 3 and isinstance(side, int) and side > 0 and square[0] == square[1]:
            return side, last, size
    return None


class FaceEmbedder:
    """A face descriptor from an ONNX model on onnxruntime, or a TFLite one on LiteRT: dlib's ResNet, or a
    user's own embedder converted by ``edge-deploy convert face --embedder``.

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
        #: Side of the square chips the model takes, and the length of the descriptors it returns.
        self.chip_size, self._channels_last, self.descriptor_size = self._geometry
        self._one_at_a_time = self._input.shape[0] == 1  # a fixed batch of one (TFLite twins)

    @property
    def backend(self) -> str:
        """The runtime that runs the model (``"onnxruntime"`` or ``"litert"``)."""
        return self._live().backend

    def _load(self, backend: str | None) -> Model:
        if not self.model_path.is_file():
            raise InferenceError(f"{self.model_path}: face embedding model not found")
        model = open_net(self.model_path, self.threads, self._options, backend)
        inputs = [(i.name, list(i.shape)) for i in model.inputs]
        outputs = [(o.name, list(o.shape)) for o in model.outputs]
        # The batch dimension may be named anything (or fixed), and so may the tensors: a TFLite file from
        # onnx2tf names them 'serving_default_chip:0' and 'PartitionedCall:0'. The shapes tell.
        geometry = _chip_geometry(inputs[0][1], outputs[0][1]) if len(inputs) == len(outputs) == 1 else None
        if geometry is None:
            model.close()
            raise InferenceError(
                f"{self.model_path}: not a face embedder: inputs {inputs}, outputs {outputs}; expected "
                f"input {INPUT_NAME!r} [N,3,S,S] or [N,S,S,3] and output {OUTPUT_NAME!r} [N,D] (dlib's: S "
                f"{CHIP_SIZE}, D {DESCRIPTOR_SIZE})"
            )
        self._geometry = geometry
        return model

    def _live(self) -> Model:
        if self._model is None:
            raise InferenceError(f"{self.model_path}: the face embedder is closed")
        return self._model

    def embed(self, chips: np.ndarray) -> np.ndarray:
        """Compute descriptors.

        Args:
            chips: uint8 [N, S, S, 3] RGB aligned chips, S = ``chip_size`` (dlib's 150:
                ``dlib.get_face_chip(img, shape, 150, 0.25)`` or ``edge.face.align``).

        Returns:
            float32 [N, D] descriptors (D = ``descriptor_size``, dlib's 128), in the order of the chips.

        Raises:
            InputError: for chips of another dtype or shape.
            InferenceError: if the embedder is closed or the runtime fails.
        """
        check_chips(chips, self.chip_size)
        model = self._live()
        batch = np.ascontiguousarray(chips, dtype=np.float32) if self._channels_last else nchw_float32(chips)
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
