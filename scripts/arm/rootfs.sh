#!/usr/bin/env bash
# Build (once) a Debian bookworm arm64 root filesystem for running device code under qemu-user.
#
#   scripts/arm/rootfs.sh [ROOTFS]        default: <repo>/.cache/arm/rootfs
#
# Idempotent: a finished rootfs carries ROOTFS/.edge-deploy-rootfs (the stamp) and is left alone; an
# unfinished one is rebuilt from scratch. The build runs without emulation (~30 s + download):
# `debootstrap --foreign` fetches the debs, then every deb is unpacked with dpkg-deb (the real second stage
# takes 10+ minutes under qemu). The Pi-like /proc/cpuinfo and /sys cpu files are NOT written here: the
# rootfs is shared by every CPU model, so converters/arm/guest.py writes them before each guest run.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
ROOTFS="${1:-$REPO/.cache/arm/rootfs}"
SUITE=bookworm
STAMP="$ROOTFS/.edge-deploy-rootfs"

log() { echo "rootfs: $*" >&2; }
die() { echo "rootfs: error: $*" >&2; exit 1; }

if [[ -f "$STAMP" ]]; then
    log "$ROOTFS is ready ($(cat "$STAMP"))"
    exit 0
fi

need=()
command -v qemu-aarch64-static >/dev/null || need+=(qemu-user-static)
command -v qemu-aarch64 >/dev/null || need+=(qemu-user)
command -v debootstrap >/dev/null || need+=(debootstrap)
if ((${#need[@]})); then
    [[ $EUID -eq 0 ]] || die "missing ${need[*]}; run as root or: sudo apt-get install -y ${need[*]}"
    log "installing ${need[*]} (first time only: to run device code on an emulated Raspberry Pi)"
    apt-get -o DPkg::Lock::Timeout=600 install -y -q "${need[@]}" >/dev/null \
        || { apt-get -o DPkg::Lock::Timeout=600 update -q >/dev/null \
             && apt-get -o DPkg::Lock::Timeout=600 install -y -q "${need[@]}" >/dev/null; } \
        || die "apt-get install ${need[*]} failed"
fi
[[ $EUID -eq 0 ]] || die "debootstrap needs root (it creates device nodes and chowns files)"

# The mirror this machine already uses (deb822 first, then the one-line format).
mirror=""
if [[ -f /etc/apt/sources.list.d/debian.sources ]]; then
    mirror="$(awk '/^URIs:/ {u=$2} /^Suites:/ && u && $0 ~ /[ ]'"$SUITE"'([ ]|$)/ {print u; exit}' \
        /etc/apt/sources.list.d/debian.sources)"
fi
if [[ -z "$mirror" && -f /etc/apt/sources.list ]]; then
    mirror="$(awk '$1 == "deb" && $3 == "'"$SUITE"'" {print $2; exit}' /etc/apt/sources.list)"
fi
[[ -n "$mirror" ]] || die "no $SUITE mirror found in /etc/apt/sources.list.d/debian.sources or /etc/apt/sources.list"

work="$ROOTFS.partial"
rm -rf "$work" "$ROOTFS"
mkdir -p "$(dirname "$ROOTFS")"
start=$SECONDS
log "debootstrap --foreign arm64 $SUITE minbase+python3 from $mirror"
debootstrap --arch=arm64 --foreign --variant=minbase --include=python3,python3-venv,ca-certificates \
    "$SUITE" "$work" "$mirror" >"$work.log" 2>&1 \
    || { tail -n 20 "$work.log" >&2; die "debootstrap failed (log: $work.log)"; }

log "unpacking $(ls "$work"/var/cache/apt/archives/*.deb | wc -l) debs"
for deb in "$work"/var/cache/apt/archives/*.deb; do
    dpkg-deb --fsys-tarfile "$deb" | tar -x --keep-directory-symlink -C "$work" \
        || die "cannot unpack $deb"
done

# debootstrap --foreign leaves proc as a symlink to the host's /proc: the guest must not see x86 cpuinfo.
rm -rf "$work/proc"
mkdir -p "$work/proc" "$work/sys/devices/system/cpu" "$work/opt/site" "$work/opt/edge" "$work/tmp"
chmod 1777 "$work/tmp"
[[ -x "$work/usr/bin/python3" ]] || die "python3 missing from the unpacked rootfs"

py="$(readlink -f "$work/usr/bin/python3" | xargs basename)"
echo "debian $SUITE arm64, $py, built $(date -u +%FT%TZ) from $mirror" >"$work/.edge-deploy-rootfs"
mv "$work" "$ROOTFS"
rm -f "$work.log"
log "ready in $((SECONDS - start)) s: $ROOTFS ($(du -sh "$ROOTFS" | cut -f1))"
