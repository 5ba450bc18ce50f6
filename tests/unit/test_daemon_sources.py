"""Frame sources: a watched folder and a video file, remembered across restarts through outbox receipts."""

from __future__ import annotations

import os
import time
from pathlib import Path

import cv2
import numpy as np
import pytest

from edge.daemon.sources import VideoFile, WatchedFolder, receipt_key
from edge.errors import InputError
from edge.telemetry.outbox import Outbox
from edge.telemetry.schema import Result


class Ledger:
    """What the daemon does: a frame is done once its result is reported with the frame's receipt."""

    def __init__(self, path: Path) -> None:
        self.outbox = Outbox(path, "pi-test")

    def done(self, source: str, key: str) -> bool:
        return self.outbox.has_key(receipt_key(source, key))

    def report(self, frame) -> None:
        self.outbox.add(
            Result(task="face.identify", data={"frame_id": frame.frame_id}), key=receipt_key(frame.source, frame.key)
        )


def image(path: Path, value: int, mtime: float) -> None:
    cv2.imwrite(str(path), np.full((8, 8, 3), value, np.uint8))
    os.utime(path, (mtime, mtime))


def drain(source) -> list:
    frames = []
    for _ in range(100):
        frame = source.next_frame()
        if frame is None:
            break
        frames.append(frame)
    return frames


def test_folder_in_arrival_order_skipping_hidden_and_other_files(tmp_path: Path) -> None:
    watched = tmp_path / "in"
    watched.mkdir()
    old = time.time() - 100
    image(watched / "b.png", 10, old)
    image(watched / "a.png", 20, old + 1)
    image(watched / ".partial.png", 30, old)
    (watched / "notes.txt").write_text("x")
    (watched / "broken.jpg").write_bytes(b"not a jpeg")
    os.utime(watched / "broken.jpg", (old + 2, old + 2))
    image(watched / "fresh.png", 40, time.time() + 5)  # still being written: too young
    ledger = Ledger(tmp_path / "o.db")
    source = WatchedFolder(watched, ledger.done, poll_interval_s=0.01, settle_s=3.0)
    frames = drain(source)
    assert [f.frame_id for f in frames] == ["b.png", "a.png", "broken.jpg"]
    assert int(frames[0].rgb[0, 0, 0]) == 10 and frames[0].rgb.shape == (8, 8, 3)
    assert (
        frames[2].rgb is None
        and frames[2].error
        == f"{watched / 'broken.jpg'}: not an image (10 bytes with no JPEG, PNG, BMP, WebP signature)"
    )
    assert source.ignored == {"notes.txt"}
    for f in frames[:2]:  # 'broken.jpg' never reported: a crash before reporting repeats it
        ledger.report(f)
    time.sleep(0.02)
    again = WatchedFolder(watched, ledger.done, poll_interval_s=0.01, settle_s=3.0)
    assert [f.frame_id for f in drain(again)] == ["broken.jpg"]


def test_a_replaced_file_is_a_new_frame(tmp_path: Path) -> None:
    watched = tmp_path / "in"
    watched.mkdir()
    image(watched / "a.png", 1, time.time() - 50)
    ledger = Ledger(tmp_path / "o.db")
    (frame,) = drain(WatchedFolder(watched, ledger.done, 0.01, 0.0, once=True))
    ledger.report(frame)
    image(watched / "a.png", 2, time.time() - 40)
    source = WatchedFolder(watched, ledger.done, 0.01, 0.0, once=True)
    (new,) = drain(source)
    assert new.key != frame.key and int(new.rgb[0, 0, 0]) == 2
    assert drain(source) == [] and source.exhausted


def test_hostile_files_are_frame_errors_and_reported_once(tmp_path: Path) -> None:
    """Issue 17, defect 2: a 40000x40000 PNG (cv2.error escaped) and a file name that is not UTF-8
    (UnicodeEncodeError in the outbox) crashed the daemon at every start. Now each is one frame error,
    stored with its receipt, and not taken again after a restart."""
    from tests.hostile_files import zero_png

    watched = tmp_path / "in"
    watched.mkdir()
    zero_png(watched / "huge.png", 40000, 40000)
    bad_name = os.fsencode(watched) + b"/caf\xe9-\xff.png"
    with open(bad_name, "wb") as fh:
        fh.write(cv2.imencode(".png", np.full((8, 8, 3), 7, np.uint8))[1].tobytes())
    past = time.time() - 100
    os.utime(watched / "huge.png", (past, past))
    os.utime(bad_name, (past + 1, past + 1))
    ledger = Ledger(tmp_path / "o.db")
    frames = drain(WatchedFolder(watched, ledger.done, 0.01, 0.0, once=True))
    assert [f.frame_id for f in frames] == ["huge.png", "caf\\xe9-\\xff.png"]
    assert frames[0].rgb is None and "PNG image of 40000x40000 = 1600.0 megapixels" in frames[0].error
    assert frames[1].rgb is not None and frames[1].meta == {"file": "caf\\xe9-\\xff.png"}
    for frame in frames:
        ledger.report(frame)
    ledger.outbox.close()
    ledger = Ledger(tmp_path / "o.db")
    assert [r.seq for r in ledger.outbox.pending()] == [1, 2]
    assert drain(WatchedFolder(watched, ledger.done, 0.01, 0.0, once=True)) == []
    ledger.outbox.close()


def test_video_stride_and_resume(tmp_path: Path) -> None:
    path = tmp_path / "v.avi"
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 10.0, (32, 32))
    for i in range(7):
        writer.write(np.full((32, 32, 3), i * 30, np.uint8))
    writer.release()
    ledger = Ledger(tmp_path / "o.db")
    video = VideoFile(path, ledger.done, stride=3)
    first = video.next_frame()
    assert (first.frame_id, first.meta) == ("v.avi#0", {"file": "v.avi", "frame_index": 0, "time_s": 0.0})
    ledger.report(first)
    video.next_frame()  # frame 3 handed out, never reported (killed while analysing it)
    video.close()
    resumed = VideoFile(path, ledger.done, stride=3)
    rest = drain(resumed)
    assert [f.frame_id for f in rest] == ["v.avi#3", "v.avi#6"]
    assert abs(int(rest[0].rgb[0, 0, 0]) - 90) <= 3  # MJPG is lossy
    assert resumed.exhausted
    for f in rest:
        ledger.report(f)
    os.utime(path, (time.time(), time.time()))  # a replaced video (new identity) starts over
    assert [f.frame_id for f in drain(VideoFile(path, ledger.done, stride=3))] == ["v.avi#0", "v.avi#3", "v.avi#6"]


def test_a_file_that_is_not_a_video(tmp_path: Path) -> None:
    path = tmp_path / "v.avi"
    path.write_bytes(b"nothing")
    with pytest.raises(InputError) as info:
        VideoFile(path, lambda source, key: False)
    assert str(info.value) == f"{path}: OpenCV cannot open it as a video; expected e.g. an MP4 or AVI file"


def test_a_camera_that_is_not_there(tmp_path: Path) -> None:
    from edge.daemon.sources import Camera

    index = 97  # no such /dev/video97 on a test machine
    assert not Path(f"/dev/video{index}").exists()
    with pytest.raises(InputError) as info:
        Camera(index)
    assert str(info.value) == f"source.camera_index = {index}: OpenCV cannot open /dev/video{index}"
