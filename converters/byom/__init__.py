"""Bring your own model: a user's ONNX model converted for a target behind the same kind of gate as ours.

Stages, one module each: ``source`` (read and check the ONNX file, fix its input shapes), ``feeds`` (the
user's calibration / evaluation tensors from ``.npz``), ``gate`` (compare a candidate with the source by
task), ``build`` (fp32 copy or static INT8, ORT format, manifest and report, written to a temporary folder
and moved into place at the end). ``edge-deploy convert model`` is the argv adapter in front of
``build.convert_model``.

A user's own face models (``convert face --embedder / --detector``) live here too: ``face_embedder`` (read
and check an ONNX/TFLite/PyTorch embedder against the face contract), ``face_detector`` (a BlazeFace-shaped
detector), ``face_build`` (add them to a face folder behind the face gate).
"""
