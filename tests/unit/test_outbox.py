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
        second = box.add(Result(task="face.identify", data={"n": 2}, timestamp=123.0))
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
        box.remove([1, 2, 99])
        assert [r.seq for r in box.pending()] == [3, 4, 5]
        assert [r.seq for r in box.pending(after=3, limit=1)] == [4]
    with Outbox(tmp_path / "o.db", "pi-1") as box:
        assert box.add(tele()).seq == 6
        assert [r.seq for r in box.pending()] == [3, 4, 5, 6]


def test_full_outbox_drops_oldest_and_counts(tmp_path: Path) -> None:
    with Outbox(tmp_path / "o.db", "pi-1", capacity=10) as box:
        for i in range(15):
            box.add(tele(p50=float(i)))
        assert [r.seq for r in box.pending()] == list(range(6, 16))
        assert box.dropped == 5
        assert box.count() == 10
    with Outbox(tmp_path / "o.db", "pi-1", capacity=10) as box:
        assert box.dropped == 5
        box.add(tele())
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
    assert str(info.value) == f"outbox {junk}: cannot open as an SQLite outbox (file is not a database)"


CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    sys.path.insert(0, {repo!r})
    from edge.telemetry.outbox import Outbox
    from edge.telemetry.schema import Telemetry
    box = Outbox(Path({path!r}), "pi-k")
    while True:
        m = box.add(Telemetry(latency_p50_ms=1.0, latency_p90_ms=2.0, fps=3.0))
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
