"""``edge-deploy fleet ...``: operator commands for many devices (credentials; see docs/fleet.md)."""

from __future__ import annotations

import argparse
from pathlib import Path

from edge_deploy.common import print_json


def _cmd_provision(args: argparse.Namespace) -> int:
    from edge.fleet.credentials import Role, mosquitto_lines, provision

    out = Path(args.output) if args.output else Path(args.ca) / "issued"
    issued = provision(args.identity, Path(args.ca), out, Role(args.role), args.prefix, args.days)
    if args.json:
        print_json(
            {
                "identity": issued.identity,
                "role": issued.role.value,
                "serial": issued.serial,
                "cert": str(issued.cert),
                "key": str(issued.key),
                "ca_cert": str(issued.ca_cert),
                "acl": str(issued.acl),
                "crl": str(issued.crl),
            }
        )
        return 0
    print(f"{issued.role.value} {issued.identity}: certificate {issued.cert}, key {issued.key} (mode 600)")
    print(f"  CA {issued.ca_cert}; ACL {issued.acl}; CRL {issued.crl}")
    if issued.role.value == "device":
        print(f'  device config: device_id = "{issued.identity}", [broker] tls_cert / tls_key = these files')
    print("mosquitto (reload it after every provision/revoke):")
    print("  " + mosquitto_lines(Path(args.ca)).replace("\n", "\n  "))
    return 0


def _cmd_revoke(args: argparse.Namespace) -> int:
    from edge.fleet.credentials import revoke

    crl = revoke(args.identity, Path(args.ca))
    print(f"revoked {args.identity}: {crl} and the ACL rewritten; reload mosquitto (kill -HUP) to apply")
    return 0


def add_fleet(sub: argparse._SubParsersAction) -> None:
    """Register ``edge-deploy fleet``."""
    p = sub.add_parser(
        "fleet",
        help="operator commands for a fleet: per-device certificates (provision, revoke)",
        description="Per-device MQTT credentials from a private CA: a client certificate per device (its "
        "common name is the device id), mosquitto's ACL (a device publishes only under its own prefix and "
        "reads only its own cmd and text/request topics) and a certificate revocation list.",
    )
    fsub = p.add_subparsers(dest="fleet_command", required=True, metavar="ACTION")
    prov = fsub.add_parser(
        "provision",
        help="issue a client certificate (and rewrite the ACL and CRL)",
        epilog="examples:\n  edge-deploy fleet provision pi-kitchen --ca fleet-ca/ -o pi-kitchen/\n"
        "  edge-deploy fleet provision monitor-1 --role monitor --ca fleet-ca/",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    prov.add_argument("identity", help="device id (or the monitor's / operator's name): the certificate's CN")
    prov.add_argument("--ca", required=True, help="the CA folder (a new CA is made there when it has none)")
    prov.add_argument("--output", "-o", help="where IDENTITY.crt and IDENTITY.key go (default: CA/issued)")
    prov.add_argument("--role", choices=["device", "monitor", "operator"], default="device")
    prov.add_argument("--prefix", default="edge-deploy", help="the fleet's topic prefix (telemetry.prefix)")
    prov.add_argument("--days", type=int, default=825, help="certificate validity in days (default 825)")
    prov.add_argument("--json", action="store_true", help="machine-readable output")
    prov.set_defaults(func=_cmd_provision)
    rev = fsub.add_parser("revoke", help="revoke an identity's certificate (CRL + ACL)")
    rev.add_argument("identity")
    rev.add_argument("--ca", required=True, help="the CA folder")
    rev.set_defaults(func=_cmd_revoke)
