"""Faces followed between detector frames (``face.detect_every``): how close they stay, what the host saves.

``serve`` on a video or a camera with ``face.detect_every = n`` runs the detector on one frame in n and follows
each face on the frames between with dlib's 5-point shape predictor (``edge.face.track.FaceTracker``). This
measures both sides of that trade on camera-like clips of the evaluation photos (``facedata.camera_clip``:
each photo letterboxed to 640x480 and filmed for ``--frames`` frames while the view pans, zooms and turns;
one clip after the other, so each cut is a scene change the tracker must catch):

* against the same pipeline with the detector on every frame (n = 1), frame by frame: faces reported, faces
  it has that the followed run misses (and extra ones), the descriptor distance between each followed face and
  the face detected on that frame (boxes matched at IoU > 0.5), and whether the gallery names them alike (the
  evaluation photos' people enrolled from the originals, among 100 random descriptors, dlib's 0.6);
* CPU time a frame on this host (``time.process_time``, one thread, OpenCV's too), interleaved rounds, median,
  as a ratio to n = 1. The emulated Pi cores' instructions: section ``arm-frame`` (its ``detector 1 frame in 4``
  rows).

    .venv/bin/python -m benchmarks run face_track            # docs/benchmarks.md, section face-track
    .venv/bin/python -m benchmarks run face_track --quick    # 1 round, n = 1 and 4; prints, writes no docs

Host side: imports converters (to build the folders and the clips).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.harness.face_frames import against_truth, clips, make_gallery
from benchmarks.harness.face_speed_models import (
    BLAZEFACE_FULL_TFLITE,
    CACHE,
    CALIBRATION,
    build_fp32,
    build_int8,
    with_blazeface,
)
from benchmarks.harness.rounds import interleaved
from edge.face.track import KEEP_DESCRIPTOR_WITHIN

NAME = "face_track"
SUMMARY = "Faces followed between detector frames: how close they stay, what the host saves"
#: the docs/benchmarks.md sections it writes
SECTIONS = ("face-track",)

EVERY = (1, 2, 3, 4, 6, 8)
FRAMES = 16
#: The extra run of each pipeline that describes every followed face again (``keep_descriptor_within = 0``).
DESCRIBE_ALL_EVERY = 4
#: Boxes of the followed and the detected run are the same face above this IoU.
SAME_BOX = 0.5


def best_overlap(boxes: list, box) -> int | None:
    """Index of the box of ``boxes`` that overlaps ``box`` most, if that IoU is above ``SAME_BOX``; else None."""
    from converters.face.boxes import iou

    overlaps = [iou(b, box) for b in boxes]
    best = int(np.argmax(overlaps)) if overlaps else None
    return best if best is not None and overlaps[best] > SAME_BOX else None


def enrolled_gallery(pipeline):
    """100 random descriptors (``frame_speed.make_gallery``) and every annotated person of the evaluation photos,
    enrolled from the original photo by ``pipeline`` (the detected face that overlaps the annotation most)."""
    from converters.face.facedata import EVAL_PHOTOS

    gallery = make_gallery()
    for photo in EVAL_PHOTOS:
        faces = pipeline.analyze(photo.load())
        for person in photo.faces:
            best = best_overlap([f.detection.box for f in faces], person.box)
            if best is not None:
                gallery.add(person.identity, faces[best].descriptor[None])
    return gallery


def follow(pipeline, every: int, keep: float, frames: list[tuple[str, np.ndarray, list]]) -> tuple[list, float, dict]:
    """The clip through a FaceTracker (``keep``: its ``keep_descriptor_within``): per frame (faces, followed), CPU
    seconds, and the tracker's counts (detector frames, followed faces, kept descriptors, largest kept change)."""
    from edge.face.track import FaceTracker

    tracker = FaceTracker(pipeline, every, keep_descriptor_within=keep)
    out = []
    start = time.process_time()
    for _, rgb, _ in frames:
        faces = tracker.analyze(rgb)
        out.append((faces, tracker.last_followed))
    seconds = time.process_time() - start
    counts = {
        "detector_frames": tracker.detector_frames,
        "tracked_faces": tracker.followed_faces,
        "kept": tracker.kept_descriptors,
        "largest_kept_change": tracker.largest_kept_change,
        "redetected": tracker.redetected_faces,
        "redetected_kept": tracker.redetected_kept,
    }
    return out, seconds, counts


def eval_chips(pipeline) -> list[tuple[str, np.ndarray]]:
    """(identity, aligned chip) of every annotated face of the evaluation photos ``pipeline`` detects, cut from
    the originals."""
    from converters.face.facedata import EVAL_PHOTOS

    chips = []
    for photo in EVAL_PHOTOS:
        rgb = photo.load()
        found = pipeline.detections(rgb)
        for person in photo.faces:
            best = best_overlap([d.box for d in found], person.box)
            if best is not None:
                chips.append((person.identity, pipeline.chips(rgb, [found[best]])[0]))
    return chips


def different_people(chips: list[tuple[str, np.ndarray]]) -> float:
    """The smallest chip change (``edge.face.track.chip_change``) between the chips of two different people."""
    from edge.face.track import chip_change

    return min(chip_change(a, b) for i, (p, a) in enumerate(chips) for q, b in chips[i + 1 :] if p != q)


#: Lighting changes of a chip, each scaled to move it by a given chip change (mean absolute grey levels).
RELIGHTS = ("brighter", "darker", "less contrast", "light from one side")


def relit(chip: np.ndarray, level: float) -> dict[str, np.ndarray]:
    """``chip`` under each of ``RELIGHTS``, each about ``level`` grey levels (``chip_change``) from it: every value
    raised or lowered by ``level``, the values pulled toward their mean, a left-to-right ramp from -2 to +2
    ``level`` (clipped to 0..255, so a chip near black or white moves a little less)."""
    f = chip.astype(np.float64)
    mean = f.mean()
    spread = max(float(np.abs(f - mean).mean()), level)
    ramp = np.linspace(-2 * level, 2 * level, chip.shape[1])[None, :, None]
    out = (f + level, f - level, mean + (f - mean) * (1 - level / spread), f + ramp)
    return {name: np.clip(np.rint(v), 0, 255).astype(np.uint8) for name, v in zip(RELIGHTS, out, strict=True)}


def lighting(pipeline, chips: list[tuple[str, np.ndarray]], level: float) -> dict[str, dict[str, float]]:
    """Per lighting change of ``relit``: the chip changes it made and the farthest it moved a descriptor."""
    from edge.face.track import chip_change

    plain = np.stack([c for _, c in chips])
    base = pipeline.descriptors(plain)
    variants = [relit(c, level) for c in plain]
    result = {}
    for name in RELIGHTS:
        changed = np.stack([v[name] for v in variants])
        moved = np.linalg.norm(pipeline.descriptors(changed) - base, axis=1)
        steps = [chip_change(a, b) for a, b in zip(plain, changed, strict=True)]
        result[name] = {"change_min": min(steps), "change_max": max(steps), "distance_max": float(moved.max())}
    return result


def compare(run: list, reference: list, gallery, threshold: float) -> dict:
    """A followed run against the every-frame run: faces, misses, extras, distances, name agreement."""
    from converters.face.boxes import iou

    reported = missed = extra = same_name = matched = 0
    distances: list[float] = []
    for (faces, followed), (want, _) in zip(run, reference, strict=True):
        reported += len(faces)
        used: set[int] = set()
        for face in faces:
            scores = [(iou(face.detection.box, w.detection.box), j) for j, w in enumerate(want) if j not in used]
            best = max(scores, default=(0.0, -1))
            if best[0] <= SAME_BOX:
                extra += 1
                continue
            used.add(best[1])
            other = want[best[1]]
            matched += 1
            same_name += (
                gallery.match(face.descriptor, threshold).name == gallery.match(other.descriptor, threshold).name
            )
            if followed:
                distances.append(float(np.linalg.norm(face.descriptor - other.descriptor)))
        missed += len(want) - len(used)
    return {
        "reported": reported,
        "missed": missed,
        "extra": extra,
        "matched": matched,
        "same_name": same_name,
        "followed_faces": len(distances),
        "distance": [float(np.median(distances)), float(np.percentile(distances, 95)), max(distances)]
        if distances
        else None,
    }


def jitter(reference: list, photos: list[str]) -> list[float]:
    """Descriptor distances between the same face detected on two consecutive frames of one photo's clip (the
    every-frame run): how far a detected face itself moves from frame to frame."""
    from converters.face.boxes import iou

    out = []
    for i in range(1, len(reference)):
        if photos[i] != photos[i - 1]:
            continue
        for face in reference[i][0]:
            before = max(reference[i - 1][0], key=lambda f: iou(f.detection.box, face.detection.box), default=None)
            if before is not None and iou(before.detection.box, face.detection.box) > SAME_BOX:
                out.append(float(np.linalg.norm(face.descriptor - before.descriptor)))
    return out


def default_pipeline(target: str) -> str:
    """The row name of the Pi profiles' default pipeline (BlazeFace full range tiled on LiteRT, INT8 embedder)."""
    return f"INT8 ({target}), BlazeFace full range tiled, LiteRT"


def chosen_every(rows: list[dict], pipeline: str) -> int | None:
    """The largest n up to which every followed run of ``pipeline`` (its descriptors kept as by default) names
    every face it shares with n = 1 as n = 1 does, frame by frame; None without such rows."""
    mine = sorted((r for r in rows if r["pipeline"] == pipeline and r["keep"] != 0), key=lambda r: r["every"])
    best = None
    for r in mine:
        if r["same_name"] != r["matched"]:
            break
        best = r["every"]
    return best


def run(target: str, rounds: int, every: tuple[int, ...], frames: int, progress) -> dict:
    from edge.face.models import open_face_pipeline
    from edge.face.track import FaceTracker
    from edge.profiles import load_profile

    fp32 = build_fp32(CACHE, progress)
    int8, _ = build_int8(fp32, load_profile(target), CACHE, CALIBRATION, progress)
    int8_bf = with_blazeface(int8, progress)
    setups = {
        default_pipeline(target): dict(detector="blazeface-full-tiled", detector_model=int8_bf / BLAZEFACE_FULL_TFLITE),
        f"INT8 ({target}), BlazeFace full range, LiteRT": dict(detector="blazeface-full",
                                                             detector_model=int8_bf / BLAZEFACE_FULL_TFLITE),
        f"INT8 ({target}), MTCNN": dict(detector="mtcnn"),
    }  # fmt: skip
    clip = clips(frames)
    progress(f"{len(clip)} frames ({frames} a photo), n = {', '.join(map(str, every))}, {rounds} round(s)")
    pipelines = {name: open_face_pipeline(int8_bf, threads=1, **kw) for name, kw in setups.items()}
    try:
        gallery = enrolled_gallery(pipelines[f"INT8 ({target}), MTCNN"])
        runs = [(name, n, KEEP_DESCRIPTOR_WITHIN) for name in setups for n in every]
        runs += [(name, DESCRIBE_ALL_EVERY, 0.0) for name in setups if DESCRIBE_ALL_EVERY in every]
        seconds, first = race(pipelines, runs, clip, rounds, progress)
        rows = [row(key, seconds, first, clip, gallery, pipelines[key[0]].threshold) for key in runs]
        lost = FaceTracker(pipelines[f"INT8 ({target}), MTCNN"], 2).lost_distance
        chips = eval_chips(pipelines[f"INT8 ({target}), MTCNN"])
        apart = different_people(chips)
        relighting = lighting(pipelines[f"INT8 ({target}), MTCNN"], chips, KEEP_DESCRIPTOR_WITHIN)
    finally:
        for p in pipelines.values():
            p.close()
    people = len(gallery) - 100
    return {
        "target": target,
        "rounds": rounds,
        "frames_per_photo": frames,
        "people": people,
        "lost": lost,
        "keep": KEEP_DESCRIPTOR_WITHIN,
        "different_people": apart,
        "lighting": relighting,
        "rows": rows,
        "default_pipeline": default_pipeline(target),
    }


Run = tuple[str, int, float]  # (pipeline, n, keep_descriptor_within)


def race(pipelines: dict, runs: list[Run], clip: list, rounds: int, progress) -> tuple[dict, dict]:
    """Every (pipeline, n, keep) over the clip in interleaved rounds: CPU seconds of each round, and the first
    round's faces and tracker counts."""
    seconds: dict[Run, list[float]] = {r: [] for r in runs}
    first: dict[Run, tuple[list, dict]] = {}
    for r, order in interleaved(runs, rounds):
        for key in order:
            name, n, keep = key
            progress(f"round {r + 1}/{rounds}: {name}, n = {n}, keep_descriptor_within = {keep:g}")
            out, cpu, counts = follow(pipelines[name], n, keep, clip)
            seconds[key].append(cpu)
            first.setdefault(key, (out, counts))
    return seconds, first


def row(key: Run, seconds: dict, first: dict, clip: list, gallery, threshold: float) -> dict:
    """One table row: the run ``key`` (pipeline, n, keep) against n = 1 and the annotations; n = 1's row also
    says how far a detected face moves between frames and how often the detector's face count changes within a
    clip."""
    name, n, keep = key
    out, counts = first[key]
    cpu = statistics.median(seconds[key])
    base = (name, 1, KEEP_DESCRIPTOR_WITHIN)
    photos = [photo for photo, _, _ in clip]
    result = {
        "pipeline": name,
        "every": n,
        "keep": keep,
        "frames": len(clip),
        **counts,
        "ms_per_frame": 1e3 * cpu / len(clip),
        "vs_every_frame": statistics.median(seconds[base]) / cpu if base in seconds else None,
        **compare(out, first[base][0], gallery, threshold),
        **against_truth([[f.detection.box for f in faces] for faces, _ in out], [boxes for _, _, boxes in clip]),
    }
    if n == 1:
        moves = jitter(out, photos)
        result["jitter"] = [float(np.median(moves)), float(np.percentile(moves, 95)), max(moves)]
        result["flicker"] = sum(
            photos[i] == photos[i - 1] and len(out[i][0]) != len(out[i - 1][0]) for i in range(1, len(out))
        )
    return result


def markdown(result: dict, command: str, machine: str) -> str:
    rows = result["rows"]
    moves = "; ".join(
        f"{r['pipeline']}: {' / '.join(f'{v:.3f}' for v in r['jitter'])}" for r in rows if r.get("jitter")
    )
    lines = [
        "## Faces followed between detector frames (`face.detect_every`): how close they stay, what the host saves",
        "",
        f"`{command}` — {machine}",
        "",
        "`serve` on a video or camera with `face.detect_every = n` runs the detector on one frame in n and follows "
        "each face between with dlib's 5-point shape predictor from its box of the frame before "
        "(`edge.face.track.FaceTracker`; a face is re-detected on the same frame when its descriptor moves more "
        f"than {result['lost']:.2f} from the one it had, its box scales by more than 1.5x or leaves the frame). "
        "A followed face keeps its descriptor, and the embedder does not run for it, while its aligned chip is "
        f"within `face.keep_descriptor_within` = {result['keep']:g} grey levels (mean absolute difference) of the "
        "chip that descriptor was computed from; else it is described again (the rows `every followed face "
        "described` set it to 0); so does a face the detector finds again on its frame where a face was followed "
        "(boxes overlapping at IoU > 0.5). For scale: the chips of two different people of the evaluation photos "
        "differ "
        f"by {result['different_people']:.1f} grey levels or more (MTCNN's detections on the originals)"
        f"{lighting_text(result)}. "
        "The clip: each "
        f"evaluation photo letterboxed to 640x480 and filmed for {result['frames_per_photo']} frames while the view "
        "pans 2.5 px right and 1 px down, zooms in 0.6 % and turns 0.4° a frame (`facedata.camera_clip`), one "
        "photo after the other (each cut a scene change). Every row is compared frame by frame with the same "
        "pipeline at n = 1 (the detector on every frame): faces reported, faces n = 1 has that this run misses, "
        f"extra ones (boxes matched at IoU > {SAME_BOX}); against the photos' annotations moved with the clip "
        "(`facedata.camera_clip_faces`; one to one at IoU >= 0.3, as section `detector-quality`), faces found, "
        "missed and false; the descriptor distance between each followed face and "
        "the face detected on that frame (median / 95th percentile / max; dlib's same-person threshold is 0.6; "
        f"the same face detected on two consecutive frames moves by {moves}, median / p95 / max); the gallery's "
        "name for both "
        f"(the photos' {result['people']} people enrolled from the originals among 100 random descriptors). "
        f"CPU ms a frame: `time.process_time`, one thread (OpenCV's too), median of {result['rounds']} interleaved "
        "rounds; the ratio is what holds on a shared machine. The rpi4 INT8 folder; BlazeFace full range is "
        "MediaPipe's `.tflite` on LiteRT.",
        "",
        "| pipeline | n | detector frames | faces reported | annotated faces found / missed / false "
        "| missed / extra vs n = 1 | followed faces | descriptors kept (largest chip change kept) "
        "| found again by the detector: descriptors kept "
        "| distance to detected: median / p95 / max | same name as n = 1 | CPU ms a frame | × n = 1 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        d = r["distance"]
        dist = " / ".join(f"{v:.3f}" for v in d) if d else "-"
        speed = f"{r['vs_every_frame']:.2f}×" if r["vs_every_frame"] else "-"
        largest = f"{r['largest_kept_change']:.1f}" if r["kept"] else "-"
        kept = f"{r['kept']} of {r['tracked_faces']} ({largest})" if r["tracked_faces"] else "-"
        again = f"{r['redetected_kept']} of {r['redetected']}" if r.get("redetected") else "-"
        lines.append(
            f"| {label(r)} | {r['every']} | {r['detector_frames']} of {r['frames']} | {r['reported']} | "
            f"{r['found']} / {r['missed_truth']} / {r['false']} of {r['annotated']} | {r['missed']} / {r['extra']} | "
            f"{r['followed_faces']} | {kept} | {again} | {dist} | {r['same_name']} of {r['matched']} | "
            f"{r['ms_per_frame']:.1f} | {speed} |"
        )
    return "\n".join([*lines, "", *summary_lines(rows), *choice_lines(result)])


def choice_lines(result: dict) -> list[str]:
    """How ``face.detect_every``'s video and camera default is chosen from these rows, and whether it holds."""
    from edge.face.track import VIDEO_DETECT_EVERY

    name = result.get("default_pipeline")
    chosen = chosen_every(result["rows"], name) if name else None
    if chosen is None:
        return []
    verdict = "as it ships" if chosen == VIDEO_DETECT_EVERY else f"**it ships {VIDEO_DETECT_EVERY}**"
    return [
        "",
        f"`face.detect_every`'s default for a video or a camera source (`edge.face.track.VIDEO_DETECT_EVERY` = "
        f"{VIDEO_DETECT_EVERY}) is the largest n up to which the Pi profiles' default pipeline ({name}) names every "
        f"face it shares with n = 1 as n = 1 does, on every frame of this clip: n = {chosen}, {verdict}.",
    ]


def lighting_text(result: dict) -> str:
    """The lighting check in words: how far a lighting change of the default's size moved a descriptor."""
    light = result.get("lighting")
    if not light:
        return ""
    parts = ", ".join(
        f"{name} {v['distance_max']:.3f} (chip change {v['change_min']:.1f}-{v['change_max']:.1f})"
        for name, v in light.items()
    )
    worst = max(v["distance_max"] for v in light.values())
    return (
        f"; a lighting change of the default's size on those chips ({result['keep']:g} grey levels, "
        f"`face_track.relit`) moves a descriptor by at most {worst:.3f} (a kept descriptor is that close to the "
        f"one the changed chip would give): {parts}"
    )


def label(r: dict) -> str:
    """A row's pipeline, and whether it describes every followed face (``keep_descriptor_within = 0``)."""
    return r["pipeline"] + (", every followed face described" if r["keep"] == 0 else "")


def summary_lines(rows: list[dict]) -> list[str]:
    """Per row in words: the detector's own flicker (n = 1), then what following cost and kept (n > 1)."""
    lines = []
    for r in rows:
        if r["every"] == 1:
            if r.get("flicker"):
                lines.append(
                    f"- {r['pipeline']}, n = 1: on {r['flicker']} frame{'s' * (r['flicker'] != 1)} the detector finds "
                    "more or fewer faces than "
                    "on the frame before in the same clip (faces scoring near its cut); a followed run keeps what "
                    "its last detector frame found, so those faces count as missed or extra below."
                )
            continue
        agree = r["same_name"] / r["matched"] if r["matched"] else 0.0
        d = r["distance"]
        lines.append(
            f"- {label(r)}, n = {r['every']}: the detector on {r['detector_frames']} of {r['frames']} frames; "
            f"{r['found']} of {r['annotated']} annotated faces found, {r['false']} false; "
            f"of the faces n = 1 reports {r['missed']} missed, {r['extra']} extra; "
            f"names agree on {100 * agree:.1f} % of the "
            f"faces; {r['kept']} of {r['tracked_faces']} followed faces kept their descriptor; followed faces at "
            f"most {d[2]:.3f} from the detected ones"
            + (f"; {r['vs_every_frame']:.2f}× the frames a CPU second." if r["vs_every_frame"] else ".")
            if d
            else f"- {label(r)}, n = {r['every']}: no face was followed."
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    from benchmarks.harness.report import machine_line, publish

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    parser.add_argument("--frames", type=int, default=FRAMES, help=f"frames a photo (default {FRAMES})")
    parser.add_argument("--target", default="rpi4", help="profile of the INT8 build (default rpi4)")
    parser.add_argument("--quick", action="store_true", help="1 round, n = 1 and 4; writes no docs")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.frames < 2:
        parser.error("--rounds must be >= 1 and --frames >= 2")
    start = time.perf_counter()

    def progress(msg: str) -> None:
        print(f"[{time.perf_counter() - start:6.1f} s] {msg}", file=sys.stderr, flush=True)

    rounds, every = (1, (1, 4)) if args.quick else (args.rounds, EVERY)
    result = run(args.target, rounds, every, args.frames, progress)
    command = f".venv/bin/python -m benchmarks run face_track --rounds {rounds} --frames {args.frames}"
    if args.target != "rpi4":
        command += f" --target {args.target}"
    md = markdown(result, command, machine_line())
    publish("face_track", md, result, CACHE, None if args.quick else lambda png: plot(result, png))
    return 0


def plot(result: dict, png: Path) -> None:
    """CPU ms a frame and the largest distance to the detected face, against n, per pipeline."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    for name in dict.fromkeys(r["pipeline"] for r in result["rows"]):
        mine = [r for r in result["rows"] if r["pipeline"] == name and r["keep"] != 0]
        every = [r["every"] for r in mine]
        left.plot(every, [r["ms_per_frame"] for r in mine], "o-", label=name)
        right.plot(every, [r["distance"][2] if r["distance"] else 0.0 for r in mine], "o-", label=name)
    left.set(xlabel="detector on 1 frame in n", ylabel="CPU ms a frame (host, 1 thread)", xscale="log", ylim=(0, None))
    right.axhline(0.6, color="grey", linestyle="--", linewidth=1)
    right.text(1, 0.57, "same-person threshold 0.6", color="grey", fontsize=8, va="top")
    right.set(xlabel="detector on 1 frame in n", ylabel="largest distance, followed to detected", xscale="log",
              ylim=(0, 0.65))  # fmt: skip
    for ax in (left, right):
        ax.set_xticks(EVERY, [str(n) for n in EVERY])
        ax.minorticks_off()
        ax.grid(alpha=0.3)
    left.legend(fontsize=8)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)
