"""Overlapping tiles over a frame, for a detector whose small input cannot see a large frame's small faces.

BlazeFace full range looks at a frame shrunk to 192 pixels, where a face must be about 18 pixels wide to be
found reliably: on the 21 evaluation images it missed faces up to 17.3 pixels wide at its input (annotated
box side) and found every wider one but two 72-pixel Tom Hanks augmentations (measured once by hand). In
insightface's 1280x886 group photo 18 input pixels are a 120-pixel face, and the photo's faces are 80-130
pixels: the whole-frame pass finds 5 of its 6 people, and misses 8 of the 40 faces of its 7 evaluation images.
Running the same network on a few overlapping crops as well brings them back (all 40 with ``DEFAULT_TILING``;
``edge.face.detect_blazeface.BlazeFaceDetector``, ``tiling``):

* tiles are square, of side ``S``; ``per_side`` of them span the frame's long side, and as many as needed
  the short side (one when it fits in ``S``);
* neighbouring tiles overlap by at least ``O`` = ``net_face`` x long side / input side pixels: the largest
  face the whole-frame pass may miss. So every face it may miss lies whole inside some tile, and a tile's
  detection that crosses a tile edge inside the frame (a face cut by the crop) can be dropped: the face is
  whole in a neighbour, or big enough for the whole-frame pass;
* ``S`` = (long side + (per_side - 1) x O) / per_side, the smallest that gives that overlap;
* cued (``Tiling.cued``, the default): the tiles run only when the whole-frame pass found no face, or one
  narrower than ``net_face`` at the network's input: a scene whose faces are near the size that pass can see,
  where smaller ones may be. A frame whose faces it all found large (a person at the camera) runs that pass
  alone; a small face beside a large one is then left to the second look below.

A second look (``Tiling.look_score``, every frame, tiled or not): a candidate of those passes scoring below the
detector's cut but at least ``look_score``, and overlapping no detection, gets one more pass on a square window
``look_zoom`` times its side centred on it (``look_window``); it is kept when that closer pass finds it at the
detector's own cut. It brings back faces the shrunk frame or tile shows at a size or blur the network scores
just under its cut (on the demo's views, faces of insightface's photo turned by an augmentation, and a small
Tom Hanks), at one network pass per weak candidate, ``max_looks`` at most a frame.

Pure geometry, no model: the detector maps each tile's boxes back with ``Tile.x0``/``Tile.y0``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from edge.errors import InputError


@dataclass(frozen=True)
class Tiling:
    """How a detector tiles a frame on top of its whole-frame pass.

    Attributes:
        per_side: tiles along the frame's long side (2: a 2x2 grid on a landscape photo).
        min_side: tile only frames whose long side is at least this many pixels (smaller frames are shrunk
            little enough for the whole-frame pass alone).
        net_face: face side, in pixels at the network's input, below which the whole-frame pass may miss a
            face; sets the overlap.
        look_score: candidates scoring at least this (and below the detector's cut) get a second look; 1.0:
            none.
        look_zoom: a second look's window side, in multiples of the candidate box's longer side.
        max_looks: second looks a frame at most, best candidates first.
        cued: run the tiles only when the whole-frame pass found no face, or one narrower than ``net_face`` pixels
            at the network's input (a scene of small faces, where smaller ones may hide); False: on every frame
            large enough.
    """

    per_side: int = 2
    min_side: int = 576
    net_face: float = 24.0
    look_score: float = 0.3
    look_zoom: float = 2.0
    max_looks: int = 4
    cued: bool = True

    def __post_init__(self) -> None:
        for name, low in (("per_side", 2), ("min_side", 1), ("max_looks", 0)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise InputError(f"Tiling {name} = {value!r}; expected an integer >= {low}")
        if not (isinstance(self.net_face, int | float) and math.isfinite(self.net_face) and self.net_face > 0):
            raise InputError(f"Tiling net_face = {self.net_face!r}; expected a finite number > 0")
        if not isinstance(self.cued, bool):
            raise InputError(f"Tiling cued = {self.cued!r}; expected True or False")
        for key, bottom, top in (("look_score", 0.0, 1.0), ("look_zoom", 1.0, 16.0)):
            value = getattr(self, key)
            if not (isinstance(value, int | float) and not isinstance(value, bool) and bottom < value <= top):
                raise InputError(f"Tiling {key} = {value!r}; expected a number in ({bottom:g}, {top:g}]")


#: The tiling ``open_face_pipeline(..., detector="blazeface-full-tiled")`` runs. net_face 24: the 18 pixels
#: measured (module docstring) and a third more; on a 1280x886 frame a 2x2 grid of 720-pixel tiles overlapping
#: by 160. Second looks from 0.3 at twice the box: chosen on the demo's views (seed 1, where the tiles alone
#: missed 3 of 47 faces), then counted on the evaluation set. Cued: on the evaluation set and the demo's views,
#: as they are and letterboxed to 640x480, it finds the faces blind tiles find, with fewer passes;
#: benchmarks/detector_quality.py and demo_detectors.py show what it finds.
DEFAULT_TILING = Tiling()


@dataclass(frozen=True)
class Tile:
    """One crop of the frame: columns ``x0:x1``, rows ``y0:y1`` (pixels, end exclusive)."""

    x0: int
    y0: int
    x1: int
    y1: int


def _starts(length: int, side: int, count: int) -> list[int]:
    """``count`` start positions of ``side``-long tiles spread evenly over ``length``, first 0, last at the end."""
    if count == 1:
        return [0]
    return [round(i * (length - side) / (count - 1)) for i in range(count)]


def tile_grid(width: int, height: int, input_side: int, tiling: Tiling) -> list[Tile]:
    """The tiles of a ``width`` x ``height`` frame, row by row; [] when the frame is too small to tile.

    Args:
        width, height: the frame's size in pixels.
        input_side: the network's input side (192 for BlazeFace full range).
        tiling: the grid's settings.

    Returns:
        Tiles of side ``S`` (clipped to a shorter frame side), neighbours overlapping by at least the overlap
        of the module docstring, the last tile of each row and column ending at the frame's edge.
    """
    long_side = max(width, height)
    if long_side < tiling.min_side:
        return []
    overlap = math.ceil(tiling.net_face * long_side / input_side)
    n = tiling.per_side
    side = min(long_side, math.ceil((long_side + (n - 1) * overlap) / n))
    counts = {}
    for axis, length in (("x", width), ("y", height)):
        counts[axis] = n if length == long_side else 1 + max(0, math.ceil((length - side) / (side - overlap)))
    sx, sy = min(side, width), min(side, height)
    return [
        Tile(x0, y0, x0 + sx, y0 + sy)
        for y0 in _starts(height, sy, counts["y"])
        for x0 in _starts(width, sx, counts["x"])
    ]


def look_window(box: np.ndarray, zoom: float, width: int, height: int) -> tuple[int, int, int, int] | None:
    """A second look's window (rows ``r0:r1``, columns ``c0:c1``) for an (x1, y1, x2, y2) candidate box: the
    square ``zoom`` times its longer side centred on it, clipped to the frame; None when less than 2 pixels
    of it are inside."""
    cx, cy = (box[0] + box[2]) / 2.0, (box[1] + box[3]) / 2.0
    half = zoom * max(box[2] - box[0], box[3] - box[1]) / 2.0
    c0, r0 = max(0, int(cx - half)), max(0, int(cy - half))
    c1, r1 = min(width, int(math.ceil(cx + half))), min(height, int(math.ceil(cy + half)))
    return (r0, r1, c0, c1) if c1 - c0 >= 2 and r1 - r0 >= 2 else None


def inside_tile(boxes: np.ndarray, tile: Tile, width: int, height: int) -> np.ndarray:
    """Which (x1, y1, x2, y2) boxes, in frame pixels, do not cross an edge of ``tile`` inside the frame.

    A box may cross the tile's edges that are the frame's own (BlazeFace boxes a face at the border beyond it).

    Returns:
        bool [n].
    """
    keep = np.ones(len(boxes), bool)
    if tile.x0 > 0:
        keep &= boxes[:, 0] >= tile.x0
    if tile.y0 > 0:
        keep &= boxes[:, 1] >= tile.y0
    if tile.x1 < width:
        keep &= boxes[:, 2] <= tile.x1
    if tile.y1 < height:
        keep &= boxes[:, 3] <= tile.y1
    return keep
