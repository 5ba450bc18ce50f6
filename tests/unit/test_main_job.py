"""The main job's pieces that need no models: its summary, and telemetry kept in the outbox with no broker."""

from __future__ import annotations

import sqlite3

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
