#!/usr/bin/env bash
# Browser build prerequisites (idempotent): Chromium + chromedriver for the tests, onnxruntime-web from npm
# (pinned in web/package.json + web/package-lock.json), selenium in the venv.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$ROOT/.venv}"

if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
    if [ "$(id -u)" -eq 0 ]; then
        apt-get install -y -q --no-install-recommends chromium chromium-driver || { apt-get update -q && apt-get install -y -q --no-install-recommends chromium chromium-driver; }
    else
        sudo apt-get install -y -q --no-install-recommends chromium chromium-driver
    fi
fi

if ! command -v npm >/dev/null; then
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -q && $SUDO apt-get install -y -q --no-install-recommends nodejs npm
fi

cd "$ROOT/web"
if [ -f package-lock.json ]; then
    [ -d node_modules/onnxruntime-web/dist ] || npm ci --no-audit --no-fund
else
    npm install --no-audit --no-fund
fi

"$VENV/bin/python" -c "import selenium" 2>/dev/null || "$VENV/bin/pip" install -q "selenium>=4.20"
echo "setup_web: chromium $(chromium --version 2>/dev/null | awk '{print $2}'), onnxruntime-web $(node -p "require('./node_modules/onnxruntime-web/package.json').version"), selenium $("$VENV/bin/python" -c 'import selenium; print(selenium.__version__)')"
