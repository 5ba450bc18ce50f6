#!/usr/bin/env bash
# Cross-build (once) llama.cpp's llama-bench for aarch64: the peer of the ARM race (benchmarks/slm_arm_race.py).
#
#   scripts/arm/build_llama_cpp.sh [CACHE]      default: <repo>/.cache/arm/llama.cpp
#
# Source: the llama-cpp-python sdist from PyPI (pinned version and sha256 below; it vendors llama.cpp under
# vendor/llama.cpp), the one the `bench` extra installs. Compiler: Debian's gcc/g++-aarch64-linux-gnu
# (apt-get installed if missing). Static, GGML_NATIVE=OFF, no OpenMP (counts are single-thread), one build per
# core of the Pis we emulate:
#   CACHE/<version>-armv8-a/llama-bench                    Cortex-A72 (Pi 4): NEON, no dot product
#   CACHE/<version>-armv8.2-a+dotprod+fp16/llama-bench     Cortex-A76 (Pi 5): SDOT/UDOT, fp16
# Idempotent: a finished build carries a .stamp beside the binary and is left alone (a second run is instant);
# an interrupted one is rebuilt. Run it under qemu-aarch64 (-cpu cortex-a72 / cortex-a76) with no rootfs.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CACHE="${1:-$REPO/.cache/arm/llama.cpp}"
VERSION=0.3.36
SDIST="llama_cpp_python-$VERSION.tar.gz"
SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
ARCHES=("armv8-a" "armv8.2-a+dotprod+fp16")
JOBS="${JOBS:-2}"

log() { echo "build_llama_cpp: $*" >&2; }
die() { echo "build_llama_cpp: error: $*" >&2; exit 1; }

all_built() {
    local arch
    for arch in "${ARCHES[@]}"; do
        [[ -f "$CACHE/$VERSION-$arch/.stamp" && -x "$CACHE/$VERSION-$arch/llama-bench" ]] || return 1
    done
}

if all_built; then
    log "up to date: $(printf "$CACHE/$VERSION-%s/llama-bench " "${ARCHES[@]}")"
    exit 0
fi

# One build at a time (two benchmarks may ask at once); the second finds the first's binaries.
mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9
if all_built; then
    log "up to date (built meanwhile)"
    exit 0
fi

need=()
command -v aarch64-linux-gnu-gcc >/dev/null || need+=(gcc-aarch64-linux-gnu)
command -v aarch64-linux-gnu-g++ >/dev/null || need+=(g++-aarch64-linux-gnu)
command -v cmake >/dev/null || need+=(cmake)
if ((${#need[@]})); then
    [[ $EUID -eq 0 ]] || die "missing ${need[*]}; run as root or: sudo apt-get install -y ${need[*]}"
    log "installing ${need[*]} (first time only: to cross-build llama.cpp for the emulated Pi)"
    apt-get -o DPkg::Lock::Timeout=600 install -y -q "${need[@]}" >/dev/null \
        || { apt-get -o DPkg::Lock::Timeout=600 update -q >/dev/null \
             && apt-get -o DPkg::Lock::Timeout=600 install -y -q "${need[@]}" >/dev/null; } \
        || die "apt-get install ${need[*]} failed"
fi

mkdir -p "$CACHE/src"
if ! echo "$SHA256  $CACHE/src/$SDIST" | sha256sum -c --status 2>/dev/null; then
    py="$REPO/.venv/bin/python"
    [[ -x "$py" ]] || py=python3
    log "downloading the llama-cpp-python $VERSION sdist from PyPI"
    rm -f "$CACHE/src/$SDIST"
    "$py" -m pip download --disable-pip-version-check -q --no-binary :all: --no-deps \
        "llama-cpp-python==$VERSION" -d "$CACHE/src" >/dev/null || die "pip download llama-cpp-python==$VERSION failed"
    echo "$SHA256  $CACHE/src/$SDIST" | sha256sum -c --status || die "$SDIST: sha256 is not $SHA256"
fi
SRC="$CACHE/src/llama_cpp_python-$VERSION/vendor/llama.cpp"
if [[ ! -f "$SRC/CMakeLists.txt" ]]; then
    rm -rf "$CACHE/src/llama_cpp_python-$VERSION"
    tar -xzf "$CACHE/src/$SDIST" -C "$CACHE/src" || die "cannot unpack $SDIST"
fi

# One build tree for both: -march reaches only the ggml-cpu target (GGML_CPU_ARM_ARCH), so the second build
# recompiles that target alone. Named after the first build, so an interrupted first build resumes.
build="$CACHE/build-$VERSION-${ARCHES[0]}"
for arch in "${ARCHES[@]}"; do
    out="$CACHE/$VERSION-$arch"
    [[ -f "$out/.stamp" && -x "$out/llama-bench" ]] && { log "$arch: up to date"; continue; }
    rm -rf "$out" "$out.tmp"
    start=$SECONDS
    log "$arch: configuring ($build)"
    cmake -S "$SRC" -B "$build" -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_SYSTEM_NAME=Linux -DCMAKE_SYSTEM_PROCESSOR=aarch64 \
        -DCMAKE_C_COMPILER=aarch64-linux-gnu-gcc -DCMAKE_CXX_COMPILER=aarch64-linux-gnu-g++ \
        -DBUILD_SHARED_LIBS=OFF -DCMAKE_EXE_LINKER_FLAGS=-static \
        -DGGML_NATIVE=OFF -DGGML_CPU_ARM_ARCH="$arch" -DGGML_OPENMP=OFF \
        -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
        -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_TOOLS=ON >"$build.log" 2>&1 \
        || { tail -n 20 "$build.log" >&2; die "cmake configure for $arch failed (log: $build.log)"; }
    log "$arch: building llama-bench (-j$JOBS; the first build takes many minutes)"
    cmake --build "$build" --target llama-bench -j "$JOBS" >>"$build.log" 2>&1 \
        || { tail -n 20 "$build.log" >&2; die "build for $arch failed (log: $build.log)"; }
    grep -q -- "-march=$arch" "$build/ggml/src/CMakeFiles/ggml-cpu.dir/flags.make" \
        || die "$arch: ggml-cpu was not compiled with -march=$arch (see $build/ggml/src/CMakeFiles/ggml-cpu.dir)"
    mkdir -p "$out.tmp"
    cp "$build/bin/llama-bench" "$out.tmp/llama-bench"
    if command -v file >/dev/null && ! file "$out.tmp/llama-bench" | grep -q "statically linked"; then
        die "$arch: llama-bench is not statically linked"
    fi
    echo "llama.cpp from llama-cpp-python $VERSION ($SHA256), -march=$arch, static, GGML_NATIVE=OFF," \
        "GGML_OPENMP=OFF, aarch64-linux-gnu-gcc $(aarch64-linux-gnu-gcc -dumpversion), built $(date -u +%FT%TZ)" \
        >"$out.tmp/.stamp"
    mv "$out.tmp" "$out"
    log "$arch: ready in $((SECONDS - start)) s: $out/llama-bench"
done
all_built && rm -rf "$build" "$build.log"
