"""ONNX -> TFLite with onnx2tf in its own venv: ``prep`` (input shape, padding, sample data), ``convert``."""
