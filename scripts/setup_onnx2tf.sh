#!/usr/bin/env bash
# Idempotent creation of .venv-onnx2tf/: onnx2tf (ONNX -> TFLite) in its own environment.
# onnx2tf pins tensorflow 2.19, onnx 1.19, onnxruntime 1.23 and numpy 1.26, which clash with the main .venv
# (onnx 1.23, onnxruntime 1.32, numpy 2): converters/tflite.py runs its CLI from here in a subprocess.
# Safe to run again: pip runs only when this script changed. ~2.6 GB, a few minutes the first time.
# Usage: bash scripts/setup_onnx2tf.sh
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '[setup-onnx2tf] %s\n' "$*" >&2; }

ONNX2TF_VERSION=1.29.24
VENV=.venv-onnx2tf
PY=${PYTHON:-python3}

if [ ! -x "$VENV/bin/python" ]; then
  say "creating $VENV"
  "$PY" -m venv "$VENV"
fi

stamp=$VENV/.edge-deploy-setup
want=$(sha256sum scripts/setup_onnx2tf.sh | cut -c1-16)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  say "installing onnx2tf $ONNX2TF_VERSION and tensorflow into $VENV (first time: a few minutes, ~2.6 GB)"
  log=$VENV/pip-install.log
  pip_q() { "$VENV/bin/python" -m pip install --disable-pip-version-check "$@" >>"$log" 2>&1 \
    || { tail -n 40 "$log" >&2; say "pip install $* failed; full log: $log"; exit 1; }; }
  : >"$log"
  pip_q --upgrade pip
  # onnx2tf's wheel pins every dependency exactly (tensorflow 2.19.0, onnx 1.19.1, onnxruntime 1.23.0,
  # numpy 1.26.4, ...): let it choose them.
  pip_q "onnx2tf==$ONNX2TF_VERSION"
  # The CLI must start and find tensorflow before we call the venv ready.
  "$VENV/bin/onnx2tf" -h >>"$log" 2>&1 || { tail -n 40 "$log" >&2; say "onnx2tf -h failed; log: $log"; exit 1; }
  echo "$want" >"$stamp"
  say "$VENV ready"
else
  say "$VENV is up to date"
fi
