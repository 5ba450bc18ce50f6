"""Per-device MQTT credentials: a private CA, one client certificate per identity, mosquitto's ACL and CRL.

``edge-deploy fleet provision pi-kitchen --ca ca/`` makes (once) a CA in ``ca/`` and then, for the device,
``pi-kitchen.crt`` and ``pi-kitchen.key`` (mode 600) whose certificate's common name is the device id. With
mosquitto's ``require_certificate true`` and ``use_identity_as_username true`` that name is the MQTT
username, and the ACL this writes (``ca/acl``) lets a device

- publish only ``<prefix>/<its id>/{status,telemetry,bench,result}``,
- read only ``<prefix>/<its id>/cmd`` and ``<prefix>/<its id>/text/request``,

so device A can neither report as B nor read B's commands. A ``monitor`` identity reads ``<prefix>/#`` and
writes its alerts (``<prefix>-alerts/#``); an ``operator`` identity reads both and writes commands and prompts
to any device. ``revoke`` adds a certificate to the CA's
revocation list (``ca/crl.pem``, mosquitto's ``crlfile``): mosquitto then refuses its handshake. The CA
folder keeps what it issued in ``issued.json`` (id -> serial, role) and what it revoked in ``revoked.json``.

The CA key never leaves the CA folder (mode 600, refused when group or others may read it); keep that
folder off the broker and the devices.
"""

from __future__ import annotations

import datetime
import enum
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edge.errors import InputError, TelemetryError, require
from edge.filemode import check_private_mode
from edge.telemetry.schema import MessageKind, check_name, check_prefix

CA_CERT = "ca.crt"
CA_KEY = "ca.key"
CRL = "crl.pem"
ACL = "acl"
ISSUED = "issued.json"
REVOKED = "revoked.json"
CA_DAYS = 3650
#: Topics a device reads besides none: its commands and its text prompts (edge.daemon.listener).
DEVICE_READS = ("cmd", "text/request")


class Role(enum.StrEnum):
    """What an identity may do on the broker."""

    DEVICE = "device"
    MONITOR = "monitor"
    OPERATOR = "operator"


@dataclass(frozen=True)
class Issued:
    """What ``provision`` wrote."""

    identity: str
    role: Role
    serial: int
    cert: Path
    key: Path
    ca_cert: Path
    acl: Path
    crl: Path


def _x509() -> tuple[Any, Any, Any, Any, Any]:
    require("cryptography", "device", "making device certificates")
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    return x509, hashes, serialization, ec, NameOID


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _write(path: Path, data: bytes, mode: int) -> None:
    """Write a file atomically with ``mode`` (a key is never readable by others, not even for a moment)."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def _key_pem(key: Any) -> bytes:
    _, _, serialization, _, _ = _x509()
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _load_ca(ca_dir: Path) -> tuple[Any, Any]:
    """The CA's certificate and key, made first when the folder has neither."""
    x509, hashes, serialization, ec, NameOID = _x509()
    cert_path, key_path = ca_dir / CA_CERT, ca_dir / CA_KEY
    if cert_path.is_file() != key_path.is_file():
        raise InputError(f"{ca_dir}: has one of {CA_CERT} and {CA_KEY} but not the other; expected both or neither")
    if cert_path.is_file():
        check_private_mode(key_path, f"CA key '{key_path}'")
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        return x509.load_pem_x509_certificate(cert_path.read_bytes()), key
    ca_dir.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "edge-deploy fleet CA")])
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(_now() - datetime.timedelta(minutes=5))
        .not_valid_after(_now() + datetime.timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    _write(key_path, _key_pem(key), 0o600)
    _write(cert_path, cert.public_bytes(serialization.Encoding.PEM), 0o644)
    return cert, key


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: not readable as JSON ({exc}); expected the CA folder's record") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a JSON object")
    return data


def _client_cert(ca_cert: Any, ca_key: Any, identity: str, days: int) -> tuple[Any, Any]:
    x509, hashes, _, ec, NameOID = _x509()
    from cryptography.x509.oid import ExtendedKeyUsageOID

    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, identity)]))
        .issuer_name(ca_cert.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(_now() - datetime.timedelta(minutes=5))
        .not_valid_after(_now() + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    return cert, key


def acl_text(issued: dict[str, Any], prefix: str) -> str:
    """mosquitto's ACL for the identities in ``issued`` (id -> {"role", ...}): one block per identity."""
    lines = [
        "# Written by 'edge-deploy fleet provision' (fleet/credentials.py); regenerated on every provision.",
        "# Identities are certificate common names (mosquitto: use_identity_as_username true).",
        "# Every device: publish only under its own prefix, read only its own commands and prompts.",
        "# One block per issued identity and no 'pattern' lines: a revoked identity has no rights at all, so",
        "# the reload after 'fleet revoke' also stops a session it still has open.",
    ]
    for identity in sorted(issued):
        role = issued[identity].get("role")
        if role == Role.DEVICE.value:
            lines += ["", f"user {identity}"]
            lines += [f"topic write {prefix}/{identity}/{kind.value}" for kind in MessageKind]
            lines += [f"topic read {prefix}/{identity}/{sub}" for sub in DEVICE_READS]
        elif role == Role.MONITOR.value:  # reads the fleet, publishes its alerts (fleet.alerts)
            lines += ["", f"user {identity}", f"topic read {prefix}/#", f"topic write {prefix}-alerts/#"]
        elif role == Role.OPERATOR.value:
            lines += ["", f"user {identity}", f"topic read {prefix}/#", f"topic read {prefix}-alerts/#"]
            lines += [f"topic write {prefix}/+/{sub}" for sub in DEVICE_READS]
    return "\n".join(lines) + "\n"


def _write_crl(ca_dir: Path, ca_cert: Any, ca_key: Any, revoked: dict[str, Any]) -> Path:
    x509, hashes, serialization, _, _ = _x509()
    builder = (
        x509.CertificateRevocationListBuilder().issuer_name(ca_cert.subject)
        .last_update(_now() - datetime.timedelta(minutes=5)).next_update(_now() + datetime.timedelta(days=CA_DAYS))
    )  # fmt: skip
    for entry in revoked.values():
        builder = builder.add_revoked_certificate(
            x509.RevokedCertificateBuilder().serial_number(int(entry["serial"])).revocation_date(_now()).build()
        )
    crl = builder.sign(ca_key, hashes.SHA256())
    _write(ca_dir / CRL, crl.public_bytes(serialization.Encoding.PEM), 0o644)
    return ca_dir / CRL


def provision(
    identity: str, ca_dir: Path, out_dir: Path, role: Role = Role.DEVICE, prefix: str = "edge-deploy", days: int = 825
) -> Issued:
    """Issue a client certificate for ``identity`` and rewrite the CA folder's ACL and CRL.

    Args:
        identity: the device id (or the monitor's / operator's name): the certificate's common name.
        ca_dir: the CA folder (made with a new CA when it has none).
        out_dir: where ``<identity>.crt`` and ``<identity>.key`` (mode 600) go.
        role: device, monitor or operator.
        prefix: the fleet's topic prefix (``telemetry.prefix``).
        days: validity of the certificate, 1 to ``CA_DAYS``.

    Raises:
        InputError: a bad identity, prefix or validity, an identity already issued and not revoked, a CA key others may
            read, or a damaged CA folder.
    """
    try:
        check_name("identity", identity)
        check_prefix(prefix)
    except TelemetryError as exc:
        raise InputError(str(exc)) from None
    if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= CA_DAYS:
        raise InputError(
            f"days = {days!r}; expected a whole number of days in 1..{CA_DAYS} (no certificate outlives the CA)"
        )
    ca_dir, out_dir = Path(ca_dir), Path(out_dir)
    ca_cert, ca_key = _load_ca(ca_dir)
    issued = _read_json(ca_dir / ISSUED)
    if identity in issued:
        raise InputError(
            f"{ca_dir / ISSUED}: {identity!r} has a certificate already (serial {issued[identity]['serial']}); "
            f"revoke it first: edge-deploy fleet revoke {identity} --ca {ca_dir}"
        )
    cert, key = _client_cert(ca_cert, ca_key, identity, days)
    _, _, serialization, _, _ = _x509()
    out_dir.mkdir(parents=True, exist_ok=True)
    _write(out_dir / f"{identity}.key", _key_pem(key), 0o600)
    _write(out_dir / f"{identity}.crt", cert.public_bytes(serialization.Encoding.PEM), 0o644)
    issued[identity] = {"serial": cert.serial_number, "role": Role(role).value, "prefix": prefix}
    _write(ca_dir / ISSUED, json.dumps(issued, indent=2).encode(), 0o644)
    _write(ca_dir / ACL, acl_text(issued, prefix).encode(), 0o644)
    crl = _write_crl(ca_dir, ca_cert, ca_key, _read_json(ca_dir / REVOKED))
    return Issued(identity, Role(role), cert.serial_number, out_dir / f"{identity}.crt", out_dir / f"{identity}.key",
                  ca_dir / CA_CERT, ca_dir / ACL, crl)  # fmt: skip


def revoke(identity: str, ca_dir: Path) -> Path:
    """Revoke ``identity``'s certificate: it goes into the CRL and out of the ACL; returns the CRL's path.

    Raises:
        InputError: the CA folder never issued a certificate to ``identity``.
    """
    ca_dir = Path(ca_dir)
    ca_cert, ca_key = _load_ca(ca_dir)
    issued, revoked = _read_json(ca_dir / ISSUED), _read_json(ca_dir / REVOKED)
    if identity not in issued:
        known = ", ".join(sorted(issued)) or "none"
        raise InputError(f"{ca_dir / ISSUED}: no certificate for {identity!r}; issued: {known}")
    entry = issued.pop(identity)
    revoked[f"{identity}#{entry['serial']}"] = {"identity": identity, **entry}
    _write(ca_dir / REVOKED, json.dumps(revoked, indent=2).encode(), 0o644)
    _write(ca_dir / ISSUED, json.dumps(issued, indent=2).encode(), 0o644)
    _write(ca_dir / ACL, acl_text(issued, entry.get("prefix", "edge-deploy")).encode(), 0o644)
    return _write_crl(ca_dir, ca_cert, ca_key, revoked)


def mosquitto_lines(ca_dir: Path, port: int = 8883) -> str:
    """The listener settings that make mosquitto use the CA, the CRL and the ACL (server cert: your own)."""
    ca_dir = Path(ca_dir).resolve()
    return "\n".join(
        [
            f"listener {port}",
            "# the broker's own certificate and key (mosquitto allows no comment after a value)",
            "certfile /etc/mosquitto/certs/server.crt",
            "keyfile /etc/mosquitto/certs/server.key",
            f"cafile {ca_dir / CA_CERT}",
            "require_certificate true",
            "use_identity_as_username true",
            f"crlfile {ca_dir / CRL}",
            f"acl_file {ca_dir / ACL}",
        ]
    )
