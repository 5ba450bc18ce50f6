"""install.sh's argument checks (issue 17, defect 9: a --prefix with '&' wrote a broken config, exit 0)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

INSTALL = Path(__file__).resolve().parents[2] / "edge" / "bundle_files" / "install.sh"


@pytest.mark.parametrize("bad", ["a&b", 'a"b', "a#b", "a b", "a\\b", "a\nb"])
def test_a_prefix_that_would_break_the_config_is_refused(tmp_path: Path, bad: str) -> None:
    prefix = tmp_path / bad
    run = subprocess.run(["sh", str(INSTALL), "--prefix", str(prefix)], capture_output=True, text=True, timeout=30)
    assert run.returncode == 2
    assert run.stderr == (
        f"install.sh: error: --prefix '{prefix}': expected a path of letters, digits and / . _ + - only\n"
    )
    assert list(tmp_path.iterdir()) == []  # refused before anything was written


# --- signed bundles (issue 16): install.sh checks manifest.sig with the system's openssl, not bundle code ----

import hashlib  # noqa: E402
import json  # noqa: E402
import zipfile  # noqa: E402

EDGE = INSTALL.parents[1]
WHEEL = "wheels/edge_deploy-0.1.0-py3-none-any.whl"


def _wheel(evil: bool = False) -> bytes:
    """edge-deploy's own wheel as install.sh uses it (PYTHONPATH=wheel): the verifier's modules only."""
    import io

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name in ("__init__.py", "bundle.py", "errors.py", "filemode.py", "payload.py", "signing.py"):
            text = (EDGE / name).read_text()
            if evil and name == "bundle.py":
                text += "\nprint('EVIL verifier ran', file=__import__('sys').stderr)\n"
            zf.writestr(f"edge/{name}", text)
    return buf.getvalue()


def _bundle(root: Path, files: dict[str, bytes]) -> Path:
    files = {"install.sh": INSTALL.read_bytes(), "wheels/requirements.txt": b"edge-deploy[device]\n", **files}
    files.setdefault(WHEEL, _wheel())
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    manifest = {
        "schema_version": 1,
        "format": "edge-deploy-bundle",
        "target": "rpi4",
        "tool_version": "0.1.0",
        "profile": {},
        "models": [],
        "wheelhouse": None,
        "files": [
            {"path": p, "size": len(d), "sha256": hashlib.sha256(d).hexdigest()} for p, d in sorted(files.items())
        ],
    }
    (root / "manifest.json").write_text(json.dumps(manifest))
    return root


def _install(bundle: Path, prefix: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["sh", str(bundle / "install.sh"), "--dry-run", "--prefix", str(prefix), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def keys(tmp_path: Path):
    from edge.signing import generate_keypair

    (tmp_path / "keys").mkdir()
    return generate_keypair(tmp_path / "keys" / "release.key"), generate_keypair(tmp_path / "keys" / "other.key")


def _sign(bundle: Path, key: Path) -> None:
    from edge.signing import sign_manifest

    (bundle / "manifest.sig").write_bytes(sign_manifest((bundle / "manifest.json").read_bytes(), key))


def test_install_sh_accepts_a_bundle_signed_by_the_trusted_key(tmp_path: Path, keys) -> None:
    release, _ = keys
    bundle = _bundle(tmp_path / "b", {"models/face/m.onnx": b"model"})
    _sign(bundle, release.private_path)
    run = _install(bundle, tmp_path / "p", "--trust", str(release.public_path))
    assert run.returncode == 0, run.stderr
    assert f"install.sh: manifest.json is signed by trusted key {release.key_id} ({release.public_path})" in run.stdout
    assert "install.sh: 4 files" in run.stdout and "all match (target rpi4)" in run.stdout


def test_install_sh_refuses_the_outside_attack_and_foreign_or_missing_signatures(tmp_path: Path, keys) -> None:
    release, other = keys
    prefix = tmp_path / "p"
    (prefix / "etc/edge-deploy/trusted-keys").mkdir(parents=True)
    (prefix / "etc/edge-deploy/trusted-keys/release.pub").write_bytes(release.public_path.read_bytes())
    (prefix / "etc/edge-deploy/trusted-keys/release.pub").chmod(0o644)
    bundle = _bundle(tmp_path / "b", {"models/face/m.onnx": b"model"})
    run = _install(bundle, prefix)  # the configured trust dir alone makes the signature required
    assert run.returncode == 6
    assert f"{bundle}: unsigned (no manifest.sig); this device accepts only bundles signed by a trusted key" in run.stderr
    _sign(bundle, other.private_path)
    run = _install(bundle, prefix)
    assert run.returncode == 6
    assert f"signed by key {other.key_id}, which is not trusted here; expected a signature by {release.key_id}" in (
        run.stderr
    )
    # The attack of the issue: the model changed and its hash rewritten in manifest.json, the old signature kept.
    _sign(bundle, release.private_path)
    (bundle / "models/face/m.onnx").write_bytes(b"evil model")
    manifest = json.loads((bundle / "manifest.json").read_text())
    for f in manifest["files"]:
        if f["path"] == "models/face/m.onnx":
            f.update(size=10, sha256=hashlib.sha256(b"evil model").hexdigest())
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    run = _install(bundle, prefix)
    assert run.returncode == 6
    assert f"{bundle}: the signature by key {release.key_id} does not verify over manifest.json" in run.stderr


def test_install_sh_never_runs_a_replaced_verifier_when_keys_are_trusted(tmp_path: Path, keys) -> None:
    release, _ = keys
    bundle = _bundle(tmp_path / "b", {})
    _sign(bundle, release.private_path)
    (bundle / WHEEL).write_bytes(_wheel(evil=True))  # the bundle brings its own verifier
    run = _install(bundle, tmp_path / "p", "--trust", str(release.public_path))
    assert run.returncode == 6
    assert f"{bundle}/{WHEEL}: sha256 does not match the signed manifest.json" in run.stderr
    assert "EVIL" not in run.stderr + run.stdout
    # Without a trusted key install.sh has nothing to check the wheel against: the replaced verifier runs
    # (and here finds the mismatch itself). This is the limit docs/bundle.md states.
    run = _install(bundle, tmp_path / "p")
    assert "EVIL verifier ran" in run.stderr


def test_install_sh_refuses_a_trusted_key_others_may_write(tmp_path: Path, keys) -> None:
    release, _ = keys
    bundle = _bundle(tmp_path / "b", {})
    _sign(bundle, release.private_path)
    release.public_path.chmod(0o666)
    run = _install(bundle, tmp_path / "p", "--trust", str(release.public_path))
    assert run.returncode == 6
    assert f"trusted key '{release.public_path}': group or others may write it" in run.stderr
