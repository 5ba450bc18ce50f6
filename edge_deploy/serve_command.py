"""``edge-deploy serve`` (the daemon) and ``edge-deploy command`` (send it a signed command): argv adapters.

Register both in ``edge_deploy.cli._registrars``: ``serve_command.add_serve`` and ``serve_command.add_command``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from edge.daemon import EXAMPLE_CONFIG
from edge_deploy.common import Parser, add_commands, command_parser, print_json, run


def _cmd_serve(args: argparse.Namespace) -> int:
    from edge.daemon.config import load_config
    from edge.daemon.service import Daemon

    if args.example_config:
        sys.stdout.write(EXAMPLE_CONFIG.read_text(encoding="utf-8"))
        return 0
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
    p = command_parser(
        sub,
        "serve",
        summary="run the device daemon: frames -> face recognition -> MQTT, with commands and telemetry",
        description="Run the device daemon: recognise faces in frames from a watched folder, a video file or a "
        "camera, send every result through a durable outbox to MQTT, publish telemetry, obey signed commands "
        "and answer text prompts. SIGTERM or SIGINT stops it cleanly. docs/daemon.md.",
        examples=f"""
        # print the example config (every key, with its default): save it, e.g. as edge-deploy.toml, and edit it
        # (the file: {EXAMPLE_CONFIG})
        edge-deploy serve --example-config
        # validate the config and the files it names, then exit
        edge-deploy serve --config edge-deploy.toml --check
        # analyse the photos in the watched folder now, then exit
        edge-deploy serve --config edge-deploy.toml --once --json
        # as installed by a bundle's install.sh
        edge-deploy serve --config /etc/edge-deploy/edge-deploy.toml
        """,
    )
    config = p.add_mutually_exclusive_group(required=True)
    config.add_argument("--config", "-c", help="daemon config (TOML); start from --example-config")
    config.add_argument(
        "--example-config",
        action="store_true",
        help="print the example config (its file: see the examples) and exit (bundles: /etc/edge-deploy/)",
    )
    p.add_argument("--once", action="store_true", help="stop when the source is exhausted (folder: files there now)")
    p.add_argument("--check", action="store_true", help="validate the config and the files it names, then exit")
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
    p = command_parser(
        sub,
        "command",
        summary="send a signed command (bench, reload, enroll, update) to a device running 'serve'",
        description="Sign a command with the shared secret the device's daemon config names (HMAC-SHA256, with a "
        "timestamp and nonce against replay) and publish it on <prefix>/<device_id>/cmd with QoS 1. The answer "
        "arrives as a command.done or command.failed result.",
        examples="""
        # time the device's model, 20 runs
        edge-deploy command --config edge-deploy.toml bench --runs 20
        # re-open the models and re-read the gallery
        edge-deploy command --config edge-deploy.toml reload
        # install a signed bundle over the air (--sha256: sha256sum rpi4-face.tar.gz)
        edge-deploy command --config edge-deploy.toml update --url https://files.example/rpi4-face.tar.gz \\
            --sha256 HEX
        """,
    )
    p.add_argument("--config", "-c", required=True, help="the device's daemon config (device_id, broker, secret)")
    p.add_argument("name", choices=["bench", "reload", "enroll", "update"], help="what the device is to do")
    p.add_argument("--runs", type=int, help="bench: timed runs")
    p.add_argument("--url", help="update: http(s) URL of a signed bundle archive (edge-deploy build --sign-key)")
    p.add_argument("--sha256", help="update: the archive's sha256 (sha256sum BUNDLE.tar.gz)")
    p.set_defaults(func=_cmd_command)


def main(argv: list[str] | None = None) -> int:
    """Run ``serve``/``command`` without the full CLI (``python -m edge_deploy.serve_command serve ...``)."""
    parser = Parser(prog="edge-deploy")
    sub = add_commands(parser, "command", "COMMAND")
    add_serve(sub)
    add_command(sub)
    return run(parser, argv)


if __name__ == "__main__":
    sys.exit(main())
