#!/usr/bin/env bash
# Browser prerequisites (idempotent): Chromium + chromedriver (Debian) for the browser tests and benchmark,
# Node.js/npm and onnxruntime-web (npm, pinned in web/package.json + web/package-lock.json) for the page,
# selenium in the venv. Installed on first use (the browser tests and benchmark call this), and up front by
# scripts/test.sh. With --page, only what building the page needs (Node.js/npm, onnxruntime-web): what
# `edge-deploy build --target browser-wasm` runs on first use.
# Usage: bash scripts/setup_web.sh [--page] [WHO NEEDS IT, for the progress line]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$ROOT/.venv}"
PAGE_ONLY=0
if [ "${1:-}" = "--page" ]; then PAGE_ONLY=1; shift; fi
WHY="${*:-}"
say() { printf '[setup-web] %s\n' "$*" >&2; }
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"

apt_install() {
    say "installing Debian packages $*${WHY:+, needed by $WHY} (first time only)"
    $SUDO apt-get install -y -q --no-install-recommends "$@" >/dev/null \
        || { $SUDO apt-get update -q >/dev/null && $SUDO apt-get install -y -q --no-install-recommends "$@" >/dev/null; }
}

if [ "$PAGE_ONLY" = 0 ] && { ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; }; then
    apt_install chromium chromium-driver
fi
command -v npm >/dev/null || apt_install nodejs npm

cd "$ROOT/web"
if [ ! -d node_modules/onnxruntime-web/dist ]; then
    say "installing onnxruntime-web from npm into web/node_modules${WHY:+, needed by $WHY}"
    if [ -f package-lock.json ]; then npm ci --no-audit --no-fund >&2; else npm install --no-audit --no-fund >&2; fi
fi
[ "$PAGE_ONLY" = 1 ] && { say "ready: onnxruntime-web $(node -p "require('./node_modules/onnxruntime-web/package.json').version")"; exit 0; }

"$VENV/bin/python" -c "import selenium" 2>/dev/null || "$VENV/bin/pip" install -q -c "$ROOT/constraints.txt" "selenium>=4.20"
say "ready: chromium $(chromium --version 2>/dev/null | awk '{print $2}'), onnxruntime-web $(node -p "require('./node_modules/onnxruntime-web/package.json').version"), selenium $("$VENV/bin/python" -c 'import selenium; print(selenium.__version__)')"
