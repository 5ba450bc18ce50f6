#!/usr/bin/env bash
# Build the instruction-counting TCG plugin for qemu-aarch64 (QEMU 7.2, plugin API v1).
#
#   scripts/arm/build_plugin.sh [OUT.so]     default: <repo>/.cache/arm/libinsncount.so
#
# Load it with the dynamic qemu-aarch64 (Debian package qemu-user; the -static build cannot load plugins):
#   setarch x86_64 -R qemu-aarch64 -plugin OUT.so -d plugin -D counts.txt -cpu cortex-a72 -L ROOTFS ...
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
SRC="$REPO/scripts/arm/insncount.c"
OUT="${1:-$REPO/.cache/arm/libinsncount.so}"

command -v gcc >/dev/null || { echo "build_plugin: error: gcc not found (apt-get install -y gcc)" >&2; exit 1; }
if [[ -f "$OUT" && "$OUT" -nt "$SRC" ]]; then
    echo "build_plugin: $OUT is up to date" >&2
    exit 0
fi
mkdir -p "$(dirname "$OUT")"
# The API functions are resolved from the qemu binary at load time: allow undefined symbols.
gcc -O2 -Wall -Wextra -Wno-unused-parameter -std=gnu11 -shared -fPIC -fvisibility=hidden \
    -o "$OUT.tmp" "$SRC"
mv "$OUT.tmp" "$OUT"
echo "build_plugin: built $OUT" >&2
