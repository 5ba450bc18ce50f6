"""Fleet ingest into PostgreSQL: messages/s into the store, end-to-end lag, CPU, and the broker's own ceiling.

Everything real, on loopback, started by this script: a mosquitto (testsupport/broker.py), a
PostgreSQL cluster (testsupport/postgres.py), ``edge-deploy monitor`` processes, and simulated
devices (testsupport/fleet_devices.py: real ``TelemetryClient``s, one outbox each, spread over processes).

1. **Broker ceiling**: ``mosquitto_pub`` (QoS 1, ``--repeat``) into ``mosquitto_sub`` (QoS 1, MQTT v5), a
   telemetry-sized payload; the subscriber's messages/s is the anchor.
2. **Drain** (per monitor count in ``--monitors``): the monitors' persistent sessions exist but are offline
   while the devices publish a backlog (the broker queues it for them); then the monitors start and the
   time to commit the whole backlog gives the store's sustained messages/s, with the CPU seconds the
   monitors, PostgreSQL and mosquitto used meanwhile (from /proc), per 1,000 messages/s.
3. **Live**: monitors connected, devices reporting at ``--rate`` per device: the offered and stored
   messages/s and the lag from the device's timestamp to the row's insert (``stored - timestamp``, in the
   committing transaction) at p50 and p99.

    .venv/bin/python -m benchmarks run fleet_load                  # writes docs/benchmarks.md and docs/fleet.md figures
    .venv/bin/python -m benchmarks run fleet_load --devices 200 --no-write
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.harness.procstat import cpu_seconds
from benchmarks.harness.report import REPO, machine_line, write_section
from testsupport.broker import Broker
from testsupport.postgres import Postgres

NAME = "fleet_load"
SUMMARY = "Fleet ingest into PostgreSQL: messages/s, end-to-end lag, CPU"
#: the docs/benchmarks.md sections it writes
SECTIONS = ("fleet-load",)

SECTION = "fleet-load"
DEVICES = "testsupport.fleet_devices"


def children_of(pid: int) -> list[int]:
    """``pid`` and its direct children (PostgreSQL's backends are children of the postmaster)."""
    out = [pid]
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
    return out


def broker_ceiling(broker: Broker, messages: int, publishers: int, work: Path) -> dict:
    """mosquitto_pub (``-l``: one message per stdin line) -> mosquitto_sub, QoS 1: messages/s received."""
    body = {"type": "telemetry", "device_id": "sim-0000", "seq": 1, "timestamp": time.time(), "padding": "x" * 360}
    per = messages // publishers
    lines = work / "ceiling.txt"
    lines.write_text((json.dumps(body) + "\n") * per)
    topic = ["-p", str(broker.port), "-q", "1"]
    sub = subprocess.Popen(
        ["mosquitto_sub", *topic, "-V", "5", "-t", "ceiling/#", "-C", str(per * publishers)], stdout=subprocess.DEVNULL
    )
    time.sleep(1.0)
    started = time.monotonic()
    pubs = []
    for i in range(publishers):
        with open(lines, "rb") as fh:
            pubs.append(subprocess.Popen(["mosquitto_pub", *topic, "-M", "100", "-t", f"ceiling/{i}", "-l"], stdin=fh))
    for p in pubs:
        p.wait(300)
    sub.wait(300)
    elapsed = time.monotonic() - started
    return {"messages": per * publishers, "seconds": elapsed, "rate": per * publishers / elapsed}


class Fleet:
    """Monitors and device processes of one run."""

    next_id = 0

    def __init__(self, broker: Broker, url: str, monitors: int, work: Path) -> None:
        self.broker, self.url, self.work = broker, url, work
        self.ids = [f"bench-m{i}" for i in range(monitors)]
        work.mkdir(parents=True, exist_ok=True)
        self.monitors: list[subprocess.Popen] = []

    def start_monitors(self) -> None:
        for cid in self.ids:
            args = [sys.executable, "-m", "edge_deploy", "monitor", "--broker", f"127.0.0.1:{self.broker.port}",
                    "--store", self.url, "--client-id", cid, "-o", str(self.work / cid), "--json"]  # fmt: skip
            if len(self.ids) > 1:
                args += ["--shared", "bench"]
            log = open(self.work / f"{cid}.log", "ab")  # noqa: SIM115 - the child keeps it
            self.monitors.append(subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=REPO))
            log.close()

    def stop_monitors(self) -> None:
        for p in self.monitors:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        for p in self.monitors:
            p.wait(120)
        self.monitors = []

    def devices(self, count: int, procs: int, rate: float, duration: float, tag: str) -> list[subprocess.Popen]:
        """Device processes; each run's devices get fresh ids (fresh outboxes number from 1 again)."""
        per = count // procs
        first = Fleet.next_id
        Fleet.next_id += count
        return [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    DEVICES,
                    "--port",
                    str(self.broker.port),
                    "--dir",
                    str(self.work / f"{tag}{k}"),
                    "--devices",
                    str(per),
                    "--first",
                    str(first + k * per),
                    "--rate",
                    str(rate),
                    "--duration",
                    str(duration),
                    "--drain-timeout",
                    "600",
                ],
                stdout=subprocess.PIPE,
                text=True,
                cwd=REPO,
            )  # fmt: skip
            for k in range(procs)
        ]


def wait_devices(procs: list[subprocess.Popen]) -> dict:
    results = [json.loads(p.communicate(timeout=900)[0].strip().splitlines()[-1]) for p in procs]
    return {
        "reports": sum(r["reports"] for r in results),
        "send_s": max(r["send_s"] for r in results),
        "left": sum(sum(r["left"].values()) for r in results),
    }


def count(pg: Postgres) -> int:
    return int(pg.psql("SELECT count(*) FROM messages") or 0)


def drain_run(pg: Postgres, broker: Broker, monitors: int, args: argparse.Namespace, work: Path) -> dict:
    """Backlog queued for offline monitor sessions, then the time the monitors take to commit it."""
    fleet = Fleet(broker, pg.url, monitors, work)
    fleet.start_monitors()  # once, to create the persistent sessions (and the schema)
    deadline = time.monotonic() + 60
    while pg.psql("SELECT to_regclass('messages') IS NOT NULL") != "t" and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(2.0)
    fleet.stop_monitors()
    base = count(pg)
    offered = fleet.devices(args.devices, args.procs, args.backlog / args.devices / args.backlog_s, args.backlog_s, "d")
    sent = wait_devices(offered)
    pids = {"mosquitto": [broker._proc.pid], "postgres": children_of(int(pg.data.joinpath("postmaster.pid")
                                                                        .read_text().split()[0]))}  # fmt: skip
    cpu0 = {k: cpu_seconds(v) for k, v in pids.items()}
    started = time.monotonic()
    fleet.start_monitors()
    pids["monitors"] = [p.pid for p in fleet.monitors]
    cpu0["monitors"] = 0.0
    target = base + sent["reports"]
    cpu_now = dict(cpu0)
    while count(pg) < target and time.monotonic() - started < 900:
        time.sleep(0.25)
        pids["postgres"] = sorted(set(pids["postgres"]) | set(children_of(pids["postgres"][0])))
        cpu_now = {k: cpu_seconds(v) for k, v in pids.items()}
    elapsed = time.monotonic() - started
    cpu = {k: cpu_now[k] - cpu0[k] for k in pids}
    fleet.stop_monitors()
    # the rate counts from the first row committed to the last (the monitors' start-up is not ingest)
    stored, first, last = pg.psql(
        f"SELECT count(*), min(stored), max(stored) FROM (SELECT stored FROM messages ORDER BY stored DESC "
        f"LIMIT {sent['reports']}) AS backlog"
    ).split("|")
    span = float(last) - float(first)
    return {"monitors": monitors, "backlog": sent["reports"], "stored": count(pg) - base, "seconds": elapsed,
            "ingest_s": span, "rate": int(stored) / span, "cpu_s": cpu}  # fmt: skip


def live_run(pg: Postgres, broker: Broker, monitors: int, args: argparse.Namespace, work: Path) -> dict:
    """Monitors connected, devices at a steady rate: stored messages/s and lag percentiles."""
    fleet = Fleet(broker, pg.url, monitors, work)
    fleet.start_monitors()
    time.sleep(3.0)
    since = time.time()
    base = count(pg)
    sent = wait_devices(fleet.devices(args.devices, args.procs, args.rate, args.live_s, "l"))
    deadline = time.monotonic() + 300
    while count(pg) < base + sent["reports"] and time.monotonic() < deadline:
        time.sleep(0.25)
    lag = pg.psql(
        "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY stored - timestamp), "
        "percentile_cont(0.99) WITHIN GROUP (ORDER BY stored - timestamp), count(*), min(timestamp), max(stored) "
        f"FROM messages WHERE timestamp >= {since}"
    ).split("|")
    fleet.stop_monitors()
    p50, p99, rows, first, last = (float(x) for x in lag)
    return {"monitors": monitors, "offered": sent["reports"] / sent["send_s"], "sent": sent["reports"],
            "stored": int(rows), "rate": rows / (last - first), "lag_p50_ms": p50 * 1000, "lag_p99_ms": p99 * 1000,
            "left": sent["left"]}  # fmt: skip


def render(ceiling: dict, drains: list[dict], lives: list[dict], args: argparse.Namespace, command: str) -> str:
    flags = [f for f in ("avx512_vnni", "avx2") if f in Path("/proc/cpuinfo").read_text()]
    lines = [
        "## Fleet ingest into PostgreSQL",
        "",
        f"`{command}` — {machine_line()}; CPU flags {', '.join(flags)}. Broker, PostgreSQL, monitors and "
        f"{args.devices} simulated devices ({args.procs} processes, real `TelemetryClient`s with their own "
        "outbox) share the machine's cores.",
        "",
        f"Broker ceiling (mosquitto_pub → mosquitto_sub, QoS 1): **{ceiling['rate']:,.0f} msg/s** "
        f"({ceiling['messages']:,} messages in {ceiling['seconds']:.1f} s).",
        "",
        "| monitors | backlog | committed msg/s | ratio to broker ceiling | CPU s per 1,000 msg (monitors / "
        "PostgreSQL / mosquitto) | CPU cores per 1,000 msg/s |",
        "|---|---|---|---|---|---|",
    ]
    for d in drains:
        per = {k: v / d["stored"] * 1000 for k, v in d["cpu_s"].items()}
        lines.append(
            f"| {d['monitors']} | {d['backlog']:,} | {d['rate']:,.0f} | {d['rate'] / ceiling['rate']:.2f} | "
            f"{per['monitors']:.2f} / {per['postgres']:.2f} / {per['mosquitto']:.2f} | {sum(per.values()):.2f} |"
        )
    lines += [
        "",
        "| monitors | devices × rate | offered msg/s | stored | lag p50 | lag p99 |",
        "|---|---|---|---|---|---|",
    ]
    for v in lives:
        lines.append(
            f"| {v['monitors']} | {args.devices} × {args.rate:g}/s | {v['offered']:,.0f} | {v['stored']:,} of "
            f"{v['sent']:,} | {v['lag_p50_ms']:.0f} ms | {v['lag_p99_ms']:.0f} ms |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=1000)
    parser.add_argument("--procs", type=int, default=4, help="device processes")
    parser.add_argument("--rate", type=float, default=0.5, help="live phase: reports per second per device")
    parser.add_argument("--live-s", type=float, default=60.0)
    parser.add_argument("--backlog", type=int, default=40000, help="drain phase: messages queued")
    parser.add_argument("--backlog-s", type=float, default=40.0, help="drain phase: seconds to publish them")
    parser.add_argument(
        "--ceiling", type=int, default=60000, help="messages of the broker-ceiling run (< the broker's 100,000 queue)"
    )
    parser.add_argument("--monitors", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    command = "python -m benchmarks run fleet_load " + " ".join(argv if argv is not None else sys.argv[1:])
    work = Path(tempfile.mkdtemp(prefix="fleet-load-"))
    pg = Postgres()
    drains, lives = [], []
    try:
        pg.start()
        with Broker(work / "broker") as broker:
            ceiling = broker_ceiling(broker, args.ceiling, 4, work)
            print(f"ceiling {ceiling}", file=sys.stderr, flush=True)
            for n in args.monitors:
                drains.append(drain_run(pg, broker, n, args, work / f"drain{n}"))
                print(f"drain {drains[-1]}", file=sys.stderr, flush=True)
                lives.append(live_run(pg, broker, n, args, work / f"live{n}"))
                print(f"live {lives[-1]}", file=sys.stderr, flush=True)
            markdown = render(ceiling, drains, lives, args, command.strip())
            print(markdown)
            if not args.no_write:
                print(f"written to {write_section(SECTION, markdown)}", file=sys.stderr)
    finally:
        pg.close()
        shutil.rmtree(work, ignore_errors=True)
    return 0
