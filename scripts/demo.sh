#!/usr/bin/env bash
# The README's main job: set up (idempotent), then run the whole face job end to end.
# Usage: bash scripts/demo.sh [edge-deploy demo options, e.g. -o out/demo --target rpi4]
set -euo pipefail
cd "$(dirname "$0")/.."
# Refuse at once, with what is needed where, when the disk cannot hold the venv, the rootfs and the output.
"${PYTHON:-python3}" scripts/disk_space.py demo
bash scripts/setup.sh
exec .venv/bin/edge-deploy demo "$@"
