"""The main job's second half: the Pi bundle, verified, run on an emulated Pi, its latency sent over MQTT.

``edge-deploy demo`` runs the face demo on the host (converters.demo.host) and then this: build the target's face
bundle (cached stages, aarch64 wheelhouse), verify it (folder and archive), install its wheels into an
emulated Pi (qemu-user with the profile's core) and run the bundle's face pipeline there, compare with the
host, and report the emulated pipeline latency as a BenchReport through the telemetry client — to the broker
when one answers, else into the local outbox, delivered on a later run.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from edge.errors import InputError
from edge.profiles import TargetProfile
from edge.progress import ProgressFn, silent

DEMO_DEVICE_PREFIX = "demo-emulated-"


@dataclass
class PiRun:
    """What the emulated-Pi half of the main job did."""

    bundle: str
    archive: str | None
    verified_files: int
    cache_hits: dict
    cpu: str | None = None
    comparison: dict = field(default_factory=dict)
    latency_ms: list[float] = field(default_factory=list)
    telemetry: dict = field(default_factory=dict)
    int8_kernels: str = ""  # the emulated CPU's, as edge.cpu saw it in the guest

    def to_dict(self) -> dict:
        return dict(self.__dict__)

    def summary(self) -> str:
        hits = ", ".join(f"{k}: {'cached' if v else 'built'}" for k, v in self.cache_hits.items())
        lines = [f"bundle: {self.bundle} ({self.verified_files} files verified; {hits})"]
        if self.archive:
            lines.append(f"  archive: {self.archive} (verified)")
        if self.cpu:
            c = self.comparison
            lines.append(
                f"emulated Pi ({self.cpu}): {c['faces_guest']} faces in {c['photos']} photos as on the host; "
                f"descriptors max |diff| {c['descriptor_max_abs_diff']:.2e}; "
                f"{c['decisions_agree']} of {c['pairs']} same/different decisions equal"
            )
            ms = sorted(self.latency_ms)
            lines.append(
                f"  emulated pipeline latency per photo: median {statistics.median(ms):.0f} ms, max {ms[-1]:.0f} ms "
                "(qemu runs 10-50x slower than a real Pi: compare outputs here, measure speed on the board)"
            )
        t = self.telemetry
        if t:
            where = f"delivered to {t['broker']}" if t["delivered"] else f"kept in the outbox {t['outbox']}"
            lines.append(
                f"telemetry: BenchReport seq {t['seq']} from {t['device_id']} {where} ({t['pending']} pending)"
            )
        return "\n".join(lines)


def _report_latency(profile: TargetProfile, run: PiRun, outbox: Path, broker, progress: ProgressFn) -> dict:
    """Send the emulated latency as a BenchReport; returns where it went."""
    from edge.telemetry.mqtt import TelemetryClient, TelemetryConfig
    from edge.telemetry.schema import BenchReport

    device_id = DEMO_DEVICE_PREFIX + profile.name
    client = TelemetryClient(TelemetryConfig(device_id=device_id, outbox_path=outbox, broker=broker))
    connected = client.connect(timeout=5.0) if broker is not None else False
    ms = run.latency_ms
    steady = sorted(ms[1:]) or sorted(ms)
    msg = client.report(
        BenchReport(
            model=f"face-pipeline:{Path(run.bundle).name}",
            backend=f"onnxruntime (qemu {run.cpu})",
            runs=len(steady),
            first_ms=round(ms[0], 2),
            p50_ms=round(statistics.median(steady), 2),
            p90_ms=round(steady[min(len(steady) - 1, int(0.9 * len(steady)))], 2),
            profile=profile.name,
            int8_kernels=run.int8_kernels,
        )
    )
    pending = client.close(timeout=10.0 if connected else 0.5)
    address = f"{broker.host}:{broker.port}" if broker is not None else None
    progress(f"telemetry: {f'sent to {address}' if connected and pending == 0 else 'kept in the outbox'}")
    return {
        "device_id": device_id,
        "seq": msg.seq,
        "broker": address,
        "delivered": bool(connected and pending == 0),
        "pending": pending,
        "outbox": str(outbox),
    }


def build_and_verify(profile: TargetProfile, out_dir: Path, cache_dir: Path, progress: ProgressFn = silent):
    """Build the target's face bundle (cached stages) and verify its folder and archive.

    Returns:
        ``(bundle, PiRun)``; the bundle's face models are in ``bundle.folder / "models" / "face"``.

    Raises:
        BundleError / ConversionError / ValidationError: from the stages they name.
    """
    from converters.package.bundle import build_bundle
    from edge.bundle import verify_bundle

    bundle = build_bundle(profile, ["face"], Path(out_dir) / "dist", Path(cache_dir), progress)
    progress(f"verifying {bundle.folder.name} and its archive against manifest.json")
    report = verify_bundle(bundle.folder)
    if bundle.archive:
        verify_bundle(bundle.archive)
    run = PiRun(
        str(bundle.folder),
        str(bundle.archive) if bundle.archive else None,
        report.files,
        dict(bundle.stage_cache_hits) | {"wheels": bool(bundle.wheel_cache_hit)},
    )
    return bundle, run


def run_on_emulated_pi(
    profile: TargetProfile, bundle, run: PiRun, out_dir: Path, broker=None, progress: ProgressFn = silent
) -> PiRun:
    """Install the bundle's wheels in an emulated Pi, run its face pipeline, compare, report the latency.

    Raises:
        InputError: the profile has no emulated core (cpu.qemu_cpu).
        ValidationError: the emulated Pi's results differ from the host's.
        InferenceError: the root filesystem, pip or a run failed.
    """
    from converters.arm.face import check_face_models

    if not profile.cpu.qemu_cpu:
        raise InputError(f"{profile.source}: cpu.qemu_cpu is not set; the main job needs it to emulate the board")
    work = Path(out_dir) / "emulated-pi"
    comparison = check_face_models(
        bundle.folder / "models" / "face",
        profile.cpu.qemu_cpu,
        work,
        wheel_dir=bundle.folder / "wheels",
        progress=progress,
    )
    run.cpu = profile.cpu.qemu_cpu
    run.comparison = comparison.to_dict()
    guest = json.loads((work / f"{profile.cpu.qemu_cpu}.json").read_text(encoding="utf-8"))
    run.latency_ms = [float(p["ms"]) for p in guest["photos"]]
    run.int8_kernels = str(guest.get("int8_kernels", ""))
    run.telemetry = _report_latency(profile, run, Path(out_dir) / "outbox.db", broker, progress)
    return run
