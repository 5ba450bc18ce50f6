# Sourced by the side-venv setup scripts (setup_onnx2tf.sh, setup_litert_torch.sh): one idempotent recipe.
# side_venv TAG VENV WHAT CHECK -- PIP_ARGS...
#   Creates VENV if missing; when the calling script or this file changed since the last success, upgrades
#   pip, runs 'pip install PIP_ARGS...', then runs CHECK (a shell command) before stamping the venv ready.
#   pip's output goes to VENV/pip-install.log; its tail is shown on failure. WHY (set by the calling script from
#   its arguments: who needs the venv) goes into the progress line, so a first use says what it installs and why.
side_venv() {
  local tag=$1 venv=$2 what=$3 check=$4
  shift 4
  [ "${1:-}" = "--" ] && shift
  local py=${PYTHON:-python3}
  say() { printf '[%s] %s\n' "$tag" "$*" >&2; }
  if [ ! -x "$venv/bin/python" ]; then
    say "creating $venv"
    "$py" -m venv "$venv"
  fi
  local stamp=$venv/.edge-deploy-setup want
  want=$(cat "scripts/$(basename "$0")" scripts/side_venv.sh | sha256sum | cut -c1-16)  # cwd: the repository
  if [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
    say "$venv is up to date"
    return 0
  fi
  say "installing $what into $venv${WHY:+, needed by $WHY} (first time only: a few minutes)"
  local log=$venv/pip-install.log
  : >"$log"
  local args
  for args in "--upgrade pip" "$*"; do
    # shellcheck disable=SC2086  # word splitting of the pip arguments is intended
    "$venv/bin/python" -m pip install --disable-pip-version-check $args >>"$log" 2>&1 \
      || { tail -n 40 "$log" >&2; say "pip install $args failed; full log: $log"; exit 1; }
  done
  # The tool must start before we call the venv ready.
  bash -c "$check" >>"$log" 2>&1 || { tail -n 40 "$log" >&2; say "check failed: $check; log: $log"; exit 1; }
  echo "$want" >"$stamp"
  say "$venv ready"
}
