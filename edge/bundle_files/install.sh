#!/bin/sh
# Install an edge-deploy bundle on a Raspberry Pi (Raspberry Pi OS bookworm, 64-bit), offline.
#
#   sudo ./install.sh              verify the bundle, install it, create the service user, install the unit
#   sudo ./install.sh --enable     ... and enable + start the service
#   ./install.sh --prefix /tmp/x   install under /tmp/x (no user, no systemctl, no root needed)
#   ./install.sh --dry-run         print what would be done, change nothing
#
# Idempotent: running it again replaces the bundle and the venv's packages, keeps an edited config.
# Exit codes: 0 ok, 1 a step failed, 2 bad arguments, 3 wrong platform/Python, 6 the bundle failed verification.
set -eu

SERVICE_USER=edge-deploy
PREFIX=/
ENABLE=0
DRY_RUN=0
PYTHON=python3
BUNDLE=$(CDPATH='' cd -- "$(dirname -- "$0")" && pwd)

usage() {
    sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
    echo
    echo "options: --prefix DIR  --enable  --dry-run  --python PYTHON  --help"
}

die() { code=$1; shift; printf 'install.sh: error: %s\n' "$*" >&2; exit "$code"; }
say() { printf 'install.sh: %s\n' "$*"; }
run() {
    if [ "$DRY_RUN" = 1 ]; then echo "would run: $*"; else "$@"; fi
}

while [ $# -gt 0 ]; do
    case "$1" in
        --prefix)
            [ $# -ge 2 ] || die 2 "--prefix needs a folder"
            case "$2" in /*) PREFIX=$2 ;; *) die 2 "--prefix '$2': expected an absolute path" ;; esac
            shift 2 ;;
        --prefix=*)
            PREFIX=${1#--prefix=}
            case "$PREFIX" in /*) ;; *) die 2 "--prefix '$PREFIX': expected an absolute path" ;; esac
            shift ;;
        --python)
            [ $# -ge 2 ] || die 2 "--python needs an interpreter"
            PYTHON=$2; shift 2 ;;
        --enable) ENABLE=1; shift ;;
        --dry-run) DRY_RUN=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) die 2 "unknown option '$1' (see --help)" ;;
    esac
done

# The prefix is written into the config (a TOML string, through sed): only plain path characters.
case "$PREFIX" in
    *[!A-Za-z0-9/._+-]*) die 2 "--prefix '$PREFIX': expected a path of letters, digits and / . _ + - only" ;;
esac
PREFIX=${PREFIX%/}
SYSTEM=0
[ -z "$PREFIX" ] && SYSTEM=1
if [ "$SYSTEM" = 0 ] && [ "$ENABLE" = 1 ]; then
    die 2 "--enable starts the system service; it cannot be combined with --prefix"
fi
APP=$PREFIX/opt/edge-deploy
ETC=$PREFIX/etc/edge-deploy
STATE=$PREFIX/var/lib/edge-deploy
UNIT_DIR=$PREFIX/etc/systemd/system

[ -f "$BUNDLE/manifest.json" ] || die 1 "$BUNDLE/manifest.json: not found; run install.sh from an extracted bundle"
[ -f "$BUNDLE/wheels/requirements.txt" ] || \
    die 1 "$BUNDLE/wheels: no wheelhouse in this bundle (built with --no-wheels); rebuild it with wheels"
OWN_WHEEL=
for wheel in "$BUNDLE"/wheels/edge_deploy-*.whl; do
    [ -f "$wheel" ] && OWN_WHEEL=$wheel
done
[ -n "$OWN_WHEEL" ] || die 1 "$BUNDLE/wheels: edge-deploy's own wheel is missing"

# --- platform: the wheels are for aarch64 and CPython 3.11 --------------------------------------------------
MACHINE=$(uname -m)
PYVER=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) || \
    die 3 "'$PYTHON' does not run; install python3 (apt-get install python3 python3-venv)"
if [ "$MACHINE" != aarch64 ] || [ "$PYVER" != 3.11 ]; then
    msg="this machine is $MACHINE with Python $PYVER; the bundle's wheels are for aarch64 and Python 3.11 (Raspberry Pi OS bookworm, 64-bit)"
    if [ "$DRY_RUN" = 1 ]; then say "warning: $msg; a real run would stop here"; else die 3 "$msg"; fi
fi

# --- verify every file against the manifest, before anything is copied --------------------------------------
say "verifying $BUNDLE against manifest.json"
PYTHONPATH=$OWN_WHEEL "$PYTHON" - "$BUNDLE" <<'PY' || exit 6
import sys
from edge.bundle import verify_bundle
from edge.errors import BundleError
try:
    report = verify_bundle(sys.argv[1])
except BundleError as exc:
    print(f"install.sh: error: {exc}", file=sys.stderr)
    sys.exit(6)
print(f"install.sh: {report.files} files, {report.total_bytes} bytes: all match (target {report.target})")
PY

# --- files: the bundle, a venv with the wheels, the config template, the unit -------------------------------
say "installing into ${PREFIX:-/}"
run mkdir -p "$APP" "$ETC" "$STATE"
run rm -rf "$APP/bundle.new"
run cp -R "$BUNDLE" "$APP/bundle.new"
run rm -rf "$APP/bundle"
run mv "$APP/bundle.new" "$APP/bundle"
if [ ! -x "$APP/venv/bin/python" ]; then
    run "$PYTHON" -m venv "$APP/venv"
fi
run "$APP/venv/bin/python" -m pip install --no-index --find-links "$APP/bundle/wheels" --upgrade \
    -r "$APP/bundle/wheels/requirements.txt"
# Same version number, new code: always reinstall our own wheel.
run "$APP/venv/bin/python" -m pip install --no-index --no-deps --force-reinstall \
    "$APP/bundle/wheels/$(basename "$OWN_WHEEL")"
if [ -f "$BUNDLE/config/edge-deploy.example.toml" ]; then
    run cp "$BUNDLE/config/edge-deploy.example.toml" "$ETC/edge-deploy.example.toml"
    if [ -f "$ETC/edge-deploy.toml" ]; then
        say "keeping the existing $ETC/edge-deploy.toml"
    else
        # The template's model paths point at /opt/edge-deploy/{face,slm}; the bundle keeps them in bundle/models.
        SLM_SED='s#^\# model_dir = "/opt/edge-deploy/slm"$#&#'
        [ -d "$BUNDLE/models/slm" ] && SLM_SED="s#^\\# model_dir = \"/opt/edge-deploy/slm\"\$#model_dir = \"$APP/bundle/models/slm\"#"
        if [ "$DRY_RUN" = 1 ]; then
            echo "would write: $ETC/edge-deploy.toml (from the template, models in $APP/bundle/models)"
        else
            sed -e "s#^models = \"/opt/edge-deploy/face\"\$#models = \"$APP/bundle/models/face\"#" -e "$SLM_SED" \
                "$BUNDLE/config/edge-deploy.example.toml" > "$ETC/edge-deploy.toml"
        fi
    fi
fi
if [ -f "$BUNDLE/systemd/edge-deploy.service" ]; then
    run mkdir -p "$UNIT_DIR"
    run cp "$BUNDLE/systemd/edge-deploy.service" "$UNIT_DIR/edge-deploy.service"
else
    say "this bundle has no systemd unit; skipping the service"
fi

# --- system actions: only for a real install into / ---------------------------------------------------------
if [ "$SYSTEM" = 0 ]; then
    say "--prefix: skipping the system user, ownership and systemctl"
    say "done: $APP/venv/bin/edge-deploy --help"
    exit 0
fi
if [ "$DRY_RUN" = 0 ] && [ "$(id -u)" != 0 ]; then
    die 1 "creating the user '$SERVICE_USER' and installing the unit need root: run with sudo (or use --prefix)"
fi
if id -u "$SERVICE_USER" >/dev/null 2>&1; then
    say "user '$SERVICE_USER' exists"
else
    run useradd --system --home-dir /var/lib/edge-deploy --no-create-home --shell /usr/sbin/nologin "$SERVICE_USER"
fi
if getent group video >/dev/null 2>&1; then
    run usermod -a -G video "$SERVICE_USER"
fi
run chown -R "$SERVICE_USER:$SERVICE_USER" "$STATE"
if command -v systemctl >/dev/null 2>&1 && [ -f "$UNIT_DIR/edge-deploy.service" ]; then
    run systemctl daemon-reload
    if [ "$ENABLE" = 1 ]; then
        run systemctl enable --now edge-deploy.service
    else
        say "not started; edit $ETC/edge-deploy.toml, then: sudo systemctl enable --now edge-deploy"
    fi
fi
say "done"
