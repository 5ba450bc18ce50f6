#!/usr/bin/env bash
# The README's test command: set up (idempotent), lint, then run every test. Usage: bash scripts/test.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
dirs=()
for d in edge converters edge_deploy tests scripts benchmarks; do [ -d "$d" ] && dirs+=("$d"); done
.venv/bin/ruff check "${dirs[@]}"
.venv/bin/mypy  # edge/ and edge_deploy/ (the files and settings are in pyproject.toml)
exec .venv/bin/python -m pytest -q -p no:cacheprovider --timeout=900 "$@"
