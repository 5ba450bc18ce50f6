"""edge.face.track on the converted fp32 face folder: faces followed between detector frames of a camera-like clip
stay with the faces the detector finds on those same frames (keeping their descriptors while their chips do not
change), and a cut to another photo is detected at once."""

from __future__ import annotations

import numpy as np
import pytest

from converters.face.boxes import iou
from converters.face.facedata import EVAL_PHOTOS, camera_clip
from edge.errors import InputError
from edge.face.models import open_face_pipeline
from edge.face.pipeline import FacePipeline
from edge.face.track import FaceTracker

pytestmark = pytest.mark.integration

HOLD = 6  # frames of each photo: the cut to the next one falls on a frame the tracker would follow


@pytest.fixture(scope="module")
def clip() -> list[np.ndarray]:
    """astronaut (one face), then t1 (six), each filmed for ``HOLD`` frames by ``camera_clip``."""
    photos = {p.name: p for p in EVAL_PHOTOS}
    return camera_clip(photos["astronaut"].load(), HOLD) + camera_clip(photos["t1"].load(), HOLD)


@pytest.fixture(scope="module")
def pipeline(face_fp32_models):
    with open_face_pipeline(face_fp32_models, threads=1) as pipeline:
        yield pipeline


def _followed_distances(tracker: FaceTracker, pipeline, clip) -> tuple[list[bool], list[float]]:
    """The clip through ``tracker``: whether each frame was followed, and each followed face's descriptor
    distance to the face the pipeline detects on that frame (which it must be, by its box)."""
    followed, distances = [], []
    for rgb in clip:
        got, want = tracker.analyze(rgb), pipeline.analyze(rgb)
        followed.append(tracker.last_followed)
        assert len(got) == len(want)
        for face in got:
            nearest = max(want, key=lambda w: iou(w.detection.box, face.detection.box))
            assert iou(nearest.detection.box, face.detection.box) > 0.7
            if tracker.last_followed:
                distances.append(float(np.linalg.norm(nearest.descriptor - face.descriptor)))
    return followed, distances


@pytest.fixture(scope="module")
def jitter(pipeline, clip) -> list[float]:
    """Descriptor distances of each face detected on two consecutive frames of one photo's clip."""
    faces = [pipeline.analyze(rgb) for rgb in clip]
    out = []
    for i in range(1, len(clip)):
        if i % HOLD:  # not the first frame of a photo
            for f in faces[i]:
                before = max(faces[i - 1], key=lambda w: iou(w.detection.box, f.detection.box))
                out.append(float(np.linalg.norm(before.descriptor - f.descriptor)))
    return out


# frame 6 is t1's first: following the astronaut's box there loses the face, so the detector runs at once
FOLLOWED = [False, True, True, True, False, True, False, True, True, True, False, True]


def test_followed_faces_keep_their_descriptors_and_stay_with_the_detected_faces(pipeline, clip, jitter):
    tracker = FaceTracker(pipeline, detect_every=4)
    followed, distances = _followed_distances(tracker, pipeline, clip)
    assert followed == FOLLOWED
    assert (tracker.frames, tracker.detector_frames) == (12, 4)
    # the camera's motion is aligned out of the chips: every followed face kept its detector frame's descriptor,
    # which is as far from the face detected on the followed frame as two detected frames are from each other
    assert tracker.followed_faces == len(distances) == 1 * 4 + 6 * 4
    assert tracker.kept_descriptors == tracker.followed_faces
    # on the detector's frames 4 and 10 the faces found where faces were followed kept their descriptors too (no
    # embedder run); the cut to t1 on frame 6 found no face where the astronaut's was
    assert (tracker.redetected_faces, tracker.redetected_kept) == (1 + 6, 1 + 6)
    assert max(distances) <= max(jitter) + 1e-6 < 0.3, (distances, jitter)
    assert np.median(distances) <= 1.1 * np.median(jitter), (distances, jitter)


def test_with_nothing_kept_every_followed_face_is_described_again(pipeline, clip):
    tracker = FaceTracker(pipeline, detect_every=4, keep_descriptor_within=0)
    followed, distances = _followed_distances(tracker, pipeline, clip)
    assert followed == FOLLOWED
    assert tracker.followed_faces == 28 and tracker.kept_descriptors == 0
    assert tracker.redetected_faces == 7 and tracker.redetected_kept == 0  # found again: described again too
    # described on its own frame, a followed face is closer still to the detected one
    assert max(distances) < 0.3 and np.median(distances) < 0.1, distances


def test_detect_every_1_gives_the_pipeline_s_own_faces(pipeline, clip):
    tracker = FaceTracker(pipeline, detect_every=1)
    for rgb in clip[:3]:
        got, want = tracker.analyze(rgb), pipeline.analyze(rgb)
        assert [f.detection.box for f in got] == [f.detection.box for f in want]
        assert all(np.array_equal(g.descriptor, w.descriptor) for g, w in zip(got, want, strict=True))
        assert not tracker.last_followed
    assert tracker.detector_frames == 3


def test_reset_runs_the_detector_on_the_next_frame(pipeline, clip):
    tracker = FaceTracker(pipeline, detect_every=8)
    tracker.analyze(clip[0])
    tracker.analyze(clip[1])
    assert tracker.last_followed
    tracker.reset()
    tracker.analyze(clip[2])
    assert not tracker.last_followed and tracker.detector_frames == 2


def test_following_needs_the_shape_predictor_and_a_frame_count(pipeline):
    bare = FacePipeline(pipeline.detector, pipeline.embedder)
    with pytest.raises(InputError) as err:
        FaceTracker(bare, detect_every=4)
    assert str(err.value) == (
        "detect_every = 4: following faces between detector frames needs the pipeline's shape predictor (dlib's "
        "5-point model); this pipeline aligns from the detector's landmarks"
    )
    assert FaceTracker(bare, detect_every=1).detect_every == 1
    with pytest.raises(InputError) as err:
        FaceTracker(pipeline, detect_every=0)
    assert str(err.value) == (
        "detect_every = 0; expected a whole number of frames from 1 (the detector on every frame) to 1000"
    )
    with pytest.raises(InputError) as err:
        FaceTracker(pipeline, detect_every=4, lost_distance=float("nan"))
    assert str(err.value) == "lost_distance = nan; expected a positive descriptor distance"
    for bad in (-1.0, 256.0, float("nan")):
        with pytest.raises(InputError) as err:
            FaceTracker(pipeline, detect_every=4, keep_descriptor_within=bad)
        assert str(err.value) == (
            f"keep_descriptor_within = {bad!r}; expected grey levels from 0 (describe every followed face) to 255"
        )


def test_a_tiling_detector_runs_its_tiles_on_one_detector_frame_in_tiles_every(face_fp32_models, tmp_path):
    """BlazeFace tiled on t1's clip (six people; the whole-frame pass alone finds fewer): between detector frames with
    the tiles, the whole-frame pass finds the large faces again and the small ones are followed on, so every frame
    reports every face the tiled detector finds there."""
    import shutil

    from converters.face.blazeface import FULL_RANGE, add_blazeface
    from edge.face.track import TILES_EVERY

    folder = tmp_path / "face"
    shutil.copytree(face_fp32_models, folder)
    add_blazeface(folder, FULL_RANGE)
    t1 = camera_clip({p.name: p for p in EVAL_PHOTOS}["t1"].load(), 2 * TILES_EVERY + 1)
    with open_face_pipeline(folder, threads=1, detector="blazeface-full-tiled") as tiled:
        assert len(tiled.detector.detect(t1[0], tiled=False)) < len(tiled.detections(t1[0])) == 6
        tracker = FaceTracker(tiled, detect_every=2)
        for rgb in t1:
            got, want = tracker.analyze(rgb), tiled.analyze(rgb)
            for face in want:  # the tiled detector itself misses a face on some frames (a score near its cut)
                assert max(iou(g.detection.box, face.detection.box) for g in got) > 0.7
    # detector frames 0 (no face followed yet) and 8 with the tiles; 2, 4 and 6 the whole-frame pass alone
    assert (tracker.detector_frames, tracker.untiled_frames) == (5, TILES_EVERY - 1)
    assert tracker.redetected_kept == tracker.redetected_faces > 0
