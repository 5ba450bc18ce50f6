#!/usr/bin/env bash
# The README's test command: set up (idempotent), lint, then run every test. Usage: bash scripts/test.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# What the suite needs beyond the main job, up front (each is instant once installed): the TFLite side venvs
# and the browser. (The tests would install them on first use too; the emulated Pi's rootfs, qemu-user and
# debootstrap are installed that way, by scripts/arm/rootfs.sh.)
bash scripts/setup_onnx2tf.sh "the TFLite tests"
bash scripts/setup_litert_torch.sh "the language-model TFLite tests"
bash scripts/setup_web.sh "the browser tests"
dirs=()
for d in edge converters edge_deploy tests scripts benchmarks; do [ -d "$d" ] && dirs+=("$d"); done
.venv/bin/ruff check "${dirs[@]}"
.venv/bin/mypy  # edge/ and edge_deploy/ (the files and settings are in pyproject.toml)
exec .venv/bin/python -m pytest -q -p no:cacheprovider --timeout=900 "$@"
