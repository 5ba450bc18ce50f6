"""The daemon's durable state: command nonces across restarts; frames done = receipts in the real outbox."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from edge.daemon.sources import receipt_key
from edge.daemon.state import StateStore
from edge.telemetry.outbox import Outbox

REPO = Path(__file__).resolve().parents[2]


def test_nonces_are_remembered_across_restarts(tmp_path: Path) -> None:
    state = StateStore(tmp_path / "s.db")
    now = time.time()
    assert state.claim_nonce("abc", now, keep_s=120)
    state.close()
    state = StateStore(tmp_path / "s.db")
    assert not state.claim_nonce("abc", now, keep_s=120)
    assert state.claim_nonce("old", now - 1000, keep_s=120)  # stored, pruned on the next claim
    assert state.claim_nonce("new", now, keep_s=120)
    assert state.claim_nonce("old", now - 1000, keep_s=120)  # forgotten: its ts is far outside the window


CHILD = textwrap.dedent(
    """
    import os, signal, sys, time
    from pathlib import Path
    sys.path.insert(0, {repo!r})
    from edge.telemetry.outbox import Outbox
    from edge.telemetry.schema import Result
    box = Outbox(Path({path!r}), "pi-a", commit_interval_s=10.0)
    box.add(Result(task="warm-up", data={{}}), wait=True)  # the next commit is 10 s away
    box.add(Result(task="face.identify", data={{"frame_id": "a.png"}}), key={receipt!r}, wait={wait})
    assert box.has_key({receipt!r})  # this process will not analyse it again
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def killed_after_reporting(path: Path, receipt: str, wait: bool) -> None:
    code = CHILD.format(repo=str(REPO), path=str(path), receipt=receipt, wait=wait)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr


def test_a_frame_is_done_exactly_when_its_result_is_committed(tmp_path: Path) -> None:
    """The two crash windows around the outbox commit: before it the frame repeats, after it it does not."""
    path = tmp_path / "outbox.sqlite"
    receipt = receipt_key("folder:/in", "a.png|10|99")
    killed_after_reporting(path, receipt, wait=False)  # SIGKILL while the result waits for its commit
    with Outbox(path, "pi-a") as box:
        assert not box.has_key(receipt) and box.last_seq == 1  # to be analysed again after the restart
    killed_after_reporting(path, receipt, wait=True)  # SIGKILL right after the commit
    with Outbox(path, "pi-a") as box:
        assert box.has_key(receipt) and box.last_seq == 3  # done (seq 2 was the warm-up): not analysed again
        assert [r.seq for r in box.pending()] == [1, 2, 3]


def test_receipt_keys_are_unambiguous() -> None:
    assert receipt_key("folder:/a|b", "c") != receipt_key("folder:/a", "b|c")
    assert receipt_key("video:/v.mp4", "3@v.mp4|1|2") == '["video:/v.mp4", "3@v.mp4|1|2"]'
