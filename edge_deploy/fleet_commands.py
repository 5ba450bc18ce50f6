"""``edge-deploy fleet ...``: operator commands for many devices (credentials; see docs/fleet.md)."""

from __future__ import annotations

import argparse
from pathlib import Path

from edge_deploy.common import add_commands, command_parser, output_folder, print_json


def _cmd_provision(args: argparse.Namespace) -> int:
    from fleet.credentials import Role, mosquitto_lines, provision

    out = Path(args.output) if args.output else Path(args.ca) / "issued"
    with output_folder(Path(args.ca), f"--ca {args.ca}"), output_folder(out, f"--output {out}"):
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
    from fleet.credentials import revoke

    crl = revoke(args.identity, Path(args.ca))
    print(f"revoked {args.identity}: {crl} and the ACL rewritten")
    print("reload mosquitto now (systemctl reload mosquitto, or kill -HUP its pid): from then on the revoked "
          "identity cannot connect, and a session it still has open can neither publish nor receive")  # fmt: skip
    return 0


def add_fleet(sub: argparse._SubParsersAction) -> None:
    """Register ``edge-deploy fleet``."""
    p = command_parser(
        sub,
        "fleet",
        summary="operator commands for a fleet: per-device certificates (provision, revoke), staged rollouts",
        description="Operator commands for a fleet: per-device MQTT certificates from a private CA, with "
        "mosquitto's ACL and revocation list kept in step (provision, revoke), and staged over-the-air rollouts. "
        "docs/fleet.md.",
        examples="""
        edge-deploy fleet provision pi-kitchen --ca fleet-ca/ -o pi-kitchen/
        edge-deploy fleet revoke pi-kitchen --ca fleet-ca/
        edge-deploy fleet rollout https://files.example/rpi4-face.tar.gz --sha256 HEX --group beta \\
            --store out/monitor/monitor.db --broker 127.0.0.1:1883 --secret-file command.key
        """,
    )
    fsub = add_commands(p, "fleet_command", "ACTION")
    prov = command_parser(
        fsub,
        "provision",
        summary="issue a client certificate (and rewrite the ACL and CRL)",
        description="Issue a client certificate from the CA in --ca (a new CA is made there when it has none) to a "
        "device (the certificate's common name is its device id), a monitor or an operator, and rewrite "
        "mosquitto's ACL and revocation list: a device publishes only under its own prefix and reads only its own "
        "command topics.",
        examples="""
        # pi-kitchen/pi-kitchen.crt and .key, for the device config's [broker] tls_cert / tls_key
        edge-deploy fleet provision pi-kitchen --ca fleet-ca/ -o pi-kitchen/
        # a monitor's certificate, in fleet-ca/issued/
        edge-deploy fleet provision monitor-1 --role monitor --ca fleet-ca/
        """,
    )
    prov.add_argument("identity", help="device id (or the monitor's / operator's name): the certificate's CN")
    prov.add_argument("--ca", required=True, help="the CA folder (a new CA is made there when it has none)")
    prov.add_argument("--output", "-o", help="where IDENTITY.crt and IDENTITY.key go (default: CA/issued)")
    prov.add_argument("--role", choices=["device", "monitor", "operator"], default="device")
    prov.add_argument("--prefix", default="edge-deploy", help="the fleet's topic prefix (telemetry.prefix)")
    prov.add_argument("--days", type=int, default=825, help="certificate validity in days (default 825)")
    prov.add_argument("--json", action="store_true", help="machine-readable output")
    prov.set_defaults(func=_cmd_provision)
    rev = command_parser(
        fsub,
        "revoke",
        summary="revoke an identity's certificate (CRL + ACL)",
        description="Revoke an identity's certificate: add it to the CA's revocation list and drop it from "
        "mosquitto's ACL. Reload mosquitto (kill -HUP) to apply.",
        examples="""
        edge-deploy fleet revoke pi-kitchen --ca fleet-ca/
        """,
    )
    rev.add_argument("identity", help="the device id (or name) its certificate was issued to")
    rev.add_argument("--ca", required=True, help="the CA folder")
    rev.set_defaults(func=_cmd_revoke)
    add_rollout(fsub)


def _canary(text: str) -> float:
    """``10%`` or ``0.1`` as a fraction."""
    from edge.errors import InputError

    try:
        value = float(text[:-1]) / 100.0 if text.endswith("%") else float(text)
    except ValueError:
        raise InputError(f"--canary {text!r}; expected a percentage such as 10% or a fraction such as 0.1") from None
    return value


def _sender(args: argparse.Namespace):
    """A function that signs and publishes an ``update`` to one device and returns its nonce."""
    import json

    from edge.daemon.commands import load_secret, sign_command
    from edge.daemon.listener import command_topic
    from edge.errors import InputError, require
    from edge_deploy.device_commands import broker_config
    from edge_deploy.serve_command import publish_tls

    broker = broker_config(args)
    if broker is None:
        raise InputError("fleet rollout needs --broker (the broker the devices listen on)")
    secret = load_secret(Path(args.secret_file))
    publish = require("paho.mqtt.publish", "device", "sending update commands")
    auth = {"username": broker.username, "password": broker.password} if broker.username else None

    def send(device_id: str) -> str:
        body = sign_command(secret, device_id, "update", {"url": args.url, "sha256": args.sha256.lower()})
        try:
            publish.single(command_topic(args.prefix, device_id), body, qos=1, hostname=broker.host,
                           port=broker.port, auth=auth, tls=publish_tls(broker))  # fmt: skip
        except (OSError, ValueError) as exc:
            raise InputError(f"cannot publish to broker {broker.address}: {exc}") from exc
        return json.loads(body)["nonce"]

    return send


def _cmd_rollout(args: argparse.Namespace) -> int:
    import math
    import sys

    from edge.errors import InputError, ValidationError
    from fleet import open_store
    from fleet.rollout import MAX_TIMEOUT_S, RolloutPlan, run_rollout

    if not (math.isfinite(args.timeout) and 0.0 < args.timeout <= MAX_TIMEOUT_S):
        raise InputError(f"--timeout {args.timeout:g}; expected seconds in (0, {MAX_TIMEOUT_S:g}]")
    plan = RolloutPlan(args.url, args.sha256.lower(), args.group, _canary(args.canary), args.abort_after, args.timeout)
    send = _sender(args)
    if not args.tls_cert:
        print("warning: no client certificate (--tls-cert): outcomes are only as authentic as the broker's ACL; "
              "use a broker that requires the fleet's per-device certificates (edge-deploy fleet provision)",
              file=sys.stderr)  # fmt: skip
    store = open_store(args.store)
    try:
        report = run_rollout(plan, store, send, progress=lambda line: print(line, file=sys.stderr))
    finally:
        store.close()
    if args.json:
        print_json(report.to_dict())
    else:
        print(report.table())
    if not report.ok:
        raise ValidationError(
            f"rollout of {args.url} to group {args.group}: {report.failed} of {len(report.devices)} devices failed"
            + ("; aborted, later waves not sent" if report.aborted else "")
        )
    return 0


def add_rollout(fsub: argparse._SubParsersAction) -> None:
    """Register ``edge-deploy fleet rollout``."""
    from edge_deploy.device_commands import add_broker_options

    p = command_parser(
        fsub,
        "rollout",
        summary="update a group of devices in waves (canary first), stop on failures",
        description="Send a signed 'update' command to the devices tagged TAG (config 'tags'), a canary wave "
        "first; follow each device's outcome in the fleet store (fed by 'edge-deploy monitor'); stop before the "
        "next wave once --abort-after devices failed; print a table.",
        examples="""
        # 10% of the devices tagged beta first; stop at the first failure
        edge-deploy fleet rollout https://files.example/rpi4-face.tar.gz --sha256 HEX --group beta --canary 10% \\
            --abort-after 1 --store out/monitor/monitor.db --broker 10.0.0.2:8883 --tls-ca ca.crt \\
            --secret-file command.key
        """,
    )
    p.add_argument("url", help="http(s) URL of the signed bundle archive")
    p.add_argument("--sha256", required=True, help="the archive's sha256")
    p.add_argument("--group", required=True, metavar="TAG", help="devices whose config tags include TAG")
    p.add_argument("--canary", default="10%", help="share of the group in the first wave (default 10%%)")
    p.add_argument("--abort-after", type=int, default=1, metavar="N", help="stop after N failed devices (default 1)")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for a wave (default 900)")
    p.add_argument("--store", required=True, metavar="PATH|URL", help="the fleet store: SQLite file or postgresql://")
    p.add_argument("--secret-file", required=True, help="the fleet's command secret (commands.secret_file)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    add_broker_options(p)
    p.set_defaults(func=_cmd_rollout)
