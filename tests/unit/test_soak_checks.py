"""benchmarks/soak.py's verdict on sampled fds: sockets follow the flaps, the other fds must stay flat.

CI once failed a clean run: the early part of the run had caught only one of the two MQTT links connected
(12 fds) and the late part both (15). Sockets are now bounded, not compared across the run.
"""

from __future__ import annotations

from benchmarks.soak import SOCKETS_CONNECTED, Sample, SoakResult


def _run(sockets: list[int], files: list[int]) -> SoakResult:
    result = SoakResult(frames=len(sockets), seconds=float(len(sockets)), flaps=3, daemon_rc=0)
    result.samples = [
        Sample(float(t), t, 150_000, f, s, 6) for t, (s, f) in enumerate(zip(sockets, files, strict=True))
    ]
    return result


def test_sockets_that_follow_the_flaps_are_not_a_leak() -> None:
    sockets = [6, 3, 0, 3, 3, 0, 0, 3, 3, 0, 3, 6, 0, 6, 6, 3, 0, 6, 3, 0] * 5  # early peak 3 or 6, late 6
    sockets[20:60] = [x if x < 6 else 3 for x in sockets[20:60]]  # early part after warm-up never both links
    assert _run(sockets, [9] * len(sockets)).problems() == []


def test_a_socket_leaked_per_reconnect_is_caught() -> None:
    sockets = [min(6, 3 * (t % 3)) + t // 40 for t in range(100)]  # one more socket every 40 samples
    problems = _run(sockets, [9] * 100).problems()
    assert problems == [f"8 sockets open at once; a daemon with both links up holds {SOCKETS_CONNECTED}"]


def test_files_left_open_are_caught_and_a_passing_listing_is_not() -> None:
    passing = [9] * 100
    passing[30], passing[80] = 10, 11  # the folder listing and an image caught open
    assert _run([3] * 100, passing).problems() == []
    leaking = [9 + t // 10 for t in range(100)]
    assert _run([3] * 100, leaking).problems() == [
        "fds peaked at 14 early after warm-up and at 18 later; expected flat"
    ]
