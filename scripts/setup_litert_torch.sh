#!/usr/bin/env bash
# Idempotent creation of .venv-litert-torch/: litert-torch (PyTorch -> TFLite, generative API) in its own
# environment. litert-torch pulls jax, transformers, tensorflow-free litert tooling etc. (~2 GB) that the main
# .venv must not carry; converters/slm/tflite.py runs converters/slm/litert_export.py with this venv's python.
# Safe to run again: pip runs only when this script (or scripts/side_venv.sh) changed. A few minutes the
# first time. Installed on first use (the language-model TFLite tests call this), and up front by
# scripts/test.sh. Usage: bash scripts/setup_litert_torch.sh [WHO NEEDS IT, for the progress line]
set -euo pipefail
WHY="${*:-}"
cd "$(dirname "$0")/.."
source scripts/side_venv.sh

LITERT_TORCH_VERSION=0.10.0
# torch is pinned to the CPU wheel on this disk (any other torch spec pulls a multi-GB CUDA build), in the
# same command as litert-torch, so pip never resolves another torch. The generative API and the LiteRT
# interpreter must import.
TORCH_VERSION=2.13.0
side_venv setup-litert-torch .venv-litert-torch "litert-torch $LITERT_TORCH_VERSION and torch $TORCH_VERSION (~2 GB)" \
  ".venv-litert-torch/bin/python -c 'import litert_torch, torch; from litert_torch.generative.layers import kv_cache; \
from ai_edge_litert.interpreter import Interpreter; print(\"litert-torch\", torch.__version__)'" \
  -- --find-links /opt/wheels "litert-torch==$LITERT_TORCH_VERSION" "torch==$TORCH_VERSION"
