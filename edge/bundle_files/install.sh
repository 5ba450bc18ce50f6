#!/bin/sh
# Install an edge-deploy bundle on a Raspberry Pi (Raspberry Pi OS bookworm, 64-bit), offline.
#
#   sudo ./install.sh              verify the bundle, install it, create the service user, install the unit
#   sudo ./install.sh --enable     ... and enable + start the service
#   ./install.sh --prefix /tmp/x   install under /tmp/x (no user, no systemctl, no root needed)
#   ./install.sh --dry-run         print what would be done, change nothing
#   sudo ./install.sh --trust release.pub   refuse the bundle unless manifest.sig is a signature by this key
#
# Signed bundles: with --trust KEY, or keys in /etc/edge-deploy/trusted-keys/*.pub (PREFIX/etc/... with
# --prefix), the bundle must carry manifest.sig, a signature over manifest.json by one of them. It is checked
# with the system's openssl and Python standard library, not with code from this bundle; then edge-deploy's
# own wheel is checked against the (now authenticated) manifest before its verifier checks every other file.
# This script is itself part of the bundle: to trust a bundle before running anything from it, check it first
# with an edge-deploy you already trust (edge-deploy verify BUNDLE.tar.gz --trust KEY).
#
# Idempotent: running it again replaces the bundle and the venv's packages, keeps an edited config.
# Exit codes: 0 ok, 1 a step failed, 2 bad arguments, 3 wrong platform/Python, 6 the bundle failed verification.
set -eu

SERVICE_USER=edge-deploy
PREFIX=/
ENABLE=0
DRY_RUN=0
PYTHON=python3
TRUST=
BUNDLE=$(CDPATH='' cd -- "$(dirname -- "$0")" && pwd)

usage() {
    sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'
    echo
    echo "options: --prefix DIR  --enable  --dry-run  --python PYTHON  --trust PUBKEY (repeatable)  --help"
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
        --trust)
            [ $# -ge 2 ] || die 2 "--trust needs a public key file"
            [ -f "$2" ] || die 2 "--trust '$2': not a file; expected an Ed25519 public key (edge-deploy keygen)"
            case "$2" in *[!A-Za-z0-9/._+-]*) die 2 "--trust '$2': expected a path of letters, digits and / . _ + - only" ;; esac
            TRUST="$TRUST $2"; shift 2 ;;
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

# --- signature: manifest.sig over manifest.json, by a trusted key (system openssl + stdlib, no bundle code) --
for key in "$ETC"/trusted-keys/*.pub; do
    [ -f "$key" ] && TRUST="$TRUST $key"
done
if [ -n "$TRUST" ]; then
    command -v openssl >/dev/null 2>&1 || die 1 "trusted keys are configured but openssl is missing (apt-get install openssl)"
    for key in $TRUST; do
        [ -z "$(find "$key" -perm /022)" ] || die 6 "trusted key '$key': group or others may write it; expected mode 644 or stricter"
    done
    [ -f "$BUNDLE/manifest.sig" ] || die 6 "$BUNDLE: unsigned (no manifest.sig); this device accepts only bundles signed by a trusted key ($TRUST )"
    SIG_RAW=$(mktemp)
    trap 'rm -f "$SIG_RAW"' EXIT
    # shellcheck disable=SC2086 # the key list splits on spaces (paths are checked to have none)
    KEY=$("$PYTHON" -I - "$BUNDLE/manifest.sig" "$SIG_RAW" $TRUST <<'PY'
import base64, hashlib, json, sys
sig_file, raw_out, keys = sys.argv[1], sys.argv[2], sys.argv[3:]
def fail(msg):
    print(f"install.sh: error: {msg}", file=sys.stderr)
    sys.exit(6)
try:
    with open(sig_file, "rb") as fh:
        body = json.loads(fh.read(4096))
    kid, sig = body["key_id"], base64.b64decode(body["signature"], validate=True)
    ok = body["format"] == "edge-deploy-signature" and body["version"] == 1 and body["algorithm"] == "ed25519"
except (ValueError, KeyError, TypeError) as exc:
    fail(f"{sig_file}: not a signature file written by 'edge-deploy build --sign-key' ({exc!r})")
if not ok or not isinstance(kid, str) or len(sig) != 64:
    fail(f"{sig_file}: not an edge-deploy Ed25519 signature (format, version, algorithm or length)")
ids = {}
for path in keys:
    with open(path, "rb") as fh:
        pem = fh.read(16384).decode("ascii", "replace")
    der = base64.b64decode("".join(l for l in pem.splitlines() if l and not l.startswith("-----")))
    ids[hashlib.sha256(der[-32:]).hexdigest()[:16]] = path
if kid not in ids:
    fail(f"{sig_file}: signed by key {kid}, which is not trusted here; expected a signature by {', '.join(ids)}")
with open(raw_out, "wb") as fh:
    fh.write(sig)
print(kid, ids[kid])
PY
) || exit 6
    KEY_ID=${KEY%% *}
    KEY_FILE=${KEY#* }
    openssl pkeyutl -verify -pubin -inkey "$KEY_FILE" -rawin -in "$BUNDLE/manifest.json" -sigfile "$SIG_RAW" \
        >/dev/null 2>&1 || die 6 "$BUNDLE: the signature by key $KEY_ID does not verify over manifest.json (changed after signing, or forged)"
    say "manifest.json is signed by trusted key $KEY_ID ($KEY_FILE)"
    # The manifest is authentic now: check our own wheel against it before importing its verifier.
    "$PYTHON" -I - "$BUNDLE" "${OWN_WHEEL#"$BUNDLE"/}" <<'PY' || exit 6
import hashlib, json, sys
root, rel = sys.argv[1], sys.argv[2]
with open(f"{root}/manifest.json", "rb") as fh:
    entries = {f["path"]: f["sha256"] for f in json.load(fh)["files"]}
h = hashlib.sha256()
with open(f"{root}/{rel}", "rb") as fh:
    for block in iter(lambda: fh.read(1 << 20), b""):
        h.update(block)
if entries.get(rel) != h.hexdigest():
    print(f"install.sh: error: {root}/{rel}: sha256 does not match the signed manifest.json", file=sys.stderr)
    sys.exit(6)
PY
fi

# --- verify every file against the manifest, before anything is copied --------------------------------------
say "verifying $BUNDLE against manifest.json"
# -P: the current folder is not put first on sys.path (an edge/ folder there would shadow the wheel).
PYTHONPATH=$OWN_WHEEL "$PYTHON" -P - "$BUNDLE" <<'PY' || exit 6
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
