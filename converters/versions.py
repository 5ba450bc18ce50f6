"""The library versions a build ran with, recorded as ``versions`` in every build report and manifest.

A build made with other versions of these libraries can differ (opencv 5.1 moved the INT8 embedder's gate);
constraints.txt pins them, and this record shows which a given report or bundle was made with.
"""

from __future__ import annotations

import importlib.metadata
import platform

from edge import __version__

#: The distributions whose version can change what a build produces or measures.
LIBRARIES = (
    "numpy",
    "onnxruntime",
    "ai-edge-litert",
    "opencv-python-headless",
    "torch",
    "onnx",
    "onnxscript",
    "tokenizers",
    "gguf",
    "safetensors",
    "scikit-image",
    "tflite",
)


def library_versions() -> dict[str, str | None]:
    """Python's, edge-deploy's and each of ``LIBRARIES``' installed version (None: not installed)."""
    versions: dict[str, str | None] = {"python": platform.python_version(), "edge-deploy": __version__}
    for name in LIBRARIES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions
