"""The main job's pieces that need no models: its summary, and telemetry kept in the outbox with no broker."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from converters.demo.pi import PiRun, _report_latency
from edge.profiles import load_profile


def _run() -> PiRun:
    run = PiRun("dist/rpi4-face", "dist/rpi4-face.tar.gz", 43, {"face": True, "wheels": False})
    run.cpu = "cortex-a72"
    run.comparison = {
        "photos": 4,
        "faces_host": 5,
        "faces_guest": 5,
        "descriptor_max_abs_diff": 2.5e-7,
        "pairs": 10,
        "decisions_agree": 10,
    }
    run.latency_ms = [900.0, 400.0, 500.0, 600.0]
    return run


def test_without_a_broker_the_report_waits_in_the_outbox(tmp_path):
    run = _run()
    outbox = tmp_path / "outbox.db"
    t = _report_latency(load_profile("rpi4"), run, outbox, None, lambda _m: None)
    assert t == {
        "device_id": "demo-emulated-rpi4",
        "seq": 1,
        "broker": None,
        "delivered": False,
        "pending": 1,
        "outbox": str(outbox),
    }
    with sqlite3.connect(outbox) as db:
        tables = [r[0] for r in db.execute("select name from sqlite_master where type='table'")]
        assert tables
    # A second run numbers on from the first: nothing is overwritten while it waits.
    assert _report_latency(load_profile("rpi4"), run, outbox, None, lambda _m: None)["seq"] == 2


def test_summary_names_bundle_emulation_and_where_telemetry_went(tmp_path):
    run = _run()
    run.telemetry = _report_latency(load_profile("rpi4"), run, tmp_path / "o.db", None, lambda _m: None)
    text = run.summary()
    assert "bundle: dist/rpi4-face (43 files verified; face: cached, wheels: built)" in text
    assert "emulated Pi (cortex-a72): 5 faces in 4 photos as on the host" in text
    assert "10 of 10 same/different decisions equal" in text
    assert "median 550 ms, max 900 ms" in text
    assert f"kept in the outbox {tmp_path / 'o.db'} (1 pending)" in text


def _demo(found: int, wrong: int = 0, reference_found: int = 45):
    from converters.demo.host import DemoResult

    faces = [
        {"name": "p", "expected": "p" if i >= wrong else "q", "held_out": False, "correct": i >= wrong}
        for i in range(found)
    ]
    faces.append({"name": None, "expected": None, "held_out": False, "correct": True})  # not a face
    result = DemoResult(Path("out/demo"), Path("out/demo/models"), "", {"p": 1}, "blazeface-full-tiled")
    result.images = [{"image": "a.jpg", "annotated": 47, "faces": faces}]
    result.reference = {"images": 1, "annotated_faces": 47, "found": reference_found, "extra_detections": 2}
    return result


def test_the_demo_passes_when_no_face_is_named_wrong_and_it_finds_as_many_as_face_recognition():
    result = _demo(45)
    assert result.passed and result.to_dict()["checks"] == {
        "no_wrong_name": True,
        "found_at_least_face_recognition": True,
    }
    assert result.verdict_lines() == [
        "faces found: 45 of 47 annotated in 1 images (blazeface-full-tiled; extra detections 1)",
        "  face_recognition's detector (dlib HOG, upsample 1) on the same images: 45 (extra detections 2)",
        "faces named: 45 of 45 found correctly, 0 wrong (t1_person6 as unknown)",
        "PASSED: every found face named right, and no fewer found than face_recognition",
    ]
    assert result.to_dict()["face_recognition"]["found"] == 45


def test_the_demo_fails_on_a_wrong_name_or_fewer_faces_than_face_recognition():
    fewer = _demo(44)
    assert not fewer.passed
    assert fewer.verdict_lines()[-1] == "FAILED: fewer faces found than face_recognition (44 < 45)"
    wrong = _demo(47, wrong=1)
    assert not wrong.passed and wrong.verdict_lines()[-1] == "FAILED: 1 found face(s) named wrong"
    unmeasured = _demo(47)
    unmeasured.reference = None
    assert not unmeasured.passed and unmeasured.verdict_lines()[-1] == "FAILED: face_recognition's count not measured"
