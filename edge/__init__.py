"""edge-deploy, device side: runtimes, pipelines, telemetry.

Nothing in this package imports ``converters``, torch, onnx or tensorflow: a Raspberry Pi has only the
``device`` extra installed (tests/unit/test_imports.py enforces it).
"""

__version__ = "0.1.0"
