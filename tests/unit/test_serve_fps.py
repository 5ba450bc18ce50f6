"""benchmarks/serve_fps.py without running anything heavy: the video's frames and the write-up on made-up rows."""

from __future__ import annotations

import numpy as np

from benchmarks import serve_fps


def test_letterbox_keeps_the_aspect_on_grey():
    tall = np.zeros((600, 300, 3), np.uint8)  # 1:2 into 640x480: 240x480, centred, 200 grey columns each side
    out = serve_fps.letterbox(tall)
    assert out.shape == (480, 640, 3)
    assert (out[:, :200] == 128).all() and (out[:, 440:] == 128).all() and (out[:, 200:440] == 0).all()
    wide = np.full((100, 1280, 3), 255, np.uint8)  # 1280x100 -> 640x50, rows 215..265
    out = serve_fps.letterbox(wide)
    assert (out[215:265] == 255).all() and (out[:215] == 128).all() and (out[265:] == 128).all()


def _row(name: str, fps: float, faces: int, base: float = 1.0) -> dict:
    return {
        "name": name,
        "detector": "d",
        "fps": fps,
        "ratio": fps / base,
        "faces": faces,
        "start_s": 0.5,
        "rounds": [fps],
    }


def test_the_goal_lines_name_the_fastest_and_the_fastest_that_misses_nothing():
    result = {"frames": 36, "rounds": 3, "photos": ["a", "b"], "target": "rpi4",
              "rows": [_row("face_recognition", 1.0, 32), _row("fast", 17.0, 28), _row("full", 9.5, 32)]}  # fmt: skip
    text = serve_fps.markdown(result, "cmd", "machine")
    assert "| fast | d | 17.00 | 17.00× | 28 | 0.5 |" in text
    assert "Fastest: fast: 17.00× — met." in text
    assert "Fastest that reports at least as many faces as face_recognition (32): full: 9.50× — **not met**." in text
