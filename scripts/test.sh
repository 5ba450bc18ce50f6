#!/usr/bin/env bash
# The README's test command: set up (idempotent), lint, then run every test. Usage: bash scripts/test.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
# Each phase's wall time goes to the log, so the CI budget (40 minutes) is kept by measurement.
start=$SECONDS
phase() { echo "[test.sh] $1: $((SECONDS - start)) s since start" >&2; }
# Refuse at once when the disk cannot hold the side venvs and the suite's temporary folders (8.9 GB at the
# full run's peak), instead of failing 20 minutes in with "No space left on device" in hundreds of tests.
subset=()
[ $# -eq 0 ] || subset=(--subset)
"${PYTHON:-python3}" scripts/disk_space.py tests "${subset[@]}"
# What the suite needs beyond the main job, up front (each is instant once installed): the TFLite side venvs,
# the browser, and qemu-user + the emulated Pi's rootfs. (The tests would install them on first use too.)
# The side venvs are pip installs into their own folders (no apt), so in a fresh clone they run beside the
# main venv's, the browser's and the rootfs' set-up; those three run one after the other (apt's lock, and
# setup_web.sh adds to .venv). The side venvs need python3's venv module: when it is missing, setup.sh installs
# it first.
side=()
start_side_venvs() {  # each in its own process group (setsid), so that a failed step can stop it and its pip
  setsid bash scripts/setup_onnx2tf.sh "the TFLite tests" &
  side+=($!)
  setsid bash scripts/setup_litert_torch.sh "the language-model TFLite tests" &
  side+=($!)
}
trap 'for pid in "${side[@]}"; do kill -- "-$pid" 2>/dev/null || true; done' EXIT
"${PYTHON:-python3}" -c 'import venv, ensurepip' 2>/dev/null && start_side_venvs
bash scripts/setup.sh
phase "main venv ready"
((${#side[@]})) || start_side_venvs
bash scripts/setup_web.sh "the browser tests"
# qemu-user: the ARM checks (qemu-aarch64) and the AVX2-only checks (qemu-x86_64 -cpu Haswell)
bash scripts/arm/rootfs.sh
for pid in "${side[@]}"; do wait "$pid"; done  # set -e: a failed side venv fails the run here
side=()
phase "side venvs, browser and emulated Pi ready"
dirs=()
for d in edge converters edge_deploy fleet tests testsupport scripts benchmarks; do [ -d "$d" ] && dirs+=("$d"); done
.venv/bin/ruff check "${dirs[@]}"
.venv/bin/mypy  # edge/ and edge_deploy/ (the files and settings are in pyproject.toml)
phase "lint done; pytest starts"
# --durations: the slowest tests are named in every run's log, so the 40-minute budget can be kept by measurement
exec .venv/bin/python -m pytest -q -p no:cacheprovider --timeout=900 --durations=25 "$@"
