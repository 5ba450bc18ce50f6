"""Soak: `edge-deploy serve` on a watched folder for many small frames while the broker flaps.

The daemon runs as its own process (the real CLI) with the real face models; a producer writes small frames
into its folder (atomically: a hidden name, then a rename) and removes the ones already delivered; a real
mosquitto on a free loopback port is stopped for ``--down-s`` seconds every ``--flap-s`` seconds; a
subscriber with a persistent session collects every result. Sampled every 0.2 s from /proc: the daemon's
RSS, open file descriptors and threads.

Checks (exit 1 if one fails): every frame's result delivered exactly once (no frame missing, no frame
reported under two sequence numbers); RSS growth after warm-up below 5 %; fds and threads flat.

    .venv/bin/python -m benchmarks run soak                      # 20,000 frames, flap every 30 s; writes docs
    .venv/bin/python -m benchmarks run soak --frames 2000 --flap-s 10 --no-write
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.harness.report import machine_line, write_section
from testsupport.broker import Broker

NAME = "soak"
SUMMARY = "The daemon under a flapping broker, many small frames"
#: the docs/benchmarks.md sections it writes
SECTIONS = ("soak",)

REPO = Path(__file__).resolve().parent.parent

DEVICE = "soak-pi"
#: Share of the run counted as warm-up (caches, allocator pools, SQLite page cache fill up).
WARMUP = 0.2
#: The producer keeps at most this many frames written but not yet delivered.
WINDOW = 400
#: fds a sample may catch open in passing: the watched folder being listed and the image being read.
TRANSIENT_FDS = 2
#: Sockets a connected daemon holds: two MQTT links (results, telemetry), each its socket and paho's wake-up
#: pair. Which links are up when a sample is taken depends on the flaps, so sockets are bounded, not compared.
SOCKETS_CONNECTED = 2 * 3
#: Seconds between two samples of the daemon's RSS, fds and threads.
SAMPLE_S = 0.2


@dataclass
class Sample:
    t: float
    delivered: int
    rss_kib: int
    fds: int  # open fds other than sockets (the databases, the log, the folder listing, an image)
    sockets: int
    threads: int


@dataclass
class SoakResult:
    frames: int
    seconds: float
    flaps: int
    samples: list[Sample] = field(default_factory=list)
    missing: int = 0
    duplicated: int = 0
    wire_duplicates: int = 0
    daemon_rc: int | None = None

    def window(self, lo: float, hi: float) -> list[Sample]:
        """Samples taken between ``lo`` and ``hi`` of the run's duration (deliveries come in bursts after
        each outage, so time, not the delivered count, splits the run)."""
        end = self.samples[-1].t if self.samples else 0.0
        return [s for s in self.samples if lo * end <= s.t <= hi * end]

    def figures(self) -> dict:
        base, end = self.window(WARMUP, WARMUP + 0.1), self.window(0.9, 1.0)
        early, late = self.window(WARMUP, 0.6), self.window(0.6, 1.0)
        if not base or not end or not early or not late:
            nothing = (0, 0, 0, 0)
            return {
                "rss_growth_pct": float("nan"),
                "fds": nothing,
                "sockets": nothing,
                "threads": nothing,
                "rss_mib": (0, 0),
            }
        rss0, rss1 = statistics.median(s.rss_kib for s in base), statistics.median(s.rss_kib for s in end)

        def spread(name: str) -> tuple[int, int, int, int]:  # min, max, peak of the early part, of the late part
            values = [getattr(s, name) for s in early + late]
            return min(values), max(values), max(getattr(s, name) for s in early), max(getattr(s, name) for s in late)

        return {
            "rss_mib": (rss0 / 1024, rss1 / 1024),
            "rss_growth_pct": 100.0 * (rss1 / rss0 - 1.0),
            "fds": spread("fds"),
            "sockets": spread("sockets"),
            "threads": spread("threads"),
        }

    def problems(self) -> list[str]:
        f = self.figures()
        out = []
        if self.missing or self.duplicated:
            out.append(f"{self.missing} frames without a result, {self.duplicated} reported more than once")
        if not f["rss_growth_pct"] < 5.0:
            out.append(f"RSS grew {f['rss_growth_pct']:.1f} % after warm-up; expected < 5 %")
        for name, slack in (("fds", TRANSIENT_FDS), ("threads", 0)):  # dips while the broker is down are fine
            low, high, early, late = f[name]
            if late > early + slack:
                out.append(f"{name} peaked at {early} early after warm-up and at {late} later; expected flat")
        most = max((s.sockets for s in self.samples), default=0)
        if most > SOCKETS_CONNECTED:
            out.append(f"{most} sockets open at once; a daemon with both links up holds {SOCKETS_CONNECTED}")
        if self.daemon_rc != 0:
            out.append(f"the daemon exited {self.daemon_rc}; expected 0 after SIGTERM")
        return out


class Collector:
    """A persistent-session subscriber: every result's (seq, frame_id), kept across broker restarts."""

    def __init__(self, port: int) -> None:
        import paho.mqtt.client as mqtt

        self.by_seq: dict[int, str] = {}
        self.copies = 0
        self._lock = threading.Lock()
        self._client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="soak-collector", clean_session=False)
        self._client.on_connect = lambda c, u, f, rc, p: c.subscribe(f"edge-deploy/{DEVICE}/result", qos=1)
        self._client.on_message = self._on_message
        self._client.reconnect_delay_set(0.2, 1.0)
        self._client.connect("127.0.0.1", port, keepalive=5)
        self._client.loop_start()

    def _on_message(self, client, userdata, message) -> None:
        body = json.loads(message.payload)
        frame = body.get("data", {}).get("frame_id")
        with self._lock:
            if body["seq"] in self.by_seq:
                self.copies += 1  # at-least-once delivery: the same report again (dropped by seq)
            elif frame is not None:
                self.by_seq[body["seq"]] = frame

    @property
    def delivered(self) -> int:
        with self._lock:
            return len(self.by_seq)

    def close(self) -> None:
        self._client.loop_stop()
        self._client.disconnect()


def _proc(pid: int) -> tuple[int, int, int, int]:
    """(VmRSS KiB, open fds other than sockets, sockets, threads) of a process."""
    status = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    targets = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(FileNotFoundError):  # closed between the listing and the look
            targets.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
    sockets = sum(1 for t in targets if t.startswith("socket:"))
    return int(fields["VmRSS"].split()[0]), len(targets) - sockets, sockets, int(fields["Threads"])


def _frames() -> list[bytes]:
    """Small encoded frames: mostly 64x64 noise (no face), every tenth a real 112x112 face."""
    import cv2
    import numpy as np

    from converters.face.facedata import package_dir

    face = (package_dir("insightface") / "data" / "images" / "Tom_Hanks_54745.png").read_bytes()
    rng = np.random.default_rng(0)
    noise = [cv2.imencode(".jpg", rng.integers(0, 255, (64, 64, 3), dtype=np.uint8))[1].tobytes() for _ in range(9)]
    return [*noise, face]


def _write_config(out: Path, models: Path, port: int) -> Path:
    (out / "incoming").mkdir(parents=True, exist_ok=True)
    config = out / "edge-deploy.toml"
    config.write_text(
        f'device_id = "{DEVICE}"\nstate_dir = "{out / "state"}"\nlog_level = "warning"\n'
        f'[face]\nmodels = "{models}"\nthreads = 1\n'
        '[source]\npath = "incoming"\nsettle_s = 0\npoll_interval_s = 0.05\n'
        f'[broker]\nhost = "127.0.0.1"\nport = {port}\nkeepalive_s = 5\n'
        "[telemetry]\ninterval_s = 3600\n"
    )
    return config


def _produce(folder: Path, total: int, collector: Collector, stop: threading.Event, blobs: list[bytes]) -> None:
    """Write frames in arrival order, at most WINDOW ahead of delivery; remove delivered ones."""
    removed = 0
    for i in range(total):
        while i - collector.delivered >= WINDOW and not stop.is_set():
            time.sleep(0.02)
        if stop.is_set():
            return
        tmp = folder / f".f{i:07d}.jpg"
        tmp.write_bytes(blobs[i % len(blobs)])
        tmp.rename(folder / f"f{i:07d}.jpg")
        # frames are analysed in arrival order, so the first `delivered` ones are done
        while removed < collector.delivered - 50:
            (folder / f"f{removed:07d}.jpg").unlink(missing_ok=True)
            removed += 1


def _flap(broker: Broker, every_s: float, down_s: float, stop: threading.Event, count: list[int]) -> None:
    while not stop.wait(every_s - down_s):
        broker.stop()
        count[0] += 1
        stop.wait(down_s)
        broker.start()


def soak(models: Path, frames: int, flap_s: float, down_s: float, out: Path, timeout_s: float = 7200) -> SoakResult:
    """Run the soak; see the module docstring."""
    import shutil

    shutil.rmtree(out / "state", ignore_errors=True)
    shutil.rmtree(out / "incoming", ignore_errors=True)
    result = SoakResult(frames=frames, seconds=0.0, flaps=0)
    with Broker(out / "broker") as broker:
        collector = Collector(broker.port)
        config = _write_config(out, models, broker.port)
        log = open(out / "daemon.log", "w")  # noqa: SIM115 - closed below
        daemon = subprocess.Popen([sys.executable, "-m", "edge_deploy", "serve", "--config", str(config)],
                                  stderr=log, cwd=REPO)  # fmt: skip
        stop, flaps = threading.Event(), [0]
        producer = threading.Thread(target=_produce, args=(out / "incoming", frames, collector, stop, _frames()))
        flapper = threading.Thread(target=_flap, args=(broker, flap_s, down_s, stop, flaps))
        start = time.monotonic()
        producer.start()
        flapper.start()
        try:
            while collector.delivered < frames and time.monotonic() - start < timeout_s:
                if daemon.poll() is not None:
                    break
                result.samples.append(Sample(time.monotonic() - start, collector.delivered, *_proc(daemon.pid)))
                time.sleep(SAMPLE_S)
        finally:
            stop.set()
            producer.join()
            flapper.join()
            if not broker.running:
                broker.start()
            result.seconds = time.monotonic() - start
            if daemon.poll() is None:
                daemon.send_signal(signal.SIGTERM)
            result.daemon_rc = daemon.wait(60)
            log.close()
            time.sleep(1.0)
            collector.close()
    result.flaps = flaps[0]
    (out / "samples.json").write_text(json.dumps([s.__dict__ for s in result.samples]))
    seen = Counter(collector.by_seq.values())
    result.missing = sum(1 for i in range(frames) if f"f{i:07d}.jpg" not in seen)
    result.duplicated = sum(1 for n in seen.values() if n > 1)
    result.wire_duplicates = collector.copies
    return result


def _models(out: Path, given: str | None) -> Path:
    if given:
        return Path(given)
    folder = out / "models"
    if not (folder / "models.json").is_file():
        from converters.face.build import export_face_models

        export_face_models(folder, "rpi4")
    return folder


def _spread(v: tuple[int, int, int, int]) -> str:
    return f"{v[0]}..{v[1]}; {v[2]} / {v[3]}"


def report(result: SoakResult, command: str) -> str:
    f = result.figures()
    verdict = "met" if not result.problems() else "NOT met: " + "; ".join(result.problems())
    rate = result.frames / result.seconds if result.seconds else 0.0
    return f"""## Soak: the daemon under a flapping broker

`{command}` — {machine_line()}.

`edge-deploy serve` (its own process, the real face models, 1 thread) on a watched folder fed
{result.frames:,} small frames (64×64 noise, every tenth a 112×112 face), written atomically and removed
once delivered; the real mosquitto stopped {result.flaps} times ({result.seconds:.0f} s in all, about
{rate:.0f} frames/s). RSS, fds and threads sampled every {SAMPLE_S} s; "after warm-up" = after the first
{WARMUP:.0%} of the run; RSS compared as the median of the next 10 % against the median of the last 10 %.
Sockets are counted apart from the other fds: each MQTT link holds 3 while connected (its socket and paho's
wake-up pair; the daemon has two links) and none while the broker is down, so how many a sample sees
depends on where in a flap it falls; they must never exceed {SOCKETS_CONNECTED} (a socket leaked per reconnect
would pass that after the first stop). The other fds (databases, log) are flat: a sample may catch the folder
listing and an image file open, so their peak after 60 % of the run is at most {TRANSIENT_FDS} above the peak
before (a leak per frame would show as hundreds); the peak of threads no higher.

| figure | value |
|---|---|
| results delivered | {result.frames - result.missing:,} of {result.frames:,} |
| frames without a result / reported under two seqs | {result.missing} / {result.duplicated} |
| copies redelivered on the wire (dropped by seq) | {result.wire_duplicates} |
| RSS after warm-up → at the end | {f["rss_mib"][0]:.1f} → {f["rss_mib"][1]:.1f} MiB ({f["rss_growth_pct"]:+.2f} %) |
| open fds other than sockets after warm-up: min..max; peak early / late | {_spread(f["fds"])} |
| sockets after warm-up: min..max; peak early / late | {_spread(f["sockets"])} |
| threads after warm-up: min..max; peak early / late | {_spread(f["threads"])} |
| daemon exit after SIGTERM | {result.daemon_rc} |

Goal (every result once, RSS growth < 5 %, fds and threads flat): {verdict}.
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=20_000)
    parser.add_argument("--flap-s", type=float, default=30.0, help="seconds between two broker stops")
    parser.add_argument("--down-s", type=float, default=5.0, help="seconds the broker stays down each time")
    parser.add_argument("--models", help="face models folder (default: exported once into --out/models)")
    parser.add_argument("--out", default="out/soak")
    parser.add_argument("--no-write", action="store_true", help="don't rewrite the section of docs/benchmarks.md")
    args = parser.parse_args(argv)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    result = soak(_models(out, args.models), args.frames, args.flap_s, args.down_s, out)
    command = "python -m benchmarks run soak" + (" " + " ".join(argv or sys.argv[1:]) if (argv or sys.argv[1:]) else "")
    text = report(result, command.strip())
    print(text)
    if not args.no_write:
        write_section("soak", text)
    return 1 if result.problems() else 0
