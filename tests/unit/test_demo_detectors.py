"""benchmarks/demo_detectors.py's table (the measuring itself needs the face build: run the script)."""

from __future__ import annotations

from benchmarks import demo_detectors


def _counts(found: int, wrong: int = 0) -> dict:
    return {
        "annotated_faces": 47,
        "found": found,
        "named_correctly": found - wrong,
        "wrong_name": wrong,
        "extra_detections": 0,
    }


def test_the_table_has_a_row_per_detector_and_hog_and_judges_the_profile_s_default():
    result = {
        "machine": "M",
        "default": "blazeface-full-tiled",
        "ours": {"mtcnn": _counts(47), "blazeface-full": _counts(39), "blazeface-full-tiled": _counts(47)},
        "hog": {"images": 18, "annotated_faces": 47, "found": 45, "extra_detections": 2},
    }
    text = demo_detectors.markdown(result)
    assert "| blazeface-full-tiled | 47 | 47 | 47 | 0 | 0 |" in text
    assert "| dlib HOG, upsample 1 (face_recognition's; not named here) | 47 | 45 | | | 2 |" in text
    assert (
        'rpi4\'s default detector (`runtime.face_detector = "blazeface-full-tiled"`) finds 47 of the 47 faces, '
        "face_recognition's 45, and names 0 wrong: the demo's check passes on it"
    ) in text
    result["ours"]["blazeface-full-tiled"] = _counts(44)
    assert "finds 44 of the 47 faces, face_recognition's 45, and names 0 wrong: the demo's check **fails**" in (
        demo_detectors.markdown(result)
    )
    result["ours"]["blazeface-full-tiled"] = _counts(47, wrong=1)
    assert "names 1 wrong: the demo's check **fails**" in demo_detectors.markdown(result)
