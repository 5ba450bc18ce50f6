#!/usr/bin/env bash
# Idempotent creation of .venv-litert-torch/: litert-torch (PyTorch -> TFLite, generative API) in its own
# environment. litert-torch pulls jax, transformers, tensorflow-free litert tooling etc. (~2 GB) that the main
# .venv must not carry; converters/slm/tflite.py runs converters/slm/litert_export.py with this venv's python.
# torch is pinned to the CPU wheel on this disk (any other torch spec pulls a multi-GB CUDA build).
# Safe to run again: pip runs only when this script changed. A few minutes the first time.
# Usage: bash scripts/setup_litert_torch.sh
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '[setup-litert-torch] %s\n' "$*" >&2; }

LITERT_TORCH_VERSION=0.10.0
TORCH_VERSION=2.13.0
VENV=.venv-litert-torch
PY=${PYTHON:-python3}

if [ ! -x "$VENV/bin/python" ]; then
  say "creating $VENV"
  "$PY" -m venv "$VENV"
fi

stamp=$VENV/.edge-deploy-setup
want=$(sha256sum scripts/setup_litert_torch.sh | cut -c1-16)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  say "installing litert-torch $LITERT_TORCH_VERSION and torch $TORCH_VERSION into $VENV (first time: minutes, ~2 GB)"
  log=$VENV/pip-install.log
  pip_q() { "$VENV/bin/python" -m pip install --disable-pip-version-check "$@" >>"$log" 2>&1 \
    || { tail -n 40 "$log" >&2; say "pip install $* failed; full log: $log"; exit 1; }; }
  : >"$log"
  pip_q --upgrade pip
  # torch in the same command as litert-torch, so pip never resolves another (CUDA) torch.
  pip_q --find-links /opt/wheels "litert-torch==$LITERT_TORCH_VERSION" "torch==$TORCH_VERSION"
  # The generative API and the LiteRT interpreter must import before we call the venv ready.
  "$VENV/bin/python" -c "import litert_torch, torch; from litert_torch.generative.layers import kv_cache; \
from ai_edge_litert.interpreter import Interpreter; print('litert-torch', torch.__version__)" >>"$log" 2>&1 \
    || { tail -n 40 "$log" >&2; say "import check failed; log: $log"; exit 1; }
  echo "$want" >"$stamp"
  say "$VENV ready"
else
  say "$VENV is up to date"
fi
