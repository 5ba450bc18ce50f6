"""Device-side subcommands: ``bench`` and ``monitor`` (argv adapters over edge.bench and fleet)."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from edge.errors import InputError
from edge_deploy.common import command_parser, output_folder, print_json


def add_broker_options(p: argparse.ArgumentParser) -> None:
    """The options every MQTT-speaking command takes (one flag away from a real broker)."""
    g = p.add_argument_group("MQTT broker")
    g.add_argument("--broker", metavar="HOST[:PORT]", help="broker address, e.g. 127.0.0.1:1883")
    g.add_argument("--username", help="MQTT user name")
    g.add_argument("--password-file", type=Path, help="file whose first line is the MQTT password")
    g.add_argument("--tls-ca", type=Path, help="CA certificate (PEM) that signed the broker's certificate")
    g.add_argument("--tls-cert", type=Path, help="client certificate (PEM), if the broker requires one")
    g.add_argument("--tls-key", type=Path, help="the client certificate's private key (PEM)")
    g.add_argument("--prefix", default="edge-deploy", help="topic prefix (default: edge-deploy)")
    g.add_argument(
        "--allow-insecure",
        action="store_true",
        help="accept a broker off this machine without TLS (as the daemon's broker.allow_insecure)",
    )


def split_host_port(text: str, flag: str, default_port: int | None) -> tuple[str, int]:
    """``HOST[:PORT]`` as (host, port); an empty host means 127.0.0.1.

    Raises:
        InputError: naming ``flag`` if the port is not a number, or missing without a default.
    """
    host, _, port = text.rpartition(":") if ":" in text else (text, "", "")
    try:
        if port:
            return host or "127.0.0.1", int(port)
        if default_port is None:
            raise ValueError
        return host or "127.0.0.1", default_port
    except ValueError as exc:
        form = "HOST[:PORT]" if default_port is not None else "HOST:PORT"
        raise InputError(f"{flag} {text!r}: port {port!r} is not a number; expected {form}") from exc


def broker_config(args: argparse.Namespace):
    """A BrokerConfig from the broker options, or None when --broker is not given."""
    from edge.telemetry.link import BrokerConfig

    if not args.broker:
        return None
    host, port_no = split_host_port(args.broker, "--broker", 8883 if args.tls_ca else 1883)
    password = None
    if args.password_file:
        from edge.filemode import check_private_mode

        check_private_mode(args.password_file, f"--password-file '{args.password_file}'")
        try:
            password = args.password_file.read_text(encoding="utf-8").splitlines()[0]
        except (OSError, IndexError) as exc:
            raise InputError(f"{args.password_file}: cannot read a password from its first line ({exc})") from exc
    broker = BrokerConfig(
        host=host,
        port=port_no,
        username=args.username,
        password=password,
        tls=bool(args.tls_ca),
        tls_ca=args.tls_ca,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
    )
    _check_clear_text(broker, args.allow_insecure)
    return broker


def _check_clear_text(broker, allow: bool) -> None:
    """Refuse a broker off this machine without TLS unless allowed, then warn (as the daemon does)."""
    if broker.uses_tls or broker.is_loopback:
        return
    if not allow:
        raise InputError(
            f"--broker {broker.address} without TLS; expected --tls-ca for a broker off this machine (the "
            "password, commands and results would cross the network in clear), or --allow-insecure to accept that"
        )
    print(f"warning: broker {broker.address} is reached WITHOUT TLS (--allow-insecure): the password, commands "
          "and results cross the network in clear", file=sys.stderr)  # fmt: skip


# --- bench -----------------------------------------------------------------------------------------------


#: Bounds of the bench options: a bench must end, and its inputs must fit a device's memory.
MAX_BENCH_COUNT = 1_000_000
MAX_BENCH_SECONDS = 86_400.0
MAX_INPUT_ELEMENTS = 1 << 28  # 1 GiB of float32


def _check_bench_args(args: argparse.Namespace, shapes: dict[str, tuple[int, ...]]) -> None:
    """Refuse options that would never end or never fit (NaN or infinite durations, 10^12 runs, 10^10-pixel
    inputs) with a one-line error naming the option."""
    from edge.daemon.config import MAX_THREADS

    for flag, value, low, high in (
        ("--count", args.count, 1, MAX_BENCH_COUNT),
        ("--warmup", args.warmup, 0, MAX_BENCH_COUNT),
        ("--threads", args.threads if args.threads is not None else 1, 1, MAX_THREADS),
    ):
        if not low <= value <= high:
            raise InputError(f"{flag} {value}; expected a whole number in {low}..{high}")
    if not (math.isfinite(args.min_duration) and 0 <= args.min_duration <= MAX_BENCH_SECONDS):
        raise InputError(f"--min-duration {args.min_duration}; expected seconds in 0..{MAX_BENCH_SECONDS:g}")
    for name, shape in shapes.items():
        if math.prod(shape) > MAX_INPUT_ELEMENTS:
            raise InputError(
                f"--shape {name}={'x'.join(map(str, shape))}: {math.prod(shape)} elements; expected at most "
                f"{MAX_INPUT_ELEMENTS} (1 GiB of float32)"
            )


def _cmd_bench(args: argparse.Namespace) -> int:
    import numpy as np

    from edge.bench import BenchTarget, bench_target, make_inputs, parse_shape_overrides, run_bench
    from edge.board import detect_board
    from edge.runtime import first_batch, open_model

    shapes = parse_shape_overrides(args.shape or [])
    _check_bench_args(args, shapes)
    target = bench_target(args.model)
    if args.shape or args.random:
        target = BenchTarget(target.model)  # the inputs asked for, not the folder's evaluation data
    board = detect_board(override=args.target)
    with open_model(target.model, threads=args.threads, backend=args.backend, profile=board.profile) as model:
        if target.inputs_npz is not None:
            with np.load(target.inputs_npz) as data:
                feeds = first_batch(str(target.inputs_npz), model.inputs, data)
        else:
            feeds = make_inputs(model.inputs, shapes, seed=args.seed)
        result = run_bench(
            model, feeds, count=args.count, min_duration_s=args.min_duration, warmup=args.warmup, board=board
        )
    if args.plot:
        with output_folder(args.plot.parent, f"--plot {args.plot}", create=True):
            result.plot_png(args.plot)
    if args.json:
        print_json({**result.to_dict(), "inputs": target.describe()})
    else:
        print(f"{target.model}: inputs {target.describe()}")
        print(result.to_table())
        if args.plot:
            print(f"plot: {args.plot}")
    return 0


def add_bench(sub: argparse._SubParsersAction) -> None:
    p = command_parser(
        sub,
        "bench",
        summary="latency of one model on this machine (MLPerf-style SingleStream)",
        description="Time one model (ONNX, ORT or TFLite, told apart by its bytes) on this machine: the first "
        "inference reported apart, a warm-up, then at least --count runs and --min-duration seconds. Reports "
        "p50/p90/p99, throughput, peak RSS and, on a Pi, SoC temperature, clock and throttling.",
        examples="""
        # the face embedder 'edge-deploy demo' bundles, its dynamic input fixed, with a latency plot
        edge-deploy bench out/demo/dist/rpi4-face/models/face/face_embedder.int8.onnx --shape chip=1x3x150x150 \
            --plot out/latency.png
        # a convert model folder: the file it ships, on its --eval data
        edge-deploy bench out/net --json
        """,
    )
    p.add_argument(
        "model",
        type=Path,
        help="model file (.onnx, .ort or .tflite), or a convert model folder (its file, on its --eval data)",
    )
    p.add_argument("--target", help="profile to use (default: detected from /proc/device-tree/model)")
    p.add_argument("--backend", choices=["onnxruntime", "litert"], help="default: from the model's format")
    p.add_argument("--threads", type=int, help="intra-op threads (default: the profile's, else all CPUs)")
    p.add_argument("--shape", action="append", metavar="NAME=1x3x150x150", help="shape of a dynamic input")
    p.add_argument("--count", type=int, default=100, help="timed runs at least (default 100)")
    p.add_argument("--min-duration", type=float, default=0.0, help="timed seconds at least (default 0)")
    p.add_argument("--warmup", type=int, default=10, help="untimed runs after the first (default 10)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    p.add_argument("--random", action="store_true", help="a convert model folder: random inputs, not its --eval data")
    p.add_argument("--plot", type=Path, help="write a latency histogram + CDF PNG here (parents created)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_bench)


# --- monitor ---------------------------------------------------------------------------------------------


def _cmd_monitor(args: argparse.Namespace) -> int:
    from fleet import MonitorConfig, open_store, run_monitor
    from fleet.alerts import AlertRules, load_alert_rules
    from fleet.run import serve_dashboard

    out = Path(args.output)
    store = args.store or str(out / "monitor.db")
    rules = load_alert_rules(args.config) if args.config else AlertRules()
    web = _web_config(args, rules)
    broker = broker_config(args)
    if broker is None and web is not None:  # dashboard only: other monitors write the store
        with open_store(store, args.prefix) as fleet:
            serve_dashboard(fleet, web, args.duration, print_fn=lambda text: print(text, flush=True))
        return 0
    if broker is None:
        raise InputError("monitor needs --broker HOST[:PORT], e.g. --broker 127.0.0.1:1883 (or only --web to serve "
                         "the dashboard of a store other monitors write)")  # fmt: skip
    if args.shared and not args.client_id:
        raise InputError(
            f"monitor --shared {args.shared} needs --client-id ID: a stable id per instance, so the broker keeps "
            "each instance's session (and its unacknowledged messages) across restarts"
        )
    out.mkdir(parents=True, exist_ok=True)
    config = MonitorConfig(
        broker=broker,
        db_path=store,
        prefix=args.prefix,
        client_id=args.client_id or "edge-deploy-monitor",
        shared_group=args.shared,
        retention_days=args.retention_days,
    )

    def show(text: str) -> None:
        if not args.json:  # stdout is then the JSON summary alone
            print(text, flush=True)

    tty = sys.stdout.isatty()
    summary = run_monitor(config, args.duration, out, print_fn=show, web=web, table=not args.json, tty=tty, rules=rules)
    data = {
        "devices": summary.devices,
        "reports": summary.reports,
        "duplicates_dropped": summary.duplicates,
        "rejected": summary.rejected,
        "csv": str(summary.csv_path),
        "png": str(summary.png_path),
    }
    if args.json:
        print_json(data)
    else:
        print(
            f"{data['devices']} device(s), {data['reports']} report(s) stored, "
            f"{data['duplicates_dropped']} duplicate(s) dropped, {data['rejected']} rejected; "
            f"wrote {data['csv']} and {data['png']}"
        )
    return 0


def _web_config(args: argparse.Namespace, rules):
    """The dashboard's DashboardConfig from --web, --web-auth and --web-host (None without --web)."""
    from fleet.dashboard import DashboardConfig, read_token

    if not args.web:
        if args.web_auth or args.web_host:
            raise InputError(f"{'--web-auth' if args.web_auth else '--web-host'} needs --web HOST:PORT")
        return None
    host, port = split_host_port(args.web, "--web", None)
    token = read_token(args.web_auth) if args.web_auth else None
    return DashboardConfig(host, port, token=token, hosts=tuple(args.web_host or ()), rules=rules)


def add_monitor(sub: argparse._SubParsersAction) -> None:
    p = command_parser(
        sub,
        "monitor",
        summary="watch a fleet's telemetry over MQTT; store, deduplicate, serve a dashboard, export CSV and PNG",
        description="Watch a fleet's telemetry over MQTT: store every report (SQLite, or PostgreSQL with --store "
        "postgresql://...), drop duplicates, show a live table of devices and export telemetry.csv and .png at "
        "the end (Ctrl-C or --duration). --web serves the dashboard; without --broker, only the dashboard of a "
        "store other monitors write. docs/fleet.md.",
        examples="""
        edge-deploy monitor --broker 127.0.0.1:1883 --duration 60 -o out/fleet
        # one of several instances sharing the ingest into PostgreSQL
        edge-deploy monitor --broker 127.0.0.1:1883 --store postgresql://edge@127.0.0.1/fleet --shared ingest \\
            --client-id monitor-1
        # only the dashboard of that store
        edge-deploy monitor --store postgresql://edge@127.0.0.1/fleet --web 127.0.0.1:8080
        """,
    )
    add_broker_options(p)
    p.add_argument(
        "--duration", type=float, help="seconds to watch (default: until Ctrl-C or SIGTERM; both export and exit 0)"
    )
    p.add_argument("--output", "-o", default="out/monitor", help="folder for monitor.db, CSV and PNG")
    p.add_argument("--store", metavar="PATH|URL", help="SQLite file or postgresql:// URL (default: OUTPUT/monitor.db)")
    p.add_argument("--shared", metavar="GROUP", help="join MQTT v5 shared-subscription GROUP ($share/GROUP/PREFIX/#)")
    p.add_argument("--client-id", help="MQTT client id, stable per instance (default edge-deploy-monitor)")
    p.add_argument("--retention-days", type=int, metavar="DAYS", help="drop reports older than DAYS days from the "
                   "store, checked hourly (default: keep all; docs/fleet.md, The store)")  # fmt: skip
    p.add_argument("--web", metavar="HOST:PORT", help="serve the fleet dashboard here, e.g. 127.0.0.1:8080")
    p.add_argument("--web-auth", type=Path, metavar="FILE", help="mode-600 file whose first line is the dashboard's "
                   "login token; required when --web is not a loopback address")  # fmt: skip
    p.add_argument("--web-host", action="append", metavar="NAME", help="also answer requests for this Host name, "
                   "e.g. the machine's DNS name with --web 0.0.0.0:8080 (repeatable)")  # fmt: skip
    p.add_argument("--config", type=Path, metavar="FILE", help="TOML file with an [alerts] table (docs/fleet.md): "
                   "rules shown on the dashboard and published retained on PREFIX-alerts/<device>")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print only a JSON summary at the end")
    p.set_defaults(func=_cmd_monitor)
