#!/usr/bin/env bash
# The README's test command: set up (idempotent), lint, then run every test. Usage: bash scripts/test.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# What the suite needs beyond the main job, up front (each is instant once installed): the TFLite side venvs,
# the browser, and qemu-user + the emulated Pi's rootfs. (The tests would install them on first use too.)
bash scripts/setup_onnx2tf.sh "the TFLite tests"
bash scripts/setup_litert_torch.sh "the language-model TFLite tests"
bash scripts/setup_web.sh "the browser tests"
# qemu-user: the ARM checks (qemu-aarch64) and the AVX2-only checks (qemu-x86_64 -cpu Haswell)
bash scripts/arm/rootfs.sh
dirs=()
for d in edge converters edge_deploy tests scripts benchmarks; do [ -d "$d" ] && dirs+=("$d"); done
.venv/bin/ruff check "${dirs[@]}"
.venv/bin/mypy  # edge/ and edge_deploy/ (the files and settings are in pyproject.toml)
# --durations: the slowest tests are named in every run's log, so the 40-minute budget can be kept by measurement
exec .venv/bin/python -m pytest -q -p no:cacheprovider --timeout=900 --durations=25 "$@"
