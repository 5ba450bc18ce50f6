"""Per-device credentials (fleet/credentials.py): files, modes, the ACL text, refusals. The broker side is
tests/integration/test_credentials.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography import x509

from edge.errors import InputError
from fleet.credentials import Role, acl_text, provision, revoke


def test_provision_makes_a_ca_once_and_a_certificate_named_after_the_device(tmp_path: Path) -> None:
    ca = tmp_path / "ca"
    first = provision("pi-a", ca, tmp_path / "out")
    second = provision("pi-b", ca, tmp_path / "out")
    assert (ca / "ca.key").stat().st_mode & 0o777 == 0o600
    assert first.key.stat().st_mode & 0o777 == 0o600 and first.cert.stat().st_mode & 0o777 == 0o644
    cert = x509.load_pem_x509_certificate(second.cert.read_bytes())
    ca_cert = x509.load_pem_x509_certificate((ca / "ca.crt").read_bytes())
    assert cert.subject.rfc4514_string() == "CN=pi-b" and cert.issuer == ca_cert.subject
    cert.verify_directly_issued_by(ca_cert)  # both signed by the one CA made by the first call
    assert first.serial != second.serial


def test_the_acl_confines_devices_to_their_own_topics() -> None:
    text = acl_text({"pi-a": {"role": "device"}, "mon": {"role": "monitor"}, "ops": {"role": "operator"}}, "fleet")
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert lines == [
        "user mon",
        "topic read fleet/#",
        "topic write fleet-alerts/#",
        "user ops",
        "topic read fleet/#",
        "topic read fleet-alerts/#",
        "topic write fleet/+/cmd",
        "topic write fleet/+/text/request",
        "user pi-a",
        "topic write fleet/pi-a/status",
        "topic write fleet/pi-a/telemetry",
        "topic write fleet/pi-a/bench",
        "topic write fleet/pi-a/result",
        "topic read fleet/pi-a/cmd",
        "topic read fleet/pi-a/text/request",
    ]
    assert not [
        line for line in lines if line.startswith("pattern")
    ]  # a pattern would still match a revoked identity's open session


def test_refusals_name_what_is_wrong(tmp_path: Path) -> None:
    ca = tmp_path / "ca"
    provision("pi-a", ca, tmp_path / "out")
    with pytest.raises(InputError, match="'pi-a' has a certificate already .serial [0-9]+.; revoke it first"):
        provision("pi-a", ca, tmp_path / "out")
    with pytest.raises(InputError, match="identity = 'pi/a'"):
        provision("pi/a", ca, tmp_path / "out")
    with pytest.raises(InputError, match="no certificate for 'pi-z'; issued: pi-a"):
        revoke("pi-z", ca)
    crl_before = (ca / "crl.pem").read_bytes()
    revoke("pi-a", ca)
    crl = x509.load_pem_x509_crl((ca / "crl.pem").read_bytes())
    assert len(list(crl)) == 1 and (ca / "crl.pem").read_bytes() != crl_before
    assert provision("pi-a", ca, tmp_path / "again", Role.DEVICE).cert.is_file()  # re-issued after revocation
    for days in (-5, 0, 100000000):
        with pytest.raises(InputError, match=f"^days = {days}; expected a whole number of days in 1..3650 "):
            provision("pi-d", ca, tmp_path / "out", days=days)
    (ca / "ca.key").chmod(0o640)
    with pytest.raises(InputError, match="CA key '.*ca.key': mode 640 lets group or others read it"):
        provision("pi-c", ca, tmp_path / "out")
