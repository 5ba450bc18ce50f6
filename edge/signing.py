"""Signed bundles: Ed25519 keys in files, a signature over ``manifest.json`` beside it as ``manifest.sig``.

The trust chain: a device holds one or more *public* keys (files it was given out of band); a bundle's
``manifest.sig`` names the key that signed it (its key id) and carries an Ed25519 signature over the exact
bytes of ``manifest.json``; ``manifest.json`` lists every other file with its size and sha256
(``edge.bundle``). So a changed model file whose hash is also changed in the manifest no longer passes: the
manifest's bytes no longer match the signature, and only the private key's holder can make a new one.

Key files:

- private key: PKCS#8 PEM, unencrypted, created mode 600; refused when group or others may read it.
- public key: SubjectPublicKeyInfo PEM (``openssl pkey -pubin`` reads it); refused when group or others may
  write it (whoever can replace a trusted key can sign anything).
- key id: the first 16 hex digits of the sha256 of the 32 raw public-key bytes.

``manifest.sig`` is one JSON object::

    {"format": "edge-deploy-signature", "version": 1, "algorithm": "ed25519",
     "key_id": "1a2b3c4d5e6f7a8b", "signature": "<base64 of the 64 signature bytes>"}

The ``cryptography`` package (in the ``device`` extra) is imported only when a key is made, read or used.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edge.errors import BundleError, InputError, require
from edge.filemode import check_private_mode
from edge.payload import PayloadError, parse_json

SIGNATURE_FILE = "manifest.sig"
SIGNATURE_FORMAT = "edge-deploy-signature"
SIGNATURE_VERSION = 1
ALGORITHM = "ed25519"
KEY_ID_HEX = 16
#: Largest key or signature file read (a PEM Ed25519 key is about 120 bytes).
MAX_KEY_BYTES = 16 << 10
MAX_SIGNATURE_BYTES = 4096
_SIG_FIELDS = ("format", "version", "algorithm", "key_id", "signature")


def _crypto() -> Any:
    """The ``cryptography`` serialization and Ed25519 modules (lazily, naming the extra when missing)."""
    require("cryptography", "device", "signing and checking bundle signatures")
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    return serialization, ed25519


def _invalid_signature() -> type[Exception]:
    from cryptography.exceptions import InvalidSignature

    return InvalidSignature


def key_id(public_raw: bytes) -> str:
    """The key id of a 32-byte raw Ed25519 public key: the first 16 hex digits of its sha256."""
    return hashlib.sha256(public_raw).hexdigest()[:KEY_ID_HEX]


@dataclass(frozen=True)
class PublicKey:
    """A trusted public key, read from ``path``."""

    path: Path
    key_id: str
    raw: bytes


@dataclass(frozen=True)
class KeyPair:
    """What ``generate_keypair`` wrote."""

    private_path: Path
    public_path: Path
    key_id: str


def _read_key_file(path: Path, what: str) -> tuple[bytes, int]:
    try:
        mode = path.stat().st_mode
        with path.open("rb") as fh:
            data = fh.read(MAX_KEY_BYTES + 1)
    except OSError as exc:
        raise InputError(f"{what} '{path}': cannot read ({exc.strerror})") from exc
    if not stat.S_ISREG(mode):
        raise InputError(f"{what} '{path}': not a regular file; expected a PEM key file")
    if len(data) > MAX_KEY_BYTES:
        raise InputError(f"{what} '{path}': larger than {MAX_KEY_BYTES} bytes; expected a PEM Ed25519 key")
    return data, stat.S_IMODE(mode)


def load_private_key(path: Path | str) -> Any:
    """Read an Ed25519 private key for signing.

    Raises:
        InputError: the file is missing, readable by group or others, not a PEM private key, or not Ed25519.
    """
    path = Path(path)
    data, _ = _read_key_file(path, "signing key")
    check_private_mode(path, f"signing key '{path}'")
    serialization, ed25519 = _crypto()
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise InputError(
            f"signing key '{path}': not an unencrypted PEM private key ({exc}); expected a file written by "
            "'edge-deploy keygen'"
        ) from None
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise InputError(f"signing key '{path}': a {type(key).__name__}; expected an Ed25519 key")
    return key


def load_public_key(path: Path | str) -> PublicKey:
    """Read a trusted Ed25519 public key.

    Raises:
        InputError: the file is missing, writable by group or others, a private key, not a PEM public key, or
            not Ed25519.
    """
    path = Path(path)
    data, mode = _read_key_file(path, "trusted key")
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise InputError(
            f"trusted key '{path}': mode {mode:03o} lets group or others write it; expected 644 or stricter "
            f"(chmod 644 '{path}')"
        )
    if b"PRIVATE KEY" in data:
        raise InputError(f"trusted key '{path}': a private key; expected the public key (the .pub file of keygen)")
    serialization, ed25519 = _crypto()
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as exc:
        raise InputError(
            f"trusted key '{path}': not a PEM public key ({exc}); expected a .pub file of edge-deploy keygen"
        ) from None
    if not isinstance(key, ed25519.Ed25519PublicKey):
        raise InputError(f"trusted key '{path}': a {type(key).__name__}; expected an Ed25519 key")
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return PublicKey(path, key_id(raw), raw)


def load_trusted_keys(paths: list[Path] | tuple[Path, ...]) -> tuple[PublicKey, ...]:
    """Read every trusted key (``InputError`` names the first bad one)."""
    return tuple(load_public_key(p) for p in paths)


def _create(path: Path, data: bytes, mode: int) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except OSError as exc:
        raise InputError(f"{path}: cannot create the key file ({exc.strerror}); expected a new file") from exc
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.chmod(path, mode)  # the umask may have removed bits from a public key's 644


def generate_keypair(private_path: Path | str, public_path: Path | str | None = None) -> KeyPair:
    """Make a new Ed25519 signing key: ``private_path`` (mode 600) and its public key (mode 644).

    Args:
        private_path: the private key file to create (refused if it exists).
        public_path: the public key file; default ``private_path`` with the suffix ``.pub``.

    Returns:
        Both paths and the key id.

    Raises:
        InputError: a file exists already or can't be written.
    """
    private_path = Path(private_path)
    public_path = Path(public_path) if public_path else private_path.with_suffix(".pub")
    if public_path == private_path:
        raise InputError(f"{private_path}: the public key would overwrite the private key; name them apart")
    serialization, ed25519 = _crypto()
    key = ed25519.Ed25519PrivateKey.generate()
    private_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public = key.public_key()
    public_pem = public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    for path in (private_path, public_path):  # neither file is written when either exists
        if path.exists() or path.is_symlink():
            raise InputError(f"{path}: cannot create the key file (File exists); expected a new file")
    _create(private_path, private_pem, 0o600)
    _create(public_path, public_pem, 0o644)
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return KeyPair(private_path, public_path, key_id(raw))


def sign_manifest(manifest: bytes, private_key_path: Path | str) -> bytes:
    """The ``manifest.sig`` bytes for a manifest's exact bytes.

    Raises:
        InputError: from :func:`load_private_key`.
    """
    serialization, _ = _crypto()
    key = load_private_key(private_key_path)
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    body = {
        "format": SIGNATURE_FORMAT,
        "version": SIGNATURE_VERSION,
        "algorithm": ALGORITHM,
        "key_id": key_id(raw),
        "signature": base64.b64encode(key.sign(manifest)).decode("ascii"),
    }
    return (json.dumps(body, indent=2) + "\n").encode("utf-8")


def parse_signature(data: bytes, where: str) -> tuple[str, bytes]:
    """Check a ``manifest.sig``'s form; return its key id and the 64 signature bytes.

    Raises:
        BundleError: not a JSON object of the documented fields, an unknown format/version/algorithm, a bad
            key id or signature encoding.
    """
    try:
        body = parse_json(data, where, MAX_SIGNATURE_BYTES, 2)
    except PayloadError as exc:
        raise BundleError(str(exc)) from None
    if not isinstance(body, dict) or sorted(body) != sorted(_SIG_FIELDS):
        raise BundleError(f"{where}: expected a JSON object with exactly the fields {', '.join(_SIG_FIELDS)}")
    for key, expected in (("format", SIGNATURE_FORMAT), ("version", SIGNATURE_VERSION), ("algorithm", ALGORITHM)):
        if body[key] != expected or isinstance(body[key], bool):
            raise BundleError(f"{where}: {key} = {body[key]!r}; expected {expected!r}")
    kid = body["key_id"]
    if not isinstance(kid, str) or len(kid) != KEY_ID_HEX or any(c not in "0123456789abcdef" for c in kid):
        raise BundleError(f"{where}: key_id = {kid!r}; expected {KEY_ID_HEX} lowercase hex digits")
    try:
        sig = base64.b64decode(body["signature"], validate=True) if isinstance(body["signature"], str) else b""
    except (binascii.Error, ValueError):
        sig = b""
    if len(sig) != 64:
        raise BundleError(f"{where}: signature is not the base64 of 64 bytes; expected an Ed25519 signature")
    return kid, sig


def check_signature(bundle: str, manifest: bytes, signature: bytes | None, trusted: tuple[PublicKey, ...]) -> str:
    """Check a bundle's signature against the trusted keys; return the signing key's id.

    Args:
        bundle: the bundle, as named in errors.
        manifest: the exact bytes of its ``manifest.json``.
        signature: the bytes of its ``manifest.sig``, or None when it has none.
        trusted: the keys this device trusts (at least one).

    Raises:
        BundleError: unsigned, signed by a key not trusted here, or a signature that does not verify; each
            naming the bundle and the key id.
    """
    serialization, ed25519 = _crypto()
    ids = ", ".join(k.key_id for k in trusted)
    if signature is None:
        raise BundleError(f"{bundle}: unsigned (no {SIGNATURE_FILE}); this device accepts only bundles signed by {ids}")
    kid, sig = parse_signature(signature, f"{bundle}/{SIGNATURE_FILE}")
    key = next((k for k in trusted if k.key_id == kid), None)
    if key is None:
        raise BundleError(f"{bundle}: signed by key {kid}, which is not trusted here; expected a signature by {ids}")
    try:
        ed25519.Ed25519PublicKey.from_public_bytes(key.raw).verify(sig, manifest)
    except _invalid_signature():
        raise BundleError(
            f"{bundle}: the signature by key {kid} does not verify over manifest.json "
            "(the manifest was changed after signing, or the signature is forged)"
        ) from None
    return kid
