"""Executed instructions per frame of the whole face pipeline (Python included) on an emulated Pi core.

``scripts/arm/run_frame.py`` runs ``open_face_pipeline`` on one frame in the guest, under the counting plugin
(``converters.arm.cost``), once with 1 frame and once with N+1 frames. Per frame is the difference of the
two whole runs divided by N: process start-up, imports, model loading, the first frame's one-time work
(onnxruntime's first-run allocations, MTCNN's arena growing for each pyramid shape) and exit cancel out,
and what is left is everything a frame executes — the interpreter, numpy, OpenCV and onnxruntime. The
guest also marks the four stages (detect, align, embed, match) and the whole frame as regions; each
region's per-frame count is the same difference of its sums. What the stages leave out of the whole-run
figure is the loop around them and the marks' own syscalls (region 0 measures one pair of marks).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from converters.arm.cost import DEFAULT_PLUGIN, InsnCounts, RunCounts, count_instructions
from converters.arm.guest import SCRIPTS, ArmGuest
from edge.errors import InferenceError, InputError

RUN_FRAME = SCRIPTS / "run_frame.py"
#: Region numbers of scripts/arm/run_frame.py: the marks' cost, the four stages, the whole frame.
EMPTY_REGION = 0
STAGE_REGIONS = {"detect": 1, "align": 2, "embed": 3, "match": 4}
FRAME_REGION = 5


@dataclass(frozen=True)
class FrameSetup:
    """What one counted pipeline runs: a face folder, its detector, MTCNN's smallest face (None: 20), the
    BlazeFace file (a name in the folder, e.g. the ``.tflite`` original to run on LiteRT; None: models.json's),
    and how often the detector runs (``edge.face.track``: 1, every frame; n, one frame in n, faces followed
    between, keeping their descriptors as ``keep_descriptor_within`` says; None: the tracker's default)."""

    models: Path
    detector: str = "mtcnn"
    min_face_size: int | None = None
    detector_model: str | None = None
    detect_every: int = 1
    keep_descriptor_within: float | None = None

    def args(self) -> list[str]:
        out = ["--models", str(Path(self.models).resolve()), "--detector", self.detector]
        if self.detector_model:
            out += ["--detector-model", str(Path(self.models).resolve() / self.detector_model)]
        if self.detect_every > 1:
            out += ["--detect-every", str(self.detect_every)]
            if self.keep_descriptor_within is not None:
                out += ["--keep-descriptor-within", repr(float(self.keep_descriptor_within))]
        return out + (["--min-face-size", str(self.min_face_size)] if self.min_face_size else [])


@dataclass(frozen=True)
class FrameCost:
    """Instructions of one frame on one core.

    Attributes:
        cpu: qemu's core name.
        frames: N, the frames the longer run had beyond the shorter one.
        per_frame: (whole run with N+1 frames - whole run with 1) / N.
        stages: per-frame counts of each marked stage (same difference).
        marked_frame: per-frame count of the region around the four stages.
        marks: one pair of marks (region 0), to say what the marks add (8 pairs a frame).
        startup: the whole 1-frame run minus one frame: start-up, imports, model load, first-frame extras, exit.
        faces: faces the pipeline found in the frame.
        repeat_noise: |difference| of the whole-run totals of two identical 1-frame runs (None: not repeated).
    """

    cpu: str
    frames: int
    per_frame: InsnCounts
    stages: dict[str, InsnCounts]
    marked_frame: InsnCounts
    marks: InsnCounts
    startup: InsnCounts
    faces: int = 0
    repeat_noise: int | None = None

    def to_dict(self) -> dict:
        counts = {"per_frame": self.per_frame, "marked_frame": self.marked_frame, "marks": self.marks}
        out: dict = {"cpu": self.cpu, "frames": self.frames, "faces": self.faces, "repeat_noise": self.repeat_noise}
        out["startup"] = _fields(self.startup)
        out.update({k: _fields(v) for k, v in counts.items()})
        out["stages"] = {k: _fields(v) for k, v in self.stages.items()}
        return out

    @classmethod
    def from_dict(cls, data: dict) -> FrameCost:
        def counts(d: dict) -> InsnCounts:
            return InsnCounts(d["total"], d["simd"], d["vector"], d["sdot"], d["udot"])

        stages = {k: counts(v) for k, v in data["stages"].items()}
        return cls(
            data["cpu"],
            data["frames"],
            counts(data["per_frame"]),
            stages,
            counts(data["marked_frame"]),
            counts(data["marks"]),
            counts(data["startup"]),
            data["faces"],
            data["repeat_noise"],
        )


def _fields(c: InsnCounts) -> dict[str, int]:
    return {"total": c.total, "simd": c.simd, "vector": c.vector, "sdot": c.sdot, "udot": c.udot}


def _per(c: InsnCounts, n: int) -> InsnCounts:
    return InsnCounts(*(round(v / n) for v in c.astuple()))


def frame_cost(
    cpu: str, one: RunCounts, many: RunCounts, frames: int, faces: int = 0, repeat_noise: int | None = None
) -> FrameCost:
    """Per-frame counts from a run with 1 frame (``one``) and one with ``frames`` + 1 (``many``).

    ``faces`` and ``repeat_noise`` are carried into the result as they are.

    Raises:
        InputError: ``frames`` < 1.
        InferenceError: a run lacks one of the regions run_frame.py marks, or the longer run counted fewer
            instructions than the shorter (they were not runs of the same pipeline).
    """
    if frames < 1:
        raise InputError(f"frames = {frames}; expected at least 1 frame beyond the first")
    wanted = {EMPTY_REGION, FRAME_REGION, *STAGE_REGIONS.values()}
    for name, run in (("1-frame", one), (f"{frames + 1}-frame", many)):
        if not wanted <= set(run.regions):
            raise InferenceError(
                f"{cpu}: the {name} run marked regions {sorted(run.regions)}; expected {sorted(wanted)}"
            )
    if many.whole.total <= one.whole.total:
        raise InferenceError(
            f"{cpu}: the {frames + 1}-frame run executed {many.whole.total:,} instructions, the 1-frame run "
            f"{one.whole.total:,}; expected more for more frames"
        )
    stages = {s: _per(many.regions[r] - one.regions[r], frames) for s, r in STAGE_REGIONS.items()}
    per_frame = _per(many.whole - one.whole, frames)
    marked = _per(many.regions[FRAME_REGION] - one.regions[FRAME_REGION], frames)
    startup = one.whole - per_frame
    return FrameCost(cpu, frames, per_frame, stages, marked, one.regions[EMPTY_REGION], startup, faces, repeat_noise)


def measure_frame(
    guest: ArmGuest,
    setup: FrameSetup,
    frame_npy: Path,
    gallery: Path,
    frames: int = 2,
    plugin: Path | None = None,
    timeout: float | None = None,
    repeat: bool = True,
) -> FrameCost:
    """Count one pipeline's frame on the guest's core: a warm-up run, then runs of 1 and ``frames`` + 1 frames.

    The warm-up (not counted, qemu-user-static) writes the byte-code of whatever the frame imports late, so
    the counted runs execute the same code; it also says how many faces the pipeline finds.

    Args:
        guest: a prepared guest (``converters.arm.guest.prepare_guest``).
        setup: face folder, detector and MTCNN's smallest face.
        frame_npy: the frame, uint8 RGB [H, W, 3] as .npy (host path).
        gallery: a gallery file (``Gallery.save``) every face is matched against.
        frames: N; per frame = (run of N+1 frames - run of 1) / N.
        plugin: the counting plugin (default ``.cache/arm/libinsncount.so``).
        timeout: seconds for each run; default the guest's.
        repeat: count the 1-frame run a second time, for ``repeat_noise``.

    Raises:
        InputError: frames < 1, or no plugin; InferenceError: a guest run failed, marked no regions or
            printed no result line.
    """
    if frames < 1:
        raise InputError(f"frames = {frames}; expected at least 1 frame beyond the first")
    base = [*setup.args(), "--frame", str(Path(frame_npy).resolve()), "--gallery", str(Path(gallery).resolve())]

    def args(n: int) -> Sequence[str]:
        return [*base, "--frames", str(n), "--mark"]

    warm = guest.run(RUN_FRAME, args(1), timeout=timeout)
    faces = len(_result_line(warm.stdout, guest.cpu.value)["faces"])
    plugin = plugin or DEFAULT_PLUGIN
    one = count_instructions(guest, RUN_FRAME, args(1), plugin, timeout)
    noise = None
    if repeat:
        noise = abs(count_instructions(guest, RUN_FRAME, args(1), plugin, timeout).whole.total - one.whole.total)
    many = count_instructions(guest, RUN_FRAME, args(frames + 1), plugin, timeout)
    return frame_cost(guest.cpu.value, one, many, frames, faces, noise)


def _result_line(stdout: str, cpu: str) -> dict:
    lines = stdout.strip().splitlines()
    try:
        return json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        raise InferenceError(f"{RUN_FRAME.name} on {cpu} printed no result line: {stdout[-300:]!r}") from None
