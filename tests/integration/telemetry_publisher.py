"""A runner stand-in for the SIGKILL test: reports telemetry until the outbox has numbered ``--total``.

Run as ``python tests/integration/telemetry_publisher.py --port P --outbox FILE --device ID --total N``.
Prints ``reported <seq>`` after each stored report (flushed), and ``closed <left>`` after a clean close.
Restarted on the same outbox it continues numbering where the killed run stopped.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from edge.telemetry.mqtt import BrokerConfig, TelemetryClient, TelemetryConfig  # noqa: E402
from edge.telemetry.schema import Telemetry  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--outbox", type=Path, required=True)
    parser.add_argument("--device", required=True)
    parser.add_argument("--total", type=int, required=True)
    parser.add_argument("--interval", type=float, default=0.005)
    args = parser.parse_args()
    broker = BrokerConfig("127.0.0.1", args.port, reconnect_min_s=0.2, reconnect_max_s=1.0, keepalive_s=5)
    config = TelemetryConfig(device_id=args.device, outbox_path=args.outbox, broker=broker)
    client = TelemetryClient(config)
    client.connect(timeout=10)
    n = client.health().last_seq
    while n < args.total:
        stored = client.report(Telemetry(latency_p50_ms=10.0 + n % 7, latency_p90_ms=20.0 + n % 5, fps=25.0))
        n = stored.seq
        print(f"reported {n}", flush=True)
        time.sleep(args.interval)
    print(f"closed {client.close(timeout=30)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
