"""benchmarks/face_track.py without models: a followed run compared with the every-frame run, on made-up faces."""

from __future__ import annotations

import numpy as np

from benchmarks import face_track
from edge.face.gallery import Gallery
from edge.face.pipeline import Face
from edge.face.types import Detection


def _face(x: float, descriptor) -> Face:
    return Face(
        Detection((x, 0.0, x + 50.0, 50.0), 0.9, np.zeros((5, 2), np.float32)), np.asarray(descriptor, np.float32)
    )


def test_a_followed_run_is_compared_face_by_face_with_the_every_frame_run():
    gallery = Gallery(2)
    gallery.add("ann", np.array([[1.0, 0.0]], np.float32))
    gallery.add("bob", np.array([[0.0, 1.0]], np.float32))
    reference = [
        ([_face(0, [1.0, 0.0]), _face(100, [0.0, 1.0])], False),
        ([_face(2, [1.0, 0.0]), _face(102, [0.0, 1.0])], False),
        ([_face(4, [0.95, 0.0])], False),  # the detector lost bob on this frame
    ]
    run = [
        reference[0],
        ([_face(3, [0.9, 0.1]), _face(101, [0.0, 0.7])], True),  # bob's descriptor moved past the threshold
        ([_face(5, [1.0, 0.0]), _face(103, [0.0, 1.0])], True),  # followed bob stays
    ]
    got = face_track.compare(run, reference, gallery, 0.25)
    assert {k: got[k] for k in ("reported", "missed", "extra", "matched", "same_name", "followed_faces")} == {
        "reported": 6, "missed": 0, "extra": 1, "matched": 5, "same_name": 4, "followed_faces": 3
    }  # fmt: skip
    np.testing.assert_allclose(got["distance"][2], 0.3)
    assert face_track.jitter(reference, ["a", "a", "b"]) == [0.0, 0.0]


def test_a_run_is_counted_against_the_annotated_faces():
    reported = [[_face(0, [1.0, 0.0]).detection.box, _face(300, [0.0, 1.0]).detection.box], []]
    truth = [[(5.0, 5.0, 55.0, 55.0), (100.0, 0.0, 150.0, 50.0)], [(0.0, 0.0, 50.0, 50.0)]]
    assert face_track.against_truth(reported, truth) == {"found": 1, "missed_truth": 2, "false": 1, "annotated": 3}


def test_each_lighting_change_moves_a_chip_by_the_level_asked():
    from edge.face.track import chip_change

    rng = np.random.default_rng(3)
    chip = rng.integers(40, 216, (150, 150, 3), dtype=np.uint8)  # away from 0 and 255: nothing clipped
    changed = face_track.relit(chip, 10.0)
    assert list(changed) == list(face_track.RELIGHTS)
    for name, c in changed.items():
        assert c.dtype == np.uint8 and c.shape == chip.shape
        assert 9.5 <= chip_change(chip, c) <= 10.5, name
    assert (changed["brighter"].astype(int) - chip == 10).all()
    ramp = changed["light from one side"].astype(int) - chip
    assert (ramp[:, 0] == -20).all() and (ramp[:, -1] == 20).all()


def test_a_lighting_change_is_said_with_its_farthest_move():
    light = {name: {"change_min": 9.5, "change_max": 10.0, "distance_max": d}
             for name, d in zip(face_track.RELIGHTS, (0.05, 0.04, 0.09, 0.08), strict=True)}  # fmt: skip
    text = face_track.lighting_text({"keep": 10.0, "lighting": light})
    assert "(10 grey levels, `face_track.relit`) moves a descriptor by at most 0.090" in text
    assert text.endswith("light from one side 0.080 (chip change 9.5-10.0)")
    assert face_track.lighting_text({"keep": 10.0}) == ""
