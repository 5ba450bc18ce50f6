"""benchmarks/demo_detectors.py's table (the measuring itself needs the face build: run the script)."""

from __future__ import annotations

from benchmarks import demo_detectors


def _counts(found: int) -> dict:
    return {"annotated_faces": 47, "found": found, "named_correctly": found, "wrong_name": 0, "extra_detections": 0}


def test_the_table_has_a_row_per_detector_and_hog_and_says_why_the_pi_keeps_mtcnn():
    result = {
        "machine": "M",
        "ours": {"mtcnn": _counts(47), "blazeface-full": _counts(39), "blazeface-full-tiled": _counts(44)},
        "hog": {"images": 18, "annotated_faces": 47, "found": 45, "extra_detections": 2},
    }
    text = demo_detectors.markdown(result)
    assert "| blazeface-full-tiled | 47 | 44 | 44 | 0 | 0 |" in text
    assert "| dlib HOG, upsample 1 (face_recognition's; not named here) | 47 | 45 | | | 2 |" in text
    assert "(44 at best, MTCNN 47 of 47)" in text
    result["ours"]["blazeface-full"] = _counts(47)
    result["hog"] = None
    text = demo_detectors.markdown(result)
    assert "at best" not in text and "dlib HOG" not in text
