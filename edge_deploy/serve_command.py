"""``edge-deploy serve`` (the daemon) and ``edge-deploy command`` (send it a signed command): argv adapters.

Register both in ``edge_deploy.cli._registrars``: ``serve_command.add_serve`` and ``serve_command.add_command``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from edge_deploy.common import print_json, run

EXAMPLES = """\
examples:
  edge-deploy serve --config /etc/edge-deploy/edge-deploy.toml
  edge-deploy serve --config edge-deploy.toml --once --json     analyse the folder's photos, then exit
  edge-deploy serve --config edge-deploy.toml --check           validate the config and exit
  edge-deploy command --config edge-deploy.toml bench --runs 20 send a signed command to the device
"""


def _cmd_serve(args: argparse.Namespace) -> int:
    from edge.daemon.config import load_config
    from edge.daemon.service import Daemon

    config = load_config(Path(args.config))
    if args.check:
        from edge.daemon.preflight import preflight

        for line in preflight(config):
            print(f"  {line}")
        print(f"{config.source_file}: ok (device {config.device_id}, source {config.source.kind.value})")
        return 0
    level = (args.log_level or config.log_level.value).upper()
    logging.basicConfig(
        level=getattr(logging, level), stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    daemon = Daemon(config, once=args.once)
    daemon.install_signal_handlers()
    summary = daemon.run()
    if args.json:
        print_json(summary.to_dict())
    return 0


def add_serve(sub: argparse._SubParsersAction) -> None:
    """Register ``serve``."""
    p = sub.add_parser(
        "serve",
        help="run the device daemon: frames -> face recognition -> MQTT, with commands and telemetry",
        description="Read frames from a watched folder, a video file or a camera, recognise faces against "
        "the gallery, and report every result through the durable outbox to MQTT; publish periodic "
        "telemetry; obey signed commands (bench, reload, enroll, update) and answer text prompts. SIGTERM/SIGINT "
        "stop cleanly. See docs/daemon.md.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--config", "-c", required=True, help="daemon config (TOML), see edge-deploy.example.toml")
    p.add_argument("--once", action="store_true", help="stop when the source is exhausted (folder: files there now)")
    p.add_argument(
        "--check", action="store_true", help="validate the config and the files it names (secret, models, gallery, "
        "state_dir), then exit"
    )
    p.add_argument("--json", action="store_true", help="print the run summary as JSON at exit")
    p.add_argument("--log-level", choices=["debug", "info", "warning", "error"], help="override log_level")
    p.set_defaults(func=_cmd_serve)


def publish_tls(broker) -> dict | None:
    """paho's ``tls`` argument for a broker config: None only when TLS is off.

    ``tls = true`` without ``tls_ca`` means TLS checked against the system's CA store (never plaintext);
    ``tls_cert``/``tls_key`` are the client certificate, for brokers that require one.
    """
    if not broker.uses_tls:
        return None
    return {
        "ca_certs": str(broker.tls_ca) if broker.tls_ca else None,
        "certfile": str(broker.tls_cert) if broker.tls_cert else None,
        "keyfile": str(broker.tls_key) if broker.tls_key else None,
    }


def _cmd_command(args: argparse.Namespace) -> int:
    from edge.daemon.commands import load_secret, sign_command
    from edge.daemon.config import load_config
    from edge.daemon.listener import command_topic
    from edge.errors import InputError, require

    config = load_config(Path(args.config))
    if config.commands.secret_file is None:
        raise InputError(f"{config.source_file}: commands.secret_file is not set; commands are disabled")
    if config.broker is None:
        raise InputError(f"{config.source_file}: no [broker] table; expected the broker the device listens on")
    cmd_args: dict = {"runs": args.runs} if args.name == "bench" and args.runs else {}
    if args.name == "update":
        if not args.url or not args.sha256:
            raise InputError("update: needs --url (the signed bundle's .tar.gz) and --sha256 (the archive's sha256)")
        cmd_args = {"url": args.url, "sha256": args.sha256.lower()}
    payload = sign_command(load_secret(config.commands.secret_file), config.device_id, args.name, cmd_args)
    publish = require("paho.mqtt.publish", "device", "sending a command")
    b = config.broker
    auth = {"username": b.username, "password": b.password} if b.username else None
    topic = command_topic(config.telemetry.prefix, config.device_id)
    try:
        publish.single(
            topic, payload, qos=1, hostname=b.host, port=b.port, auth=auth, tls=publish_tls(b), keepalive=b.keepalive_s
        )
    except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
        raise InputError(f"cannot publish to broker {b.address}: {exc}") from exc
    print(f"sent {args.name} to {topic}; the answer arrives as a command.done/command.failed result")
    return 0


def add_command(sub: argparse._SubParsersAction) -> None:
    """Register ``command``."""
    p = sub.add_parser(
        "command",
        help="send a signed command (bench, reload, enroll, update) to a device running 'serve'",
        description="Sign a command with the shared secret named in the config (HMAC-SHA256, timestamp and "
        "nonce against replay) and publish it on <prefix>/<device_id>/cmd with QoS 1.",
    )
    p.add_argument("--config", "-c", required=True, help="the device's daemon config (device_id, broker, secret)")
    p.add_argument("name", choices=["bench", "reload", "enroll", "update"], help="what the device is to do")
    p.add_argument("--runs", type=int, help="bench: timed runs")
    p.add_argument("--url", help="update: http(s) URL of a signed bundle archive (edge-deploy build --sign-key)")
    p.add_argument("--sha256", help="update: the archive's sha256 (sha256sum BUNDLE.tar.gz)")
    p.set_defaults(func=_cmd_command)


def main(argv: list[str] | None = None) -> int:
    """Run ``serve``/``command`` without the full CLI (``python -m edge_deploy.serve_command serve ...``)."""
    parser = argparse.ArgumentParser(prog="edge-deploy")
    sub = parser.add_subparsers(dest="command", required=True)
    add_serve(sub)
    add_command(sub)
    return run(parser, argv)


if __name__ == "__main__":
    sys.exit(main())
