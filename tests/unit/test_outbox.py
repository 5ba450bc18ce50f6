"""The durable outbox: numbering, bounds, acknowledgement and surviving SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from edge.errors import TelemetryError
from edge.telemetry.outbox import Outbox
from edge.telemetry.schema import DeviceState, MessageKind, Result, Status, Telemetry, from_json

REPO = Path(__file__).resolve().parents[2]


def tele(p50: float = 10.0) -> Telemetry:
    return Telemetry(latency_p50_ms=p50, latency_p90_ms=20.0, fps=30.0)


def test_add_allocates_seq_and_fills_envelope(tmp_path: Path) -> None:
    with Outbox(tmp_path / "o.db", "pi-1") as box:
        first = box.add(tele())
        second = box.add(Result(task="face.identify", data={"n": 2}, timestamp=123.0), wait=True)
        assert (first.device_id, first.seq, second.seq) == ("pi-1", 1, 2)
        assert first.timestamp > 1_600_000_000
        assert second.timestamp == 123.0
        rows = box.pending()
        assert [(r.seq, r.kind) for r in rows] == [(1, MessageKind.TELEMETRY), (2, MessageKind.RESULT)]
        assert from_json(rows[1].payload) == second
        assert box.count() == 2
        assert box.last_seq == 2


def test_numbering_continues_after_reopen_and_ack_removes(tmp_path: Path) -> None:
    with Outbox(tmp_path / "o.db", "pi-1") as box:
        for _ in range(5):
            box.add(tele())
        box.flush()
        box.remove([1, 2, 99])
        assert [r.seq for r in box.pending()] == [3, 4, 5]
        assert [r.seq for r in box.pending(after=3, limit=1)] == [4]
    with Outbox(tmp_path / "o.db", "pi-1") as box:
        assert box.add(tele(), wait=True).seq == 6
        assert [r.seq for r in box.pending()] == [3, 4, 5, 6]


def test_full_outbox_drops_oldest_and_counts(tmp_path: Path) -> None:
    with Outbox(tmp_path / "o.db", "pi-1", capacity=10) as box:
        for i in range(15):
            box.add(tele(p50=float(i)))
        box.flush()
        assert [r.seq for r in box.pending()] == list(range(6, 16))
        assert box.dropped == 5
        assert box.count() == 10
    with Outbox(tmp_path / "o.db", "pi-1", capacity=10) as box:
        assert box.dropped == 5
        box.add(tele(), wait=True)
        assert box.dropped == 6
        assert box.pending()[0].seq == 7


def test_refusals_name_what_is_wrong(tmp_path: Path) -> None:
    with Outbox(tmp_path / "o.db", "pi-1") as box:
        with pytest.raises(TelemetryError) as info:
            box.add(Status(state=DeviceState.ONLINE))
        assert str(info.value) == "status messages are not queued in the outbox; the client publishes them"
        with pytest.raises(TelemetryError) as info:
            box.add(Telemetry(device_id="pi-2", latency_p50_ms=1, latency_p90_ms=1, fps=1))
        assert str(info.value) == "telemetry message names device_id 'pi-2'; this outbox is for 'pi-1'"
        with pytest.raises(TelemetryError) as info:
            box.add(Telemetry(latency_p50_ms=float("nan"), latency_p90_ms=1, fps=1))
        assert (
            str(info.value) == "telemetry message from 'pi-1': field 'latency_p50_ms' = nan; expected a finite number"
        )
        assert box.last_seq == 0  # a refused report allocates no number
    with pytest.raises(TelemetryError) as info:
        Outbox(tmp_path / "o.db", "pi-2")
    assert str(info.value) == (
        f"outbox {tmp_path / 'o.db'} belongs to device_id 'pi-1', not 'pi-2'; use one outbox file per device"
    )
    with pytest.raises(TelemetryError) as info:
        Outbox(tmp_path / "x.db", "pi-1", capacity=0)
    assert str(info.value) == "outbox capacity = 0; expected an integer >= 1"
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database at all, just some text that is long enough" * 20)
    with pytest.raises(TelemetryError) as info:
        Outbox(junk, "pi-1")
    assert str(info.value) == f"outbox {junk}: cannot open as an SQLite database (file is not a database)"


CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    sys.path.insert(0, {repo!r})
    from edge.telemetry.outbox import Outbox
    from edge.telemetry.schema import Telemetry
    box = Outbox(Path({path!r}), "pi-k")
    while True:
        m = box.add(Telemetry(latency_p50_ms=1.0, latency_p90_ms=2.0, fps=3.0), wait=True)
        if m.seq % 3 == 0:
            box.remove([m.seq - 1])  # acknowledgements interleave with adds, as in the client
        print(m.seq, flush=True)
    """
)


def test_survives_sigkill_mid_write(tmp_path: Path) -> None:
    path = tmp_path / "k.db"
    code = CHILD.format(repo=str(REPO), path=str(path))
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    printed = []
    deadline = time.monotonic() + 30
    try:
        while len(printed) < 300 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line, "child exited early"
            printed.append(int(line))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert len(printed) == 300
    with Outbox(path, "pi-k") as box:
        last = box.last_seq
        assert last >= printed[-1]  # everything reported as stored is stored (maybe one more, unprinted)
        expected = [s for s in range(1, last + 1) if not (s % 3 == 2 and s + 1 <= last)]
        # Killed between storing `last` and removing `last - 1`: both states are consistent.
        allowed = [expected, sorted([*expected, last - 1])] if last % 3 == 0 else [expected]
        assert [r.seq for r in box.pending(limit=10_000)] in allowed
        assert box.add(tele()).seq == last + 1  # no number reused after the kill


def test_group_commit_writes_many_reports_in_one_transaction(tmp_path: Path) -> None:
    with Outbox(tmp_path / "o.db", "pi-1", commit_interval_s=2.0) as box:
        box.add(tele(), wait=True)  # the first commit happened; the next may not start for 2 s
        for _ in range(49):
            box.add(tele())
        # Queued, numbered, counted as pending, but not yet on disk nor visible to the link.
        assert (box.last_seq, box.stored_seq, box.count()) == (50, 1, 50)
        assert [r.seq for r in box.pending()] == [1]
        box.flush()  # a waiter cuts the pacing short
        assert box.stored_seq == 50
        assert [r.seq for r in box.pending(limit=100)] == list(range(1, 51))


def test_receipts_survive_reopen_and_travel_with_their_report(tmp_path: Path) -> None:
    with Outbox(tmp_path / "o.db", "pi-1", commit_interval_s=2.0) as box:
        box.add(tele(), key="folder:x|a.png", wait=True)
        box.add(tele(), key="folder:x|b.png")
        assert box.has_key("folder:x|a.png") and box.has_key("folder:x|b.png")  # b: queued in this process
        assert not box.has_key("folder:x|c.png")
        with pytest.raises(TelemetryError) as info:
            box.add(tele(), key="")
        assert str(info.value) == "outbox receipt key = ''; expected a non-empty string"
    with Outbox(tmp_path / "o.db", "pi-1") as box:  # close() committed b
        assert box.has_key("folder:x|a.png") and box.has_key("folder:x|b.png")
        box.remove([1, 2])  # acknowledged rows go; their receipts stay
        assert box.has_key("folder:x|a.png") and box.count() == 0


def test_a_failed_commit_is_reported_and_retried_without_losing_reports(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "o.db"
    with Outbox(path, "pi-1", commit_interval_s=0.0) as box:
        box.add(tele(), wait=True)
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("ALTER TABLE outbox RENAME TO outbox_away")  # every insert now fails
        queued = box.add(tele())
        with pytest.raises(TelemetryError) as info:
            box.wait_stored(queued.seq, timeout=5.0)
        assert str(info.value) == (
            f"outbox {path}: cannot store 1 reports (no such table: outbox); they are kept in memory and "
            "retried every 1 s"
        )
        with pytest.raises(TelemetryError):  # new reports are refused while the disk fails
            box.add(tele())
        other.execute("ALTER TABLE outbox_away RENAME TO outbox")
        other.close()
        box.wait_stored(queued.seq, timeout=10.0)  # the retry stored it
        assert [r.seq for r in box.pending()] == [1, 2]
        assert box.add(tele(), wait=True).seq == 3


KILLED_UNWAITED = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    sys.path.insert(0, {repo!r})
    from edge.telemetry.outbox import Outbox
    from edge.telemetry.schema import Telemetry
    box = Outbox(Path({path!r}), "pi-k", capacity=1_000_000, commit_interval_s=0.02)  # no overflow drops
    while True:
        m = box.add(Telemetry(latency_p50_ms=1.0, latency_p90_ms=2.0, fps=3.0), key=f"frame-{{box.last_seq + 1}}")
        print(m.seq, box.stored_seq, flush=True)
    """
)


def test_sigkill_loses_only_uncommitted_reports_and_leaves_no_gap(tmp_path: Path) -> None:
    path = tmp_path / "k.db"
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED_UNWAITED.format(repo=str(REPO), path=str(path))],
        stdout=subprocess.PIPE,
        text=True,
    )
    printed: list[tuple[int, int]] = []
    deadline = time.monotonic() + 30
    try:
        while (not printed or printed[-1][1] < 200) and time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line, "child exited early"
            printed.append(tuple(int(x) for x in line.split()))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    committed_before_kill = printed[-1][1]
    assert committed_before_kill >= 200
    with Outbox(path, "pi-k") as box:
        last = box.last_seq
        assert committed_before_kill <= last <= printed[-1][0]  # what was on disk stayed; queued ones may be lost
        assert [r.seq for r in box.pending(limit=100_000)] == list(range(1, last + 1))  # no gap
        assert all(box.has_key(f"frame-{s}") for s in (1, last)) and not box.has_key(f"frame-{last + 1}")
        assert box.add(tele()).seq == last + 1  # a lost number is taken again: nobody saw it


def test_a_result_whose_data_is_not_json_is_stored_as_an_error_under_its_number(tmp_path: Path) -> None:
    import numpy as np

    with Outbox(tmp_path / "o.db", "pi-1") as box:
        box.add(Result(task="face.identify", data={"distance": np.float32(0.5)}))  # serialised on the writer
        box.add(Result(task="face.identify", data={"distance": float("nan")}))
        box.add(Result(task="face.identify", data={"distance": 0.5}), wait=True)
        rows = box.pending()
        assert [r.seq for r in rows] == [1, 2, 3] and box.unencodable == 2
        first, second, third = (from_json(r.payload) for r in rows)
        assert first.data == {
            "error": "result data could not be serialised: result message from 'pi-1' cannot be JSON: "
            "Object of type float32 is not JSON serializable"
        }
        assert second.data["error"].endswith("cannot be JSON: Out of range float values are not JSON compliant")
        assert third.data == {"distance": 0.5}
