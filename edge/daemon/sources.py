"""Frame sources of the daemon: a watched folder, a video file, a camera. Each yields ``Frame`` records.

``next_frame()`` never blocks for long: it returns a frame, or None when nothing is ready now, so the
daemon's loop stays free to answer commands and signals. Durable sources (folder, video) name every frame
by a key that is stable across restarts and skip frames whose result was already reported (asked through
``done(source, key)``: the daemon answers from the receipts in its telemetry outbox, see
``receipt_key``); a camera is live and keeps no state.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from edge.daemon.config import SourceKind, SourceSettings
from edge.errors import EdgeDeployError, InputError, require
from edge.imageio import DEFAULT_MAX_PIXELS, IMAGE_SUFFIXES, load_image  # the watched folder ignores other suffixes

#: ``done(source, key)``: whether the frame ``key`` of ``source`` has its result reported.
DoneCheck = Callable[[str, str], bool]


def display_name(name: str) -> str:
    """A file name as valid text: bytes that are not UTF-8 (kept by Python as surrogate escapes, which no
    UTF-8 consumer takes) are shown as ``\\xff``. Stable, so it can key the file's frame across restarts."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def receipt_key(source: str, key: str) -> str:
    """The outbox receipt of a frame's result: unambiguous for any source name and frame key."""
    return json.dumps([source, key], ensure_ascii=False)


@dataclass(frozen=True)
class Frame:
    """One frame to analyse.

    Attributes:
        frame_id: stable, human-readable id (file name; ``video.mp4#120``; ``camera0#17``).
        rgb: uint8 [H, W, 3] RGB, or None when the frame could not be read (see ``error``).
        source: the source's name (None for live sources: nothing is remembered).
        key: the frame's key within the source, stable across restarts.
        meta: extra fields for the result (file, frame index, time in the video).
        error: why ``rgb`` is None (an unreadable or corrupt file).
    """

    frame_id: str
    rgb: np.ndarray | None
    source: str | None
    key: str
    meta: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


class FrameSource(Protocol):
    """What the daemon reads frames from."""

    name: str
    exhausted: bool

    def next_frame(self) -> Frame | None: ...

    def close(self) -> None: ...


class WatchedFolder:
    """Image files appearing in a folder, each analysed once, in order of modification time.

    A file is taken once its modification time is ``settle_s`` old (so half-copied files are left alone;
    better still, write to a hidden ``.name`` and rename). Hidden files and other suffixes are ignored.
    A file's key is ``name|size|mtime_ns``: a file replaced by new content is a new frame.

    Args:
        folder: the folder to watch (not recursive).
        done: whether a file's result was already reported.
        poll_interval_s: how often to list the folder when nothing is queued.
        settle_s: minimum age of a file before it is read.
        once: list the folder once; ``exhausted`` becomes True when that list is done.
        max_pixels: larger images are reported as frame errors without being decoded (``edge.imageio``).
    """

    def __init__(
        self,
        folder: Path,
        done: DoneCheck,
        poll_interval_s: float,
        settle_s: float,
        once: bool = False,
        max_pixels: int = DEFAULT_MAX_PIXELS,
    ) -> None:
        self.folder = Path(folder)
        self.name = f"folder:{display_name(str(self.folder))}"
        self.done = done
        self.max_pixels = max_pixels
        self.poll_interval_s = poll_interval_s
        self.settle_s = settle_s
        self.once = once
        self.exhausted = False
        self.ignored: set[str] = set()
        self._queue: list[tuple[str, str]] = []
        self._seen: set[str] = set()  # keys done or handed out in this run
        self._next_scan = 0.0
        self._scans = 0

    def _scan(self) -> None:
        try:
            entries = [p for p in self.folder.iterdir() if not p.name.startswith(".")]
        except OSError as exc:
            raise InputError(f"{self.folder}: cannot list the watched folder ({exc.strerror})") from exc
        now = time.time()
        found = []
        present: set[str] = set()
        for path in entries:
            try:
                st = path.stat()
            except OSError:
                continue  # vanished between listing and stat
            if not path.is_file():
                continue
            if path.suffix.lower() not in IMAGE_SUFFIXES:
                self.ignored.add(path.name)
                continue
            if now - st.st_mtime < self.settle_s and not self.once:
                continue
            key = f"{display_name(path.name)}|{st.st_size}|{st.st_mtime_ns}"
            present.add(key)
            if key in self._seen:
                continue
            if self.done(self.name, key):
                self._seen.add(key)  # ask the database once per file, not on every listing
            else:
                found.append((st.st_mtime_ns, path.name, key))
        self._queue = [(name, key) for _, name, key in sorted(found)]
        self._seen &= present  # forget files that are gone: a folder emptied by its producer keeps memory flat
        self.ignored &= {p.name for p in entries}
        self._scans += 1

    def next_frame(self) -> Frame | None:
        """The next unprocessed image, or None if none is ready."""
        if not self._queue:
            if self.once and self._scans:
                self.exhausted = True
            if self.exhausted or time.monotonic() < self._next_scan:
                return None
            self._scan()
            self._next_scan = time.monotonic() + self.poll_interval_s
            if not self._queue:
                return None
        name, key = self._queue.pop(0)
        self._seen.add(key)
        shown = display_name(name)
        meta = {"file": shown}
        try:
            rgb = load_image(self.folder / name, self.max_pixels)
        except EdgeDeployError as exc:
            return Frame(shown, None, self.name, key, meta, error=str(exc))
        return Frame(shown, rgb, self.name, key, meta)

    def close(self) -> None:
        """Nothing to release."""


class VideoFile:
    """Frames of a video file, every ``stride``-th one, resumed after a restart where it stopped.

    Frames are skipped with ``grab()`` (exact on every codec), never by seeking. The video's identity is
    ``name|size|mtime_ns`` and part of every frame's key (``<index>@<identity>``): a changed file starts
    over. On opening, the analysed frames 0, stride, 2*stride, ... already reported are skipped.

    Args:
        path: the video file.
        done: whether a frame's result was already reported.
        stride: analyse frame 0, stride, 2*stride, ...

    Raises:
        InputError: if OpenCV cannot open the file as a video.
    """

    def __init__(self, path: Path, done: DoneCheck, stride: int = 1) -> None:
        cv2 = require("cv2", "device", "reading video files")
        self.path = Path(path)
        self.name = f"video:{self.path}"
        self.stride = stride
        self.exhausted = False
        st = self.path.stat()
        self.identity = f"{self.path.name}|{st.st_size}|{st.st_mtime_ns}"
        self._cap = cv2.VideoCapture(str(self.path))
        if not self._cap.isOpened():
            raise InputError(f"{self.path}: OpenCV cannot open it as a video; expected e.g. an MP4 or AVI file")
        self.fps = float(self._cap.get(cv2.CAP_PROP_FPS)) or 0.0
        self._cvt = lambda bgr: cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
        self.index = 0
        start = 0
        while done(self.name, self.key(start)):
            start += stride
        while self.index < start:
            if not self._cap.grab():
                self.exhausted = True
                break
            self.index += 1

    def key(self, index: int) -> str:
        """The key of frame ``index`` of this video."""
        return f"{index}@{self.identity}"

    def next_frame(self) -> Frame | None:
        """The next frame to analyse, or None at the end of the video (``exhausted`` is then True)."""
        while not self.exhausted:
            ok = self._cap.grab()
            if not ok:
                self.exhausted = True
                return None
            index = self.index
            self.index += 1
            if index % self.stride:
                continue
            ok, bgr = self._cap.retrieve()
            if not ok or bgr is None:
                self.exhausted = True
                return None
            meta = {"file": self.path.name, "frame_index": index}
            if self.fps > 0:
                meta["time_s"] = round(index / self.fps, 3)
            return Frame(f"{self.path.name}#{index}", self._cvt(bgr), self.name, self.key(index), meta)
        return None

    def close(self) -> None:
        """Release the capture."""
        self._cap.release()


class Camera:
    """Live frames from an OpenCV camera (V4L2 index); nothing is remembered across restarts.

    Args:
        index: the camera index (``/dev/video<index>``).
        stride: analyse every ``stride``-th frame read.

    Raises:
        InputError: if the camera cannot be opened.
    """

    def __init__(self, index: int, stride: int = 1) -> None:
        cv2 = require("cv2", "device", "reading a camera")
        self.index = index
        self.name = f"camera{index}"
        self.stride = stride
        self.exhausted = False
        self._cap = cv2.VideoCapture(index)
        if not self._cap.isOpened():
            self._cap.release()
            raise InputError(f"source.camera_index = {index}: OpenCV cannot open /dev/video{index}")
        self._cvt = lambda bgr: cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
        self._count = 0
        self._session = time.strftime("%Y%m%dT%H%M%S")

    def next_frame(self) -> Frame | None:
        """The next analysed frame.

        Raises:
            InputError: if the camera stops delivering frames (unplugged).
        """
        for _ in range(self.stride):
            ok, bgr = self._cap.read()
            if not ok or bgr is None:
                raise InputError(f"camera {self.index}: no frame (unplugged or in use by another program)")
            self._count += 1
        n = self._count
        return Frame(f"{self.name}@{self._session}#{n}", self._cvt(bgr), None, str(n), {"frame_index": n})

    def close(self) -> None:
        """Release the camera."""
        self._cap.release()


def open_source(
    settings: SourceSettings, done: DoneCheck, once: bool = False, max_pixels: int = DEFAULT_MAX_PIXELS
) -> FrameSource:
    """Open the source a config describes.

    Args:
        settings: the ``[source]`` table.
        done: whether a frame's result was already reported (``done(source, key)``).
        once: for a folder, take what is there now and then report ``exhausted``.
        max_pixels: a folder's images larger than this are frame errors, never decoded.

    Raises:
        InputError: if the folder, video or camera cannot be opened.
    """
    if settings.kind is SourceKind.FOLDER:
        return WatchedFolder(settings.path, done, settings.poll_interval_s, settings.settle_s, once, max_pixels)
    if settings.kind is SourceKind.VIDEO:
        return VideoFile(settings.path, done, settings.stride)
    return Camera(settings.camera_index, settings.stride)
