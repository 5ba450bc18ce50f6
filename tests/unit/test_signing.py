"""Signed bundles (issue 16): keys with mode checks, manifest.sig, verify --trust, build --sign-key."""

from __future__ import annotations

import hashlib
import json
import tarfile
from pathlib import Path

import pytest

from edge.bundle import MANIFEST_FILE, extract_bundle, verify_bundle
from edge.errors import BundleError, InputError
from edge.signing import (
    SIGNATURE_FILE,
    generate_keypair,
    load_private_key,
    load_public_key,
    load_trusted_keys,
    sign_manifest,
)
from edge_deploy.cli import main
from tests.unit.test_bundle import FILES, _archive, make_bundle


def _keys(folder: Path, name: str = "release"):
    folder.mkdir(parents=True, exist_ok=True)
    return generate_keypair(folder / f"{name}.key")


def _sign(bundle: Path, key: Path) -> None:
    (bundle / SIGNATURE_FILE).write_bytes(sign_manifest((bundle / MANIFEST_FILE).read_bytes(), key))


@pytest.fixture
def signed(tmp_path: Path):
    pair = _keys(tmp_path / "keys")
    bundle = make_bundle(tmp_path / "rpi4-face")
    _sign(bundle, pair.private_path)
    return bundle, pair


# --- keys -------------------------------------------------------------------------------------------------


def test_keygen_writes_a_private_key_600_and_a_public_key_644(tmp_path: Path) -> None:
    pair = _keys(tmp_path)
    assert pair.private_path.stat().st_mode & 0o777 == 0o600
    assert pair.public_path.stat().st_mode & 0o777 == 0o644
    assert pair.public_path == tmp_path / "release.pub"
    assert b"PRIVATE KEY" in pair.private_path.read_bytes() and b"PUBLIC KEY" in pair.public_path.read_bytes()
    assert load_public_key(pair.public_path).key_id == pair.key_id
    assert len(pair.key_id) == 16 and int(pair.key_id, 16) >= 0
    with pytest.raises(InputError, match="release.key: cannot create the key file .File exists.; expected a new file"):
        generate_keypair(pair.private_path)


def test_a_private_key_readable_by_others_is_refused(tmp_path: Path) -> None:
    pair = _keys(tmp_path)
    pair.private_path.chmod(0o644)
    with pytest.raises(InputError) as err:
        load_private_key(pair.private_path)
    assert str(err.value) == (
        f"signing key '{pair.private_path}': mode 644 lets group or others read it; expected 600 "
        f"(chmod 600 '{pair.private_path}')"
    )
    pair.private_path.chmod(0o640)
    with pytest.raises(InputError, match="mode 640 lets group or others read it"):
        load_private_key(pair.private_path)


def test_a_trusted_key_writable_by_others_or_a_private_key_as_trust_is_refused(tmp_path: Path) -> None:
    pair = _keys(tmp_path)
    pair.public_path.chmod(0o666)
    with pytest.raises(InputError) as err:
        load_public_key(pair.public_path)
    assert str(err.value) == (
        f"trusted key '{pair.public_path}': mode 666 lets group or others write it; expected 644 or stricter "
        f"(chmod 644 '{pair.public_path}')"
    )
    with pytest.raises(InputError, match="a private key; expected the public key"):
        load_public_key(pair.private_path)
    junk = tmp_path / "junk.pub"
    junk.write_text("not a key\n")
    with pytest.raises(InputError, match="junk.pub': not a PEM public key"):
        load_public_key(junk)


# --- verify with trusted keys -----------------------------------------------------------------------------


def test_a_signed_bundle_verifies_as_folder_and_archive(signed, tmp_path: Path) -> None:
    bundle, pair = signed
    trusted = load_trusted_keys([pair.public_path])
    assert verify_bundle(bundle, trusted).signed_by == pair.key_id
    assert verify_bundle(bundle).signed_by is None  # without trust the signature is not a stray file either
    archive = _archive(bundle)
    assert verify_bundle(archive, trusted).signed_by == pair.key_id
    out = extract_bundle(archive, tmp_path / "x", trusted)
    assert (out / SIGNATURE_FILE).is_file()


def test_the_outside_attack_a_model_and_its_manifest_hash_changed_is_refused(signed) -> None:
    """Issue 16: a model file changed and its hash updated in manifest.json passed verify; not with --trust."""
    bundle, pair = signed
    model = bundle / "models/face/face_embedder.onnx"
    model.write_bytes(b"attacker's model")
    manifest = json.loads((bundle / MANIFEST_FILE).read_text())
    for entry in manifest["files"]:
        if entry["path"] == "models/face/face_embedder.onnx":
            entry.update(size=len(b"attacker's model"), sha256=hashlib.sha256(b"attacker's model").hexdigest())
    (bundle / MANIFEST_FILE).write_text(json.dumps(manifest))
    verify_bundle(bundle)  # what the attack relied on: the files match the (rewritten) manifest
    with pytest.raises(BundleError) as err:
        verify_bundle(bundle, load_trusted_keys([pair.public_path]))
    assert str(err.value) == (
        f"{bundle}: the signature by key {pair.key_id} does not verify over manifest.json (the manifest was "
        "changed after signing, or the signature is forged)"
    )


def test_unsigned_and_foreign_signed_bundles_are_refused_naming_bundle_and_key(signed, tmp_path: Path) -> None:
    bundle, pair = signed
    other = _keys(tmp_path / "other", "other")
    trusted = load_trusted_keys([pair.public_path])
    _sign(bundle, other.private_path)
    with pytest.raises(BundleError) as err:
        verify_bundle(bundle, trusted)
    assert str(err.value) == (
        f"{bundle}: signed by key {other.key_id}, which is not trusted here; expected a signature by {pair.key_id}"
    )
    with pytest.raises(BundleError, match=f"{bundle}.tar.gz: signed by key {other.key_id}, which is not trusted"):
        verify_bundle(_archive(bundle), trusted)
    # Either of two trusted keys may sign.
    both = load_trusted_keys([pair.public_path, other.public_path])
    assert verify_bundle(bundle, both).signed_by == other.key_id
    (bundle / SIGNATURE_FILE).unlink()
    with pytest.raises(BundleError) as err:
        verify_bundle(bundle, trusted)
    assert str(err.value) == (
        f"{bundle}: unsigned (no manifest.sig); this device accepts only bundles signed by {pair.key_id}"
    )


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda b: b.update(algorithm="rsa"), "algorithm = 'rsa'; expected 'ed25519'"),
        (lambda b: b.update(signature="AAAA"), "signature is not the base64 of 64 bytes"),
        (lambda b: b.update(key_id="XYZ"), "key_id = 'XYZ'; expected 16 lowercase hex digits"),
        (lambda b: b.update(extra=1), "expected a JSON object with exactly the fields"),
    ],
)
def test_a_malformed_signature_file_is_refused(signed, edit, message: str) -> None:
    bundle, pair = signed
    body = json.loads((bundle / SIGNATURE_FILE).read_text())
    edit(body)
    (bundle / SIGNATURE_FILE).write_text(json.dumps(body))
    with pytest.raises(BundleError, match=message):
        verify_bundle(bundle, load_trusted_keys([pair.public_path]))


# --- build --sign-key and the CLI -------------------------------------------------------------------------


def _toy_stage():
    from converters.package.stages import ModelKind, ModelStage, StageContext, StageResult

    def run(ctx: StageContext) -> StageResult:
        (ctx.out_dir / "weights.txt").write_text("weights")
        return StageResult(ModelKind.FACE, ctx.precision.value, "txt", ("weights.txt",), (), {}, {"passed": True})

    return ModelStage(ModelKind.FACE, lambda: (), (), run)


def test_build_signs_and_the_private_key_never_enters_the_bundle(tmp_path: Path, monkeypatch) -> None:
    from converters.package import bundle as package
    from converters.package.bundle import BuildOptions, build_bundle
    from edge.profiles import load_profile

    monkeypatch.setitem(package.STAGES, package.ModelKind.FACE, _toy_stage())
    pair = _keys(tmp_path / "keys")
    opts = BuildOptions(wheels=False, sign_key=pair.private_path, golden=False)
    built = build_bundle(load_profile("rpi4"), ["face"], tmp_path / "dist", tmp_path / "cache", options=opts)
    trusted = load_trusted_keys([pair.public_path])
    assert verify_bundle(built.folder, trusted).signed_by == pair.key_id
    assert verify_bundle(built.archive, trusted).signed_by == pair.key_id
    # The private key, as its PEM text, its base64 body or its 32 raw bytes, is in no file nor archive member.
    key = load_private_key(pair.private_path)
    from cryptography.hazmat.primitives import serialization

    raw = key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption())
    pem = pair.private_path.read_bytes()
    body = b"".join(pem.splitlines()[1:-1])
    needles = (raw, pem, body, b"PRIVATE KEY")
    files = [p for p in built.folder.rglob("*") if p.is_file()]
    assert len(files) >= 5
    for path in files:
        data = path.read_bytes()
        assert not any(n in data for n in needles), path
    with tarfile.open(built.archive) as tar:
        names = tar.getnames()
        for member in tar.getmembers():
            if member.isfile():
                data = tar.extractfile(member).read()  # type: ignore[union-attr]
                assert not any(n in data for n in needles), member.name
    assert not any(n.endswith((".key", pair.private_path.name)) for n in names)


def test_build_refuses_a_group_readable_key_before_converting(tmp_path: Path, monkeypatch) -> None:
    from converters.package import bundle as package
    from converters.package.bundle import BuildOptions, build_bundle
    from edge.profiles import load_profile

    calls: list[str] = []
    stage = _toy_stage()
    monkeypatch.setitem(package.STAGES, package.ModelKind.FACE, stage)
    monkeypatch.setattr(package, "run_stage", lambda *a: calls.append("stage"))
    pair = _keys(tmp_path / "keys")
    pair.private_path.chmod(0o640)
    opts = BuildOptions(wheels=False, sign_key=pair.private_path, golden=False)
    with pytest.raises(InputError, match="mode 640 lets group or others read it"):
        build_bundle(load_profile("rpi4"), ["face"], tmp_path / "dist", tmp_path / "cache", options=opts)
    assert calls == []


def test_cli_keygen_and_verify_trust(tmp_path: Path, capsys) -> None:
    assert main(["keygen", "-o", str(tmp_path / "k.key")]) == 0
    out = capsys.readouterr().out
    kid = load_public_key(tmp_path / "k.pub").key_id
    assert out.startswith(f"key {kid}: private {tmp_path / 'k.key'} (mode 600")
    bundle = make_bundle(tmp_path / "b", FILES)
    assert main(["verify", str(bundle), "--trust", str(tmp_path / "k.pub")]) == 6
    assert capsys.readouterr().err == (
        f"Error: {bundle}: unsigned (no manifest.sig); this device accepts only bundles signed by {kid}\n"
    )
    _sign(bundle, tmp_path / "k.key")
    assert main(["verify", str(bundle), "--trust", str(tmp_path / "k.pub")]) == 0
    assert f"signed by key {kid}" in capsys.readouterr().out
    assert main(["keygen", "-o", str(tmp_path / "k2.key")]) == 0
    capsys.readouterr()
    assert main(["verify", str(bundle), "--trust", str(tmp_path / "k2.pub"), str(tmp_path / "k.pub")]) == 0
    assert f"signed by key {kid}" in capsys.readouterr().out
    (tmp_path / "k.key").chmod(0o604)
    assert main(["verify", str(bundle), "--trust", str(tmp_path / "k.key")]) == 3  # a private key as trust
    assert "a private key; expected the public key" in capsys.readouterr().err


# --- the daemon's trusted_keys ----------------------------------------------------------------------------


def test_serve_check_with_trusted_keys_refuses_unsigned_and_accepts_signed(tmp_path: Path) -> None:
    from edge.daemon.config import load_config
    from edge.daemon.preflight import preflight
    from tests.unit.test_daemon_config import MINIMAL, _models_folder

    (tmp_path / "face").mkdir()
    (tmp_path / "incoming").mkdir()
    _models_folder(tmp_path)
    pair = _keys(tmp_path / "keys")
    bundle = make_bundle(tmp_path / "bundle")
    config = tmp_path / "edge-deploy.toml"
    config.write_text(f'bundle = "bundle"\ntrusted_keys = ["keys/release.pub"]\n{MINIMAL}')
    loaded = load_config(config)
    assert loaded.trusted_keys == (pair.public_path,)
    with pytest.raises(
        BundleError,
        match=f"{bundle}: unsigned .no manifest.sig.; this device accepts only bundles signed by {pair.key_id}",
    ):
        preflight(loaded)
    _sign(bundle, pair.private_path)
    lines = preflight(loaded)
    assert f"trusted_keys: {pair.key_id}" in lines
    assert f"bundle: {bundle} (4 files match, signed by {pair.key_id})" in lines
    pair.public_path.chmod(0o664)
    with pytest.raises(InputError) as err:
        preflight(loaded)
    assert str(err.value) == (
        f"{config}: trusted_keys: trusted key '{pair.public_path}': mode 664 lets group or others write it; "
        f"expected 644 or stricter (chmod 644 '{pair.public_path}')"
    )
