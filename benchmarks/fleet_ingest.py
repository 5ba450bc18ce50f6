"""One monitor's ingest against the broker's own QoS-1 ceiling, measured in the same run, and where its CPU goes.

Everything real, on loopback, started by this script: a mosquitto (testsupport/broker.py), the store
(a PostgreSQL cluster from testsupport/postgres.py, or a SQLite file), ``edge-deploy monitor`` processes.
The load is ``mosquitto_pub -l`` (C, QoS 1) reading pre-generated telemetry reports, one process per device
topic, so the publisher is not what limits the rate.

1. **Ceiling**: the same reports through the broker into ``mosquitto_sub`` (C, QoS 1, MQTT v5), counted.
2. **One monitor**, then **N monitors in a shared group**: connected and subscribed, the same load published
   again under fresh device ids; committed messages/s from the first publish to the last row, and each
   monitor's CPU time (from /proc) per message. CPU per message is what a loaded machine disturbs least.
3. **Components**: in this process, on the same payloads: ``decode`` (msgspec) against the hand-written
   rules it replaced, and ``FleetStore.commit`` per message at the monitor's batch sizes; the rest of the
   monitor's CPU per message is the network loop, the frame reader and the acknowledgements.

    .venv/bin/python -m benchmarks run fleet_ingest --write        # docs/benchmarks.md section fleet-ingest
    .venv/bin/python -m benchmarks run fleet_ingest --store sqlite --messages 20000
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
from benchmarks.harness.report import REPO, machine_line, say, write_section
from testsupport.broker import Broker
from testsupport.postgres import Postgres

NAME = "fleet_ingest"
SUMMARY = "One monitor's committed msg/s against the broker's QoS-1 ceiling; CPU per message per component"
SECTIONS = ("fleet-ingest",)

PREFIX = "edge-deploy"


def server_pids(broker: Broker, pg: Postgres | None) -> dict[str, list[int]]:
    """mosquitto's pid, and PostgreSQL's postmaster with its children (the backends), by name."""
    out = {"mosquitto": [broker._proc.pid] if broker._proc else []}
    if pg is not None:
        top = int(pg.data.joinpath("postmaster.pid").read_text().split()[0])
        kids = []
        for entry in Path("/proc").iterdir():
            try:
                if entry.name.isdigit() and int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == top:
                    kids.append(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
        out["postgresql"] = [top, *kids]
    return out


def report_lines(tag: str, devices: int, per_device: int) -> dict[str, bytes]:
    """Per device id, ``per_device`` telemetry reports (schema version 3, seq 1..n), one JSON a line."""
    from edge.telemetry.schema import Telemetry, to_json

    now = time.time()
    out = {}
    for d in range(devices):
        device = f"{tag}-{d:03d}"
        lines = []
        for seq in range(1, per_device + 1):
            m = Telemetry(device_id=device, seq=seq, timestamp=now, latency_p50_ms=12.5 + seq % 7, latency_p90_ms=20.25,
                          fps=29.5, temperature_c=51.0, window_s=10.0, model="arcface-int8", model_version="0.1.0",
                          model_sha256="a" * 64, bundle_id="b" * 16, profile="rpi4", runtime="onnxruntime",
                          precision="int8", int8_kernels="arm-neon")  # fmt: skip
            lines.append(to_json(m))
        out[device] = ("\n".join(lines) + "\n").encode()
    return out


def publish(port: int, loads: dict[str, bytes], work: Path) -> None:
    """One ``mosquitto_pub -l -q 1`` per device topic, all at once; returns when every one has finished."""
    procs = []
    for device, data in loads.items():
        path = work / f"{device}.txt"
        path.write_bytes(data)
        with open(path, "rb") as fh:
            topic = f"{PREFIX}/{device}/telemetry"
            args = ["mosquitto_pub", "-p", str(port), "-q", "1", "-M", "100", "-t", topic, "-l"]
            procs.append(subprocess.Popen(args, stdin=fh))
    for p in procs:
        if p.wait(600) != 0:
            raise RuntimeError(f"mosquitto_pub exited {p.returncode}")


def ceiling(broker: Broker, loads: dict[str, bytes], work: Path) -> dict:
    """The broker's QoS-1 rate with C clients at both ends: publishers -> mosquitto -> mosquitto_sub."""
    total = sum(v.count(b"\n") for v in loads.values())
    args = ["mosquitto_sub", "-p", str(broker.port), "-q", "1", "-V", "5", "-t", f"{PREFIX}/#", "-C", str(total)]
    sub = subprocess.Popen(args, stdout=subprocess.DEVNULL)
    time.sleep(1.0)
    started = time.monotonic()
    publish(broker.port, loads, work)
    sub.wait(600)
    seconds = time.monotonic() - started
    return {"messages": total, "seconds": seconds, "rate": total / seconds}


def counter(store_url: str):
    """A function returning the rows in ``messages`` of the store."""
    from fleet import open_store

    store = open_store(store_url)
    return store.count, store


def monitors_run(broker: Broker, pg: Postgres | None, count: int, loads: dict[str, bytes], work: Path) -> dict:
    """``count`` monitors (a shared group when more than one), subscribed; the load published; committed msg/s
    from the first publish to the last row, and the monitors' CPU seconds meanwhile."""
    work.mkdir(parents=True, exist_ok=True)
    store_url = pg.url if pg is not None else str(work.parent / "fleet.db")
    procs = []
    for i in range(count):
        args = [sys.executable, "-m", "edge_deploy", "monitor", "--broker", f"127.0.0.1:{broker.port}", "--store",
                store_url, "--client-id", f"{work.name}-m{i}", "-o", str(work / f"m{i}"), "--json"]  # fmt: skip
        if count > 1:
            args += ["--shared", work.name]
        log = open(work / f"m{i}.log", "wb")  # noqa: SIM115 - the child keeps it
        procs.append(subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=REPO))
        log.close()
    rows, store = counter(store_url)
    try:
        deadline = time.monotonic() + 60
        while broker.log().count(f"{work.name}-m") < count and time.monotonic() < deadline:  # "... connected as"
            time.sleep(0.2)
        time.sleep(2.0)  # subscribed, schema made
        base = rows()
        total = sum(v.count(b"\n") for v in loads.values())
        pids = [p.pid for p in procs]
        cpu0 = [cpu_seconds([pid]) for pid in pids]
        servers = server_pids(broker, pg)
        server0 = {k: cpu_seconds(v) for k, v in servers.items()}
        started = time.monotonic()
        publish(broker.port, loads, work)
        published = time.monotonic() - started
        while rows() < base + total and time.monotonic() - started < 900:
            time.sleep(0.1)
        seconds = time.monotonic() - started
        cpu = [cpu_seconds([pid]) - c for pid, c in zip(pids, cpu0, strict=True)]
        servers = {k: sorted(set(v) | set(server_pids(broker, pg).get(k, []))) for k, v in servers.items()}
        server_us = {k: (cpu_seconds(v) - server0[k]) / max(total, 1) * 1e6 for k, v in servers.items()}
        stored = rows() - base
    finally:
        store.close()
        for p in procs:
            p.send_signal(signal.SIGINT)
        for p in procs:
            p.wait(120)
    return {"monitors": count, "messages": total, "stored": stored, "seconds": seconds, "publish_s": published,
            "rate": stored / seconds, "cpu_s": cpu, "cpu_us_per_msg": sum(cpu) / max(stored, 1) * 1e6,
            "server_us_per_msg": server_us}  # fmt: skip


def components(store_url: str, loads: dict[str, bytes], batches: tuple[int, ...]) -> dict:
    """CPU microseconds per message of decode (msgspec, and the hand-written rules) and of the store's commit."""
    from edge.telemetry.schema import explain_refusal, from_json
    from fleet import open_store
    from fleet.records import decode

    items = [(f"{PREFIX}/{d}/telemetry", line) for d, data in loads.items() for line in data.splitlines()]
    out: dict[str, float] = {}
    for name, fn in (("decode", lambda t, p: decode(PREFIX, t, p, time.time())),
                     ("from_json (msgspec)", lambda t, p: from_json(p, t)),
                     ("by hand (before)", lambda t, p: explain_refusal(p, t))):  # fmt: skip
        t0 = time.process_time()
        for topic, payload in items:
            fn(topic, payload)
        out[name] = (time.process_time() - t0) / len(items) * 1e6
    out.update(_frames_us(items))
    decoded = [decode(PREFIX, t, p, time.time()) for t, p in items]
    with open_store(store_url) as store:
        for batch in batches:
            t0, w0 = time.process_time(), time.monotonic()
            for i in range(0, len(decoded), batch):
                store.commit(decoded[i : i + batch])
            out[f"commit, batches of {batch}"] = (time.process_time() - t0) / len(decoded) * 1e6
            out[f"commit, batches of {batch}: wall time, not CPU"] = (time.monotonic() - w0) / len(decoded) * 1e6
            renamed = [(t.replace("/p-", "/q-"), p.replace(b'"p-', b'"q-')) for t, p in items]  # new device ids
            decoded = [decode(PREFIX, t, p, time.time()) for t, p in renamed]
            items = renamed
    return out


def _frames_us(items: list[tuple[str, bytes]]) -> dict[str, float]:
    """CPU microseconds per message of the monitor's frame reader on these reports as QoS-1 MQTT v5 PUBLISH
    frames (in buffers of 500, as a socket read holds them), and of paho's parse of one PUBLISH's (empty) v5
    properties alone, the step the reader skips."""
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties

    from fleet.frames import split_publishes

    frames = []
    for mid, (topic, payload) in enumerate(items, 1):
        body = len(topic).to_bytes(2, "big") + topic.encode() + (mid % 65535 + 1).to_bytes(2, "big") + b"\x00"
        body += payload
        size, length = len(body), bytearray()
        while True:
            size, byte = size >> 7, size & 0x7F
            length.append(byte | (0x80 if size else 0))
            if not size:
                break
        frames.append(b"\x32" + bytes(length) + body)
    buffers = [b"".join(frames[i : i + 500]) for i in range(0, len(frames), 500)]
    t0 = time.process_time()
    for buf in buffers:
        split_publishes(buf, 500)
    split = (time.process_time() - t0) / len(items) * 1e6
    t0 = time.process_time()
    for _ in items:
        Properties(PacketTypes.PUBLISH).unpack(b"\x00")
    paho = (time.process_time() - t0) / len(items) * 1e6
    return {"frames (fleet.frames.split_publishes)": split, "paho: the MQTT v5 properties of one PUBLISH": paho}


def render(args: argparse.Namespace, command: str, top: dict, runs: list[dict], parts: dict) -> str:
    one = runs[0]
    lines = [
        "## Fleet ingest: one monitor against the broker's ceiling",
        "",
        f"`{command}` — {machine_line()} (1-minute load average; other work shared the machine). Store: "
        f"{args.store}. Load: {args.devices} `mosquitto_pub -l -q 1` processes, {args.messages:,} telemetry "
        f"reports ({len(PAYLOAD_SIZES[0]) if PAYLOAD_SIZES else 0} bytes each) per phase.",
        "",
        f"Broker ceiling (mosquitto_pub → mosquitto → mosquitto_sub, QoS 1, same reports): "
        f"**{top['rate']:,.0f} msg/s**.",
        "",
        "| monitors | committed msg/s | ratio to the ceiling | monitor CPU µs per message (all monitors) | "
        "msg/s one core each would give | server CPU µs per message |",
        "|---|---|---|---|---|---|",
    ]
    for r in runs:
        per_core = r["monitors"] * 1e6 / r["cpu_us_per_msg"]
        lines.append(
            f"| {r['monitors']} | {r['rate']:,.0f} | {r['rate'] / top['rate']:.2f} | {r['cpu_us_per_msg']:.0f} | "
            f"{per_core:,.0f} | {', '.join(f'{k} {v:.0f}' for k, v in r['server_us_per_msg'].items())} |"
        )
    rest = one["cpu_us_per_msg"] - parts["decode"] - parts[f"commit, batches of {args.batch}"]
    lines += [
        "",
        "Where one monitor's CPU goes, per message (µs; at 1,000 msg/s, µs per message ÷ 1,000 = the cores used). "
        "decode is `fleet.records.decode` (topic, msgspec, the checks); the two lines under it compare the "
        "schema's decoder with the hand-written rules it replaced. The monitor reads PUBLISH frames with "
        "`fleet.frames` (paho's parse of the v5 properties is shown for comparison: it is no longer on the path):",
        "",
        "| component | CPU µs per message |",
        "|---|---|",
        *(f"| {k} | {v:.1f} |" for k, v in parts.items()),
        f"| the network loop, socket reads, frames, acknowledgements, the rest: monitor total − decode − commit "
        f"of {args.batch} | {rest:.1f} |",
        f"| **monitor total** | **{one['cpu_us_per_msg']:.1f}** |",
    ]
    return "\n".join(lines) + "\n"


PAYLOAD_SIZES: list[bytes] = []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", choices=["postgresql", "sqlite"], default="postgresql")
    parser.add_argument("--devices", type=int, default=8, help="publisher processes (one device topic each)")
    parser.add_argument("--messages", type=int, default=80000, help="reports per phase (< the broker's queue)")
    parser.add_argument("--monitors", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--batch", type=int, default=1000, help="the monitor's batch_max, for the component figures")
    parser.add_argument("--write", action="store_true", help="replace the fleet-ingest section of the docs")
    args = parser.parse_args(argv)
    command = "python -m benchmarks run fleet_ingest " + " ".join(argv if argv is not None else sys.argv[1:])
    per = args.messages // args.devices
    work = Path(tempfile.mkdtemp(prefix="fleet-ingest-"))
    pg = Postgres() if args.store == "postgresql" else None
    try:
        url = pg.start().url if pg is not None else str(work / "fleet.db")
        with Broker(work / "broker") as broker:
            say("ceiling")
            top = ceiling(broker, report_lines("c", args.devices, per), work)
            say(f"ceiling {top}")
            runs = []
            for n in args.monitors:
                loads = report_lines(f"m{n}", args.devices, per)
                PAYLOAD_SIZES[:] = [next(iter(loads.values())).split(b"\n")[0]]
                runs.append(monitors_run(broker, pg, n, loads, work / f"run{n}"))
                say(f"monitors {runs[-1]}")
        parts = components(url, report_lines("p", args.devices, min(per, 2000)), (100, args.batch))
        say(f"components {parts}")
        markdown = render(args, command.strip(), top, runs, parts)
        print(markdown)
        print(json.dumps({"ceiling": top, "runs": runs, "components": parts}), file=sys.stderr)
        if args.write:
            say(f"written to {write_section('fleet-ingest', markdown)}")
    finally:
        if pg is not None:
            pg.close()
        shutil.rmtree(work, ignore_errors=True)
    return 0
