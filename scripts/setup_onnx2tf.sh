#!/usr/bin/env bash
# Idempotent creation of .venv-onnx2tf/: onnx2tf (ONNX -> TFLite) in its own environment.
# onnx2tf pins tensorflow 2.19, onnx 1.19, onnxruntime 1.23 and numpy 1.26, which clash with the main .venv
# (onnx 1.23, onnxruntime 1.32, numpy 2): converters/tflite.py runs its CLI from here in a subprocess.
# Safe to run again: pip runs only when this script (or scripts/side_venv.sh) changed. ~2.6 GB, a few
# minutes the first time. Installed on first use (the TFLite tests and benchmarks call this), and up front by
# scripts/test.sh. Usage: bash scripts/setup_onnx2tf.sh [WHO NEEDS IT, for the progress line]
set -euo pipefail
WHY="${*:-}"
cd "$(dirname "$0")/.."
source scripts/side_venv.sh

ONNX2TF_VERSION=1.29.24
# onnx2tf's wheel pins every dependency exactly (tensorflow 2.19.0, onnx 1.19.1, onnxruntime 1.23.0,
# numpy 1.26.4, ...): let it choose them. The CLI must start and find tensorflow.
side_venv setup-onnx2tf .venv-onnx2tf "onnx2tf $ONNX2TF_VERSION and tensorflow (~2.6 GB)" \
  ".venv-onnx2tf/bin/onnx2tf -h" -- "onnx2tf==$ONNX2TF_VERSION"
