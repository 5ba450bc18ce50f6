"""benchmarks/serve_fps.py without running anything heavy: the videos' frames and the write-up on made-up rows (and
the letterbox both videos start from, facedata's)."""

from __future__ import annotations

import numpy as np

from benchmarks import serve_fps
from converters.face.facedata import EVAL_PHOTOS, letterbox


def test_letterbox_keeps_the_aspect_on_grey():
    tall = np.zeros((600, 300, 3), np.uint8)  # 1:2 into 640x480: 240x480, centred, 200 grey columns each side
    out = letterbox(tall)
    assert out.shape == (480, 640, 3)
    assert (out[:, :200] == 128).all() and (out[:, 440:] == 128).all() and (out[:, 200:440] == 0).all()
    wide = np.full((100, 1280, 3), 255, np.uint8)  # 1280x100 -> 640x50, rows 215..265
    out = letterbox(wide)
    assert (out[215:265] == 255).all() and (out[:215] == 128).all() and (out[265:] == 128).all()


def _row(name: str, fps: float, missed: int, base: float = 1.0, every: int | None = 1) -> dict:
    return {
        "name": name,
        "detector": "d",
        "every": every,
        "fps": fps,
        "ratio": fps / base,
        "found": 32 - missed,
        "missed_truth": missed,
        "false": 1,
        "annotated": 32,
        "start_s": 0.5,
        "rounds": [fps],
    }


def test_the_goal_lines_name_the_fastest_and_the_fastest_that_misses_no_more_than_face_recognition():
    cuts = [_row("face_recognition", 1.0, 2, every=None), _row("fast", 17.0, 6), _row("full", 9.5, 2)]
    clip = [_row("face_recognition", 2.0, 0, every=None), _row("followed", 24.0, 0, base=2.0, every=4)]
    result = {"frames": 36, "rounds": 3, "target": "rpi4",
              "videos": [{"kind": "cuts", "photos": ["a"], "rows": cuts}, {"kind": "clip", "photos": ["a"], "rows": clip}]}  # fmt: skip
    text = serve_fps.markdown(result, "cmd", "machine")
    cuts_text, clip_text = text.split("### `clip`")
    assert "| face_recognition | d |  | 1.00 | 1.00× | 30 / 2 / 1 of 32 | 0.5 |" in cuts_text
    assert "| fast | d | 1 | 17.00 | 17.00× | 26 / 6 / 1 of 32 | 0.5 |" in cuts_text
    assert "Fastest: fast: 17.00× — met." in cuts_text
    assert (
        "Fastest that misses no more annotated faces than face_recognition (2): full: 9.50× — **not met**." in cuts_text
    )
    assert "| followed | d | 4 | 24.00 | 12.00× | 32 / 0 / 1 of 32 | 0.5 |" in clip_text
    assert "Fastest that misses no more annotated faces than face_recognition (0): followed: 12.00× — met." in clip_text
    clip[1]["missed_truth"] = 1
    assert "Every row of ours misses more annotated faces than face_recognition (0)." in serve_fps.markdown(
        result, "c", "m"
    )


def test_the_clip_video_is_each_photo_filmed_in_turn_and_the_cuts_video_changes_photo_every_frame():
    cuts = serve_fps.video_frames("cuts", 4)
    assert [name for name, _, _ in cuts] == [cuts[0][0], cuts[1][0], cuts[2][0], cuts[0][0]]
    assert len({name for name, _, _ in cuts[:3]}) == 3
    clip = serve_fps.video_frames("clip", 7)  # 3 photos: 3 frames each, the last cut short
    names = [name for name, _, _ in clip]
    assert names[:3] == [names[0]] * 3 and names[3:6] == [names[3]] * 3 and names[6] != names[3]
    assert all(rgb.shape == (480, 640, 3) and boxes for _, rgb, boxes in clip)
    assert not np.array_equal(clip[0][1], clip[1][1])  # the camera moves between frames
    assert np.array_equal(clip[0][1], cuts[0][1]) and clip[0][2] == cuts[0][2]  # a clip's frame 0: the photo, unmoved
    assert np.array_equal(cuts[0][1], letterbox(EVAL_PHOTOS[0].load()))  # ... letterboxed to 640x480
    assert clip[1][2][0][0] > clip[0][2][0][0]  # and its faces move right with the pan
