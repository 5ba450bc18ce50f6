"""The daemon's durable state: crash recovery in both windows, video positions, nonces across restarts."""

from __future__ import annotations

from pathlib import Path

from edge.daemon.state import Recovered, StateStore


def test_crash_before_the_result_was_stored_means_process_again(tmp_path: Path) -> None:
    state = StateStore(tmp_path / "s.db")
    state.begin("folder:x", "a.png|1|2", "a.png", last_seq=7)
    state.close()  # the "crash": the outbox never got seq 8
    state = StateStore(tmp_path / "s.db")
    assert state.recover(outbox_last_seq=7) == [Recovered("folder:x", "a.png", stored=False)]
    assert not state.is_done("folder:x", "a.png|1|2")
    assert state.recover(outbox_last_seq=7) == []


def test_crash_after_the_result_was_stored_means_done_without_repeating(tmp_path: Path) -> None:
    state = StateStore(tmp_path / "s.db")
    state.begin("folder:x", "a.png|1|2", "a.png", last_seq=7)
    state.close()  # the "crash": seq 8 (our result) is in the outbox, the frame not yet marked
    state = StateStore(tmp_path / "s.db")
    assert state.recover(outbox_last_seq=8) == [Recovered("folder:x", "a.png", stored=True)]
    assert state.is_done("folder:x", "a.png|1|2")
    assert state.done_count("folder:x") == 1


def test_video_positions_survive_and_a_changed_video_starts_over(tmp_path: Path) -> None:
    state = StateStore(tmp_path / "s.db")
    assert state.start_position("video:v", "v.avi|100|1") == 0
    state.finish("video:v", "0", "v.avi#0", 1, identity="v.avi|100|1")
    state.begin("video:v", "2", "v.avi#2", last_seq=1, position=2)
    state.close()
    state = StateStore(tmp_path / "s.db")
    assert state.recover(outbox_last_seq=2) == [Recovered("video:v", "v.avi#2", stored=True)]
    assert state.start_position("video:v", "v.avi|100|1") == 3
    assert state.start_position("video:v", "v.avi|999|5") == 0  # replaced file
    assert state.done_count("video:v") == 0


def test_nonces_are_remembered_across_restarts(tmp_path: Path) -> None:
    import time

    state = StateStore(tmp_path / "s.db")
    now = time.time()
    assert state.claim_nonce("abc", now, keep_s=120)
    state.close()
    state = StateStore(tmp_path / "s.db")
    assert not state.claim_nonce("abc", now, keep_s=120)
    assert state.claim_nonce("old", now - 1000, keep_s=120)  # stored, pruned on the next claim
    assert state.claim_nonce("new", now, keep_s=120)
    assert state.claim_nonce("old", now - 1000, keep_s=120)  # forgotten: its ts is far outside the window


def test_recovery_against_the_real_outbox(tmp_path: Path) -> None:
    """The crash windows around a real outbox commit: before it the frame repeats, after it it does not."""
    from edge.telemetry.outbox import Outbox
    from edge.telemetry.schema import Result

    def restart() -> tuple[Outbox, StateStore]:
        return Outbox(tmp_path / "outbox.sqlite", "pi-a"), StateStore(tmp_path / "s.db")

    outbox, state = restart()
    state.begin("folder:x", "a", "a.png", outbox.last_seq)  # killed here: nothing stored
    outbox.close()
    state.close()
    outbox, state = restart()
    assert state.recover(outbox.last_seq) == [Recovered("folder:x", "a.png", stored=False)]
    assert not state.is_done("folder:x", "a")
    state.begin("folder:x", "a", "a.png", outbox.last_seq)
    stored = outbox.add(Result(task="face.identify", data={"frame_id": "a.png"}))  # killed here: stored
    outbox.close()
    state.close()
    outbox, state = restart()
    assert state.recover(outbox.last_seq) == [Recovered("folder:x", "a.png", stored=True)]
    assert state.is_done("folder:x", "a")
    assert stored.seq == outbox.last_seq == 1
