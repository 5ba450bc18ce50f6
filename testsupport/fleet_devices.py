"""Simulated devices for the fleet tests and benchmark: real ``TelemetryClient``s, one outbox each.

Run as ``python -m testsupport.fleet_devices --port P --dir D --devices N [--first K] --rate HZ --duration S``.
Each device reports telemetry (naming what it runs, like the daemon's heartbeats) and every
``--result-every``-th report a result, ``--rate`` reports per second per device, for ``--duration``
seconds; then it waits until every outbox is drained (or ``--drain-timeout``) and prints one JSON line:
``{"last_seq": {device: n}, "left": {...}, "dropped": {...}, "reports": total, "send_s": s}``.
Sending is paced by one loop over all devices (the pace slips, and says so in ``send_s``, when the
process can't keep up). A SIGTERM ends the sending early (then drains).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from pathlib import Path

from edge.telemetry.mqtt import BrokerConfig, TelemetryClient, TelemetryConfig
from edge.telemetry.schema import Result, Telemetry

#: What every simulated device says it runs (the daemon fills these from its models.json).
RUNNING = {
    "model": "dlib-resnet-embedder",
    "model_version": "0.1.0",
    "model_sha256": "5f1f0c31e0d4c1a7b0b4f1e1c1ab8f9b3f0e6d2f6a5c9e8d7b6a5f4e3d2c1b0a",
    "bundle_id": "bundle-rpi4-int8",
    "profile": "rpi4",
    "runtime": "onnxruntime",
    "precision": "int8",
}


def device_ids(count: int, first: int) -> list[str]:
    """The simulated device ids ``sim-0000``... from ``first`` on."""
    return [f"sim-{i:04d}" for i in range(first, first + count)]


def _message(i: int, n: int, result_every: int) -> Telemetry | Result:
    if result_every and n % result_every == 0:
        return Result(task="face.identify", data={"faces": [{"name": "alice", "distance": 0.31}]})
    return Telemetry(
        latency_p50_ms=40.0 + (i * 7 + n) % 13,
        latency_p90_ms=60.0 + (i * 5 + n) % 17,
        fps=12.0 + i % 5,
        temperature_c=48.0 + (i + n) % 9,
        window_s=1.0,
        **RUNNING,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--dir", type=Path, required=True, help="folder for the outboxes")
    parser.add_argument("--devices", type=int, required=True)
    parser.add_argument("--first", type=int, default=0, help="index of the first device id")
    parser.add_argument("--rate", type=float, required=True, help="reports per second per device")
    parser.add_argument("--duration", type=float, required=True, help="seconds of sending")
    parser.add_argument("--result-every", type=int, default=5, help="every Nth report is a result (0: never)")
    parser.add_argument("--drain-timeout", type=float, default=90.0)
    args = parser.parse_args(argv)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    broker = BrokerConfig("127.0.0.1", args.port, reconnect_min_s=0.2, reconnect_max_s=2.0, keepalive_s=10)
    args.dir.mkdir(parents=True, exist_ok=True)
    clients = {
        dev: TelemetryClient(
            TelemetryConfig(device_id=dev, outbox_path=args.dir / f"{dev}.db", broker=broker, require_subscriber=True)
        )
        for dev in device_ids(args.devices, args.first)
    }
    for client in clients.values():
        client.connect(timeout=0)  # start the links; reports wait in the outbox until they connect
    print(json.dumps({"started": len(clients)}), flush=True)
    sent, started = _send(list(clients.values()), args, stop)
    send_s = time.monotonic() - started
    deadline = time.monotonic() + args.drain_timeout
    for client in clients.values():
        client.wait_drained(max(deadline - time.monotonic(), 0.0))
    left = {dev: c.close(timeout=max(deadline - time.monotonic(), 1.0)) for dev, c in clients.items()}
    print(
        json.dumps(
            {
                "last_seq": {dev: c.health().last_seq for dev, c in clients.items()},
                "left": left,
                "dropped": {dev: c.health().dropped for dev, c in clients.items()},
                "reports": sent,
                "send_s": round(send_s, 3),
            }
        ),
        flush=True,
    )
    return 0


def _send(clients: list[TelemetryClient], args: argparse.Namespace, stop: threading.Event) -> tuple[int, float]:
    """Report round-robin at ``rate`` per device for ``duration`` seconds; returns (reports, start time)."""
    interval = 1.0 / (args.rate * len(clients))
    started = time.monotonic()
    end = started + args.duration
    sent = 0
    while not stop.is_set():
        due = started + sent * interval
        now = time.monotonic()
        if due >= end:
            break
        if due > now:
            time.sleep(due - now)
        i = sent % len(clients)
        clients[i].report(_message(i, sent // len(clients) + 1, args.result_every))
        sent += 1
    return sent, started


if __name__ == "__main__":
    sys.exit(main())
