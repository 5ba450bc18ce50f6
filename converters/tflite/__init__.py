"""TFLite both ways. ONNX -> TFLite with onnx2tf in its own venv: ``prep`` (input shape, padding, sample data),
``convert``. TFLite -> ONNX for small float CNNs (MediaPipe's BlazeFace): ``frontend``, in this venv."""
