"""The frame-budget levers without emulation: the letterbox resamplers of scripts/arm/run_letterbox.py and the
write-up of benchmarks/arm_frame_levers.py on made-up counts."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks import arm_frame_levers as levers
from edge.face.detect_blazeface import letterbox

TODAY, HALVE, BILINEAR, CV_AREA = levers.RESAMPLERS


def test_the_first_resampler_is_what_edge_face_runs():
    rgb = np.random.default_rng(0).integers(0, 256, (480, 640, 3), dtype=np.uint8)
    tensor, place = levers.RESAMPLERS[TODAY](rgb, 192)
    assert np.array_equal(tensor, letterbox(rgb, 192)[0]) and place == letterbox(rgb, 192)[1]


@pytest.mark.parametrize("shape", [(480, 640), (886, 1280), (600, 512), (100, 90)])
def test_every_resampler_places_the_frame_as_the_letterbox_does(shape):
    """Same placement and border as edge/face's letterbox; a flat grey frame stays that grey (a resampler that
    dropped or shifted rows would show it at the border)."""
    grey = np.full((*shape, 3), 200, np.uint8)
    expected, where = letterbox(grey, 192)
    for name, resample in levers.RESAMPLERS.items():
        got, place = resample(grey, 192)
        assert got.shape == (1, 192, 192, 3) and got.dtype == np.float32 and place == where, name
        np.testing.assert_allclose(got, expected, atol=1e-6, err_msg=name)


def test_halving_runs_while_the_frame_is_at_least_twice_the_target():
    """At exactly twice the square one 2x2 halving is the whole resize (the box means, rounded); just below
    twice, no halving: plain bilinear."""
    rng = np.random.default_rng(1)
    rgb = rng.integers(0, 256, (384, 384, 3), dtype=np.uint8)
    means = np.floor(rgb.reshape(192, 2, 192, 2, 3).astype(np.float64).mean(axis=(1, 3)) + 0.5)
    np.testing.assert_allclose(levers.RESAMPLERS[HALVE](rgb, 192)[0][0], means * (2 / 255) - 1, atol=1e-6)
    rgb = rgb[:383, :383]
    assert np.array_equal(levers.RESAMPLERS[HALVE](rgb, 192)[0], levers.RESAMPLERS[BILINEAR](rgb, 192)[0])


def test_the_decision_names_only_cheaper_resamplers_that_keep_every_face():
    counts = {TODAY: 6e6, HALVE: 1e6, BILINEAR: 2e6, CV_AREA: 12e6}
    faces = {TODAY: (44, 10, 0), HALVE: (43, 11, 0), BILINEAR: (44, 10, 0), CV_AREA: (45, 9, 0)}
    flat = {"cortex-a76": (44e6, 46e6, 0.002)}
    text = levers.decision(counts, faces, flat)
    assert "without finding fewer evaluation faces: bilinear (MediaPipe's sampling)." in text  # not CV_AREA: dearer
    assert "fp16 saves nothing beyond 1% on any core counted." in text
    text = levers.decision(counts | {BILINEAR: 7e6}, faces, {"cortex-a76": (44e6, 30e6, 0.002)})
    assert "faces: none." in text and "fp16 saves 14.00 M instructions an inference on cortex-a76." in text


def test_the_table_says_what_each_resampler_saves_and_loses():
    counts = {
        c: {TODAY: 6.43e6, HALVE: 1.01e6, BILINEAR: 2.1e6, CV_AREA: 12.02e6} for c in ("cortex-a72", "cortex-a76")
    }
    faces = {TODAY: (44, 10, 0), HALVE: (43, 11, 0), BILINEAR: (40, 14, 0), CV_AREA: (44, 10, 0)}
    text = levers.letterbox_table(counts, faces)
    assert f"| {HALVE} | 1.01 | 1.01 | +5.42 M (cortex-a72) | 43 | 11 | 0 |" in text
    assert f"- {HALVE}: saves 5.42 M instructions a frame on cortex-a72 and finds 1 face fewer than today's." in text
    assert f"- {CV_AREA}: costs 5.59 M instructions a frame on cortex-a72 and finds as many faces or more" in text
