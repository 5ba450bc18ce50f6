"""benchmarks/frame_speed.py's verdict on each profile's default folder (the race itself needs the face builds)."""

from __future__ import annotations

from benchmarks import frame_speed


def _row(name: str, total_ms: float) -> dict:
    return {"contender": name, "threads": 1, "photos": {}, "total_ms": total_ms, "faces": 0}


def test_each_profile_default_is_judged_on_speed_and_on_faces_missed():
    ref = _row("face_recognition (dlib)", 1000.0)
    fast, slow = _row("default of rpi4 (INT8, x)", 80.0), _row("default of rpi5 (INT8, y)", 200.0)
    plain = _row("ours fp32", 50.0)
    quality = {
        fast["contender"]: {"faces_missed_by_ours": 1, "faces_missed_by_reference": 2},
        slow["contender"]: {"faces_missed_by_ours": 3, "faces_missed_by_reference": 2},
    }
    assert frame_speed.default_goal_lines([fast, slow, plain], ref, quality) == [
        "Goal (issue #46), the default of rpi4 (INT8, x): 12.50× face_recognition (met), evaluation faces missed 1 "
        "vs face_recognition's 2 (met).",
        "Goal (issue #46), the default of rpi5 (INT8, y): 5.00× face_recognition (**not met**), evaluation faces "
        "missed 3 vs face_recognition's 2 (**not met**).",
    ]
    assert frame_speed.default_goal_lines([fast], ref, None) == [
        "Goal (issue #46), the default of rpi4 (INT8, x): 12.50× face_recognition (met)."
    ]


def test_the_pi_profiles_race_by_default():
    from benchmarks.harness.profile_defaults import pi_profiles

    assert set(pi_profiles()) == {"rpi4", "rpi5", "rpi-zero-2w", "aarch64-generic"}
