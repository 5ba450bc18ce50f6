"""Tiles over a frame (``edge.face.tiles``) and BlazeFace's tiled pass mapping boxes back to the frame, with a
stand-in network that boxes the one bright square it sees (no model file needed)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edge.errors import InputError
from edge.face import detect_blazeface
from edge.face.detect_blazeface import FULL_RANGE, BlazeFaceDetector, ssd_anchors
from edge.face.tiles import DEFAULT_TILING, Tile, Tiling, inside_tile, look_window, tile_grid
from edge.runtime.base import TensorSpec


def test_t1_sized_frames_get_a_2x2_grid_overlapping_by_the_face_the_whole_frame_pass_may_miss():
    # overlap = ceil(24 * 1280 / 192) = 160; side = ceil((1280 + 160) / 2) = 720
    tiles = tile_grid(1280, 886, 192, DEFAULT_TILING)
    assert tiles == [Tile(0, 0, 720, 720), Tile(560, 0, 1280, 720), Tile(0, 166, 720, 886), Tile(560, 166, 1280, 886)]
    portrait = tile_grid(886, 1280, 192, DEFAULT_TILING)
    assert portrait == [Tile(t.y0, t.x0, t.y1, t.x1) for t in sorted(tiles, key=lambda t: (t.x0, t.y0))]


def test_frames_below_min_side_are_not_tiled():
    for width, height in ((512, 512), (224, 224), (575, 400), (400, 575)):
        assert tile_grid(width, height, 192, DEFAULT_TILING) == [], (width, height)
    assert len(tile_grid(576, 400, 192, DEFAULT_TILING)) == 4  # long side 576 = min_side: tiles of 318, 2 x 2


def test_a_long_short_frame_gets_one_row_of_tiles_as_high_as_the_frame():
    tiles = tile_grid(3000, 600, 192, Tiling(per_side=3))
    # overlap = ceil(24 * 3000 / 192) = 375; side = ceil((3000 + 2 * 375) / 3) = 1250, clipped to 600 high
    assert tiles == [Tile(0, 0, 1250, 600), Tile(875, 0, 2125, 600), Tile(1750, 0, 3000, 600)]


@pytest.mark.parametrize("size", [(1280, 886), (1920, 1080), (1000, 999), (4000, 700), (600, 2000)])
@pytest.mark.parametrize("per_side", [2, 3, 4])
def test_every_face_the_whole_frame_pass_may_miss_lies_whole_in_some_tile(size, per_side):
    width, height = size
    tiling = Tiling(per_side=per_side)
    tiles = tile_grid(width, height, 192, tiling)
    face = int(tiling.net_face * max(width, height) / 192)  # the largest such face, in frame pixels
    assert tiles and all(0 <= t.x0 < t.x1 <= width and 0 <= t.y0 < t.y1 <= height for t in tiles)
    assert {t.x1 - t.x0 for t in tiles} == {min(width, tiles[0].x1)} and len({t.y1 - t.y0 for t in tiles}) == 1
    for x in range(0, width - face + 1, 7):
        for y in range(0, height - face + 1, 11):
            assert any(t.x0 <= x and x + face <= t.x1 and t.y0 <= y and y + face <= t.y1 for t in tiles), (x, y)


def test_boxes_crossing_a_tile_edge_inside_the_frame_are_dropped_not_those_crossing_the_frame_edge():
    tile = Tile(560, 0, 1280, 720)
    boxes = np.array(
        [
            [600, 100, 700, 200],  # inside
            [550, 100, 650, 200],  # crosses the left edge, which is inside the frame
            [600, 650, 700, 750],  # crosses the bottom edge, inside the frame
            [1250, -10, 1300, 60],  # crosses the frame's own right and top edges
        ],
        np.float32,
    )
    assert inside_tile(boxes, tile, 1280, 886).tolist() == [True, False, False, True]


@pytest.mark.parametrize(
    ("kwargs", "text"),
    [
        ({"per_side": 1}, "Tiling per_side = 1; expected an integer >= 2"),
        ({"per_side": 2.0}, "Tiling per_side = 2.0; expected an integer >= 2"),
        ({"min_side": 0}, "Tiling min_side = 0; expected an integer >= 1"),
        ({"net_face": float("nan")}, "Tiling net_face = nan; expected a finite number > 0"),
        ({"net_face": 0}, "Tiling net_face = 0; expected a finite number > 0"),
        ({"look_score": 0}, "Tiling look_score = 0; expected a number in (0, 1]"),
        ({"look_score": float("nan")}, "Tiling look_score = nan; expected a number in (0, 1]"),
        ({"look_zoom": 1.0}, "Tiling look_zoom = 1.0; expected a number in (1, 16]"),
        ({"look_zoom": True}, "Tiling look_zoom = True; expected a number in (1, 16]"),
        ({"max_looks": -1}, "Tiling max_looks = -1; expected an integer >= 0"),
        ({"cued": 1}, "Tiling cued = 1; expected True or False"),
    ],
)
def test_bad_tilings_are_refused(kwargs, text):
    with pytest.raises(InputError) as err:
        Tiling(**kwargs)
    assert str(err.value) == text


def test_a_look_window_is_the_zoomed_square_on_the_box_clipped_to_the_frame():
    box = np.array([100, 200, 140, 230], np.float32)  # 40 x 30: a square of 2 x 40 on its centre (120, 215)
    assert look_window(box, 2.0, 640, 480) == (175, 255, 80, 160)
    assert look_window(np.array([0, 0, 40, 40], np.float32), 2.0, 640, 480) == (0, 60, 0, 60)
    assert look_window(np.array([630, 470, 670, 510], np.float32), 2.0, 640, 480) == (450, 480, 610, 640)
    assert look_window(np.array([700, 10, 740, 50], np.float32), 2.0, 640, 480) is None  # off the frame


class _SquareNet:
    """BlazeFace full range's inputs and outputs; 'finds' the bright pixels of its input as one face (anchor 0
    regresses their bounding box, its keypoints at the box centre), and nothing in a dark input."""

    backend = "fake"
    threads = 1

    def __init__(self, path: Path) -> None:
        self.path = path
        self.inputs = (TensorSpec("input", (1, 192, 192, 3), np.dtype(np.float32)),)
        self.outputs = (
            TensorSpec("regressors", (1, 2304, 16), np.dtype(np.float32)),
            TensorSpec("classificators", (1, 2304, 1), np.dtype(np.float32)),
        )
        self.anchor = ssd_anchors(FULL_RANGE)[0] * 192
        self.runs = 0
        self.sure_from = 0  # a square narrower than this at the input scores 0.5, under full range's cut

    def run(self, feeds: dict) -> dict:
        self.runs += 1
        boxes, logits = np.zeros((1, 2304, 16), np.float32), np.full((1, 2304, 1), -100.0, np.float32)
        ys, xs = np.nonzero(feeds["input"][0, :, :, 0] > 0.0)
        if xs.size:
            x1, y1, x2, y2 = xs.min(), ys.min(), xs.max() + 1, ys.max() + 1
            centre = np.array([(x1 + x2) / 2, (y1 + y2) / 2], np.float32) - self.anchor
            boxes[0, 0, :4] = [*centre, x2 - x1, y2 - y1]
            boxes[0, 0, 4:] = np.tile(centre, 6)
            logits[0, 0, 0] = 10.0 if x2 - x1 >= self.sure_from else 0.0
        return {"regressors": boxes, "classificators": logits}

    def close(self) -> None:
        pass


@pytest.fixture
def square_detector(tmp_path, monkeypatch):
    def detector(tiling: Tiling | None, sure_from: int = 0) -> BlazeFaceDetector:
        path = tmp_path / "fake.onnx"
        path.write_bytes(b"fake")
        net = _SquareNet(path)
        net.sure_from = sure_from
        monkeypatch.setattr(detect_blazeface, "open_net", lambda p, *a: net)
        return BlazeFaceDetector(path, tiling=tiling)

    return detector


def test_tile_boxes_come_back_in_frame_pixels_and_merge_with_the_whole_frame_pass(square_detector):
    frame = np.zeros((886, 1280, 3), np.uint8)
    frame[300:364, 1000:1064] = 255  # one 64-pixel 'face' in the two right-hand tiles
    want = np.array([1000, 300, 1064, 364])
    plain = square_detector(None)
    [whole] = plain.detect(frame)
    assert plain._model.runs == 1
    tiled = square_detector(DEFAULT_TILING)
    [merged] = tiled.detect(frame)
    assert tiled._model.runs == 5
    # each pass sees the square to within one input pixel: 1280 / 192 frame pixels whole, 720 / 192 per tile
    assert np.abs(np.array(whole.box) - want).max() <= 1280 / 192
    assert np.abs(np.array(merged.box) - want).max() <= 720 / 192 + 0.5
    assert merged.score == pytest.approx(1 / (1 + np.exp(-10.0)))
    assert np.allclose(merged.landmarks[2], [1032, 332], atol=720 / 192)  # the nose: the box centre
    small = np.zeros((512, 512, 3), np.uint8)
    assert tiled.detect(small) == [] and tiled._model.runs == 6  # below min_side: the whole frame only


def test_a_cued_frame_runs_its_tiles_only_when_the_whole_frame_pass_finds_no_face_or_a_small_one(square_detector):
    """640x480, tiled (long side >= min_side): a 200-pixel face is 60 pixels wide at the input, more than net_face
    (24), so the whole-frame pass alone runs; a 64-pixel one (19 at the input) or none at all gets the 4 tiles too,
    as every frame does without ``cued``."""
    big, small, empty = (np.zeros((480, 640, 3), np.uint8) for _ in range(3))
    big[100:300, 200:400] = 255
    small[100:164, 200:264] = 255
    cued = square_detector(DEFAULT_TILING)
    assert len(cued.detect(big)) == 1 and cued._model.runs == 1
    assert len(cued.detect(small)) == 1 and cued._model.runs == 1 + 5
    assert cued.detect(empty) == [] and cued._model.runs == 1 + 5 + 5
    blind = square_detector(Tiling(cued=False))
    assert blind.detect(big) and blind._model.runs == 5


def test_a_tiling_of_another_type_is_refused(square_detector):
    with pytest.raises(InputError) as err:
        square_detector((2, 576))
    assert str(err.value) == "BlazeFaceDetector tiling = (2, 576); expected an edge.face.tiles.Tiling or None"


def test_a_weak_candidate_gets_a_second_look_at_twice_its_size(square_detector):
    """A 40-pixel square in a 512-pixel frame is 15 pixels wide at the input and scores 0.5 there (the stand-in
    is sure from 24): under the cut, so MediaPipe's pass alone drops it; the second look's window (80 pixels on
    it) shows it 96 pixels wide, sure, and it is kept, boxed from that closer pass."""
    frame = np.zeros((512, 512, 3), np.uint8)
    frame[100:140, 300:340] = 255
    no_look = square_detector(Tiling(look_score=1.0), sure_from=24)
    assert no_look.detect(frame) == [] and no_look._model.runs == 1
    looked = square_detector(DEFAULT_TILING, sure_from=24)
    [face] = looked.detect(frame)
    assert looked._model.runs == 2
    assert np.abs(np.array(face.box) - [300, 100, 340, 140]).max() <= 80 / 192 + 0.5
    assert face.score == pytest.approx(1 / (1 + np.exp(-10.0)))
    capped = square_detector(Tiling(max_looks=0), sure_from=24)
    assert capped.detect(frame) == [] and capped._model.runs == 1


def test_a_weak_candidate_on_a_found_face_gets_no_look(square_detector):
    frame = np.zeros((512, 512, 3), np.uint8)
    frame[100:220, 300:420] = 255  # 45 pixels at the input: sure at once
    tiled = square_detector(DEFAULT_TILING, sure_from=24)
    assert len(tiled.detect(frame)) == 1 and tiled._model.runs == 1
