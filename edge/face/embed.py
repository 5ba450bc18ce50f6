"""Face embedding on the device: aligned 150x150 RGB chips -> dlib's 128-d face descriptors, via onnxruntime.

The model is the ONNX export of dlib's face-recognition ResNet (``converters.face.dlib_resnet``): input ``chip``
float32 [N, 3, 150, 150] with raw 0..255 RGB values (the mean subtraction is inside the graph), output
``descriptor`` float32 [N, 128]. Two chips show the same person when the Euclidean distance between their
descriptors is below ``DLIB_SAME_PERSON_THRESHOLD`` (0.6).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from edge.errors import InferenceError, InputError
from edge.runtime.ort_session import Optimization, build_session, import_onnxruntime

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


class FaceEmbedder:
    """dlib's face descriptor from an ONNX model, on onnxruntime's CPU provider.

    Use as a context manager or call ``close()``.
    """

    def __init__(self, model_path: Path, threads: int = 1, optimization: Optimization = Optimization.ALL) -> None:
        """Load the model.

        Args:
            model_path: the .onnx file written by ``converters.face.dlib_resnet.export_dlib_embedder``.
            threads: onnxruntime intra-op threads (>= 1).
            optimization: onnxruntime's graph optimisation; the accuracy gate uses ``Optimization.NONE`` to
                run a QDQ model unfused (docs/quantization.md).

        Raises:
            InputError: if ``threads`` is not a positive int.
            InferenceError: naming the file when it is missing, corrupt, or not a face embedder.
            MissingDependencyError: if onnxruntime is not installed.
        """
        self.model_path = Path(model_path)
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise InputError(f"threads = {threads!r}; expected a positive integer")
        self.threads = threads
        self.optimization = optimization
        self._session: Any = self._load()

    def _load(self) -> Any:
        import_onnxruntime("Face embedding")  # a missing runtime is named before a missing file
        if not self.model_path.is_file():
            raise InferenceError(f"{self.model_path}: face embedding model not found")
        session = build_session(
            self.model_path, self.threads, purpose="Face embedding", optimization=self.optimization
        )
        inputs = [(i.name, list(i.shape)) for i in session.get_inputs()]
        outputs = [(o.name, list(o.shape)) for o in session.get_outputs()]
        # The batch dimension may be named anything (or fixed): compare the rest.
        fits = [(n, s[1:]) for n, s in inputs] == [(INPUT_NAME, [3, CHIP_SIZE, CHIP_SIZE])] and [
            (n, s[1:]) for n, s in outputs
        ] == [(OUTPUT_NAME, [DESCRIPTOR_SIZE])]
        if not fits:
            raise InferenceError(
                f"{self.model_path}: not a face embedder: inputs {inputs}, outputs {outputs}; expected "
                f"input {INPUT_NAME!r} [N,3,{CHIP_SIZE},{CHIP_SIZE}] and output {OUTPUT_NAME!r} "
                f"[N,{DESCRIPTOR_SIZE}]"
            )
        return session

    def embed(self, chips: np.ndarray) -> np.ndarray:
        """Compute descriptors.

        Args:
            chips: uint8 [N, 150, 150, 3] RGB aligned chips (``dlib.get_face_chip(img, shape, 150, 0.25)``
                or ``edge.face.align``).

        Returns:
            float32 [N, 128] descriptors, in the order of the chips.

        Raises:
            InputError: for chips of another dtype or shape.
            InferenceError: if the embedder is closed or onnxruntime fails.
        """
        check_chips(chips)
        if self._session is None:
            raise InferenceError(f"{self.model_path}: the face embedder is closed")
        batch = np.ascontiguousarray(chips.transpose(0, 3, 1, 2), dtype=np.float32)
        try:
            (descriptors,) = self._session.run([OUTPUT_NAME], {INPUT_NAME: batch})
        except Exception as exc:  # onnxruntime's run errors share no narrower base class
            raise InferenceError(f"{self.model_path}: onnxruntime failed to run the model ({exc})") from exc
        return np.asarray(descriptors, dtype=np.float32)

    def close(self) -> None:
        """Release the onnxruntime session (idempotent)."""
        self._session = None

    def __enter__(self) -> FaceEmbedder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
