"""Fill a fleet store fast with many devices' telemetry, as a flood of fake device ids would (for the dashboard
and export bounds)."""

from __future__ import annotations

from edge.telemetry.schema import MessageKind, Telemetry, to_json
from fleet.records import Incoming
from fleet.store import FleetStore


def flood(store: FleetStore, devices: int, reports: int, now: float, step_s: float = 5.0, name: str = "fake") -> None:
    """Write ``reports`` telemetry reports for each of ``devices`` ids ``<name>-00000``..., the newest at ``now``.

    Args:
        store: either store.
        devices: how many device ids.
        reports: reports per device, ``step_s`` apart by the device's clock.
        now: timestamp of each device's newest report (may be in the future).
        step_s: seconds between a device's reports.
        name: device id prefix.
    """
    batch = []
    for d in range(devices):
        dev = f"{name}-{d:05d}"
        for k in range(reports):
            ts = now - (reports - 1 - k) * step_s
            body = Telemetry(device_id=dev, seq=k + 1, timestamp=ts, latency_p50_ms=10.0 + k % 7,
                             latency_p90_ms=20.0 + k % 5, fps=25.0, temperature_c=50.0, model=f"m-{d % 3}",
                             model_sha256="ab" * 32)  # fmt: skip
            batch.append(Incoming(dev, MessageKind.TELEMETRY, body, to_json(body), now))  # decode's checks: skipped
            if len(batch) >= 2000:
                store.write(batch)
                batch = []
    if batch:
        store.write(batch)
