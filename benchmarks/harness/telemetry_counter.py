"""A subscriber process for the telemetry benchmark: counts the Result reports each device's seqs arrive with.

Runs in its own process (``multiprocessing`` spawn) so its work does not compete with the measured loop for
the GIL. It keeps everything in memory: a fleet monitor's SQLite store would add its own fsyncs on the disk
the device's outbox uses, which on one machine would be charged to the device.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from benchmarks.harness.overhead_stats import missing_seqs


def count_reports(host: str, port: int, prefix: str, commands: Any, answers: Any, wait_s: float = 60.0) -> None:
    """Subscribe to ``<prefix>/+/result`` (QoS 1), then answer questions about what arrived.

    Protocol: puts ``("ready", subscribed)`` on ``answers``; then for each ``{device_id: last_seq}`` on
    ``commands`` (None ends it) waits up to ``wait_s`` for all of ``1..last_seq`` of each device and puts
    ``{device_id: {"distinct", "messages", "frames", "missing"}}`` on ``answers`` (``frames`` counts the frames
    inside batched reports, 1 per plain report; ``missing`` lists the absent seqs).
    """
    import paho.mqtt.client as mqtt

    lock = threading.Lock()
    seen: dict[str, set[int]] = {}
    messages: dict[str, int] = {}
    frames: dict[str, int] = {}
    subscribed = threading.Event()

    def on_message(_client, _userdata, message) -> None:
        body = json.loads(message.payload)
        device, seq = body["device_id"], int(body["seq"])
        with lock:
            messages[device] = messages.get(device, 0) + 1
            if seq not in seen.setdefault(device, set()):
                seen[device].add(seq)
                frames[device] = frames.get(device, 0) + len(body["data"].get("frames", [None]))

    def on_subscribe(_client, _userdata, _mid, reason_codes, _properties) -> None:
        if not any(rc.is_failure for rc in reason_codes):
            subscribed.set()

    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="overhead-counter", clean_session=True)
    client.on_message, client.on_subscribe = on_message, on_subscribe
    client.connect(host, port, keepalive=30)
    client.subscribe(f"{prefix}/+/result", qos=1)
    client.loop_start()
    try:
        answers.put(("ready", subscribed.wait(10.0)))
        while (expected := commands.get(timeout=3600)) is not None:
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline:
                with lock:
                    if all(len(seen.get(d, ())) >= n for d, n in expected.items()):
                        break
                time.sleep(0.05)
            with lock:
                answers.put(
                    {
                        d: {
                            "distinct": len(seen.get(d, ())),
                            "messages": messages.get(d, 0),
                            "frames": frames.get(d, 0),
                            "missing": missing_seqs(seen.get(d, set()), n),
                        }
                        for d, n in expected.items()
                    }
                )
    finally:
        client.disconnect()
        client.loop_stop()
