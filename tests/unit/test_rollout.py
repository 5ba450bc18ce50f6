"""Staged rollouts (fleet/rollout.py): groups from announcements, waves, abort, outcomes by nonce.

The store is a real SQLite fleet store fed through the monitor's own decode path; each device's answer is
written into it as the daemon would report it (the whole path with real daemons is
tests/integration/test_rollout.py)."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import pytest

from edge.errors import InputError
from edge.telemetry.schema import Result, to_json
from fleet import open_store
from fleet.records import decode
from fleet.rollout import RolloutPlan, group_members, run_rollout, waves

_SEQ = itertools.count(1)


def _result(store, device: str, task: str, data: dict) -> None:
    body = to_json(Result(device_id=device, seq=next(_SEQ), timestamp=time.time(), task=task, data=data))
    store.write([decode("edge-deploy", f"edge-deploy/{device}/result", body, time.time())])


@pytest.fixture
def store(tmp_path: Path):
    s = open_store(str(tmp_path / "fleet.db"))
    for device, tags in (("pi-1", ["beta"]), ("pi-2", ["beta", "kitchen"]), ("pi-3", ["beta"]), ("pi-4", [])):
        _result(s, device, "device.announce", {"tags": tags})
    _result(s, "pi-4", "device.announce", {"tags": ["beta"]})  # newer announcement: pi-4 joined beta
    _result(s, "pi-3", "device.announce", {"tags": ["prod"]})  # ... and pi-3 left it
    yield s
    s.close()


def test_groups_come_from_the_newest_announcement_and_waves_start_with_the_canary(store) -> None:
    assert group_members(store, "beta") == ["pi-1", "pi-2", "pi-4"]
    assert group_members(store, "kitchen") == ["pi-2"]
    assert waves(["a", "b", "c"], 0.1) == [["a"], ["b", "c"]]
    assert waves(["a", "b", "c"], 0.34) == [["a", "b"], ["c"]]
    assert waves(["a", "b", "c"], 1.0) == [["a", "b", "c"]]
    assert waves([f"d{i}" for i in range(10)], 0.1)[0] == ["d0"]


def _answering(store, outcomes: dict[str, str]):
    """A send() whose device answers with outcomes[device] (as the daemon reports it), or never."""
    sent: list[str] = []

    def send(device: str) -> str:
        nonce = f"nonce-{device}-{len(sent)}-0000000"
        sent.append(device)
        task = outcomes.get(device)
        if task is not None:
            _result(store, device, task, {"nonce": nonce, "from": "old", "to": "new", "reason": f"{task} here"})
        return nonce

    return send, sent


def test_a_good_rollout_updates_every_member_wave_by_wave(store) -> None:
    send, sent = _answering(store, {d: "update.accepted" for d in ("pi-1", "pi-2", "pi-4")})
    report = run_rollout(
        RolloutPlan("http://x/b.tar.gz", "0" * 64, "beta", 0.1, 1, 5, 0.01), store, send, lambda s: None
    )
    assert report.ok and sent == ["pi-1", "pi-2", "pi-4"]
    assert [(d.device_id, d.wave, d.outcome, d.to_id) for d in report.devices] == [
        ("pi-1", 1, "accepted", "new"), ("pi-2", 2, "accepted", "new"), ("pi-4", 2, "accepted", "new")]  # fmt: skip
    assert report.table().splitlines()[-1] == "rollout to group beta: done; 0 of 3 failed"


def test_a_failed_canary_aborts_and_later_waves_are_never_sent(store) -> None:
    send, sent = _answering(store, {"pi-1": "update.rolled_back"})
    report = run_rollout(
        RolloutPlan("http://x/b.tar.gz", "0" * 64, "beta", 0.1, 1, 5, 0.01), store, send, lambda s: None
    )
    assert sent == ["pi-1"] and report.aborted and not report.ok
    assert [(d.device_id, d.outcome) for d in report.devices] == [
        ("pi-1", "rolled_back"), ("pi-2", "not_sent"), ("pi-4", "not_sent")]  # fmt: skip
    assert report.devices[0].reason == "update.rolled_back here"
    assert report.table().splitlines()[-1] == "rollout to group beta: ABORTED; 1 of 3 failed"


def test_a_silent_device_times_out_and_counts_as_a_failure(store) -> None:
    send, sent = _answering(store, {"pi-2": "update.accepted", "pi-4": "update.accepted"})
    plan = RolloutPlan("http://x/b.tar.gz", "0" * 64, "beta", 1.0, 2, 0.05, 0.01)
    report = run_rollout(plan, store, send, lambda s: time.sleep(s))
    assert [(d.device_id, d.outcome) for d in report.devices] == [
        ("pi-1", "timeout"), ("pi-2", "accepted"), ("pi-4", "accepted")]  # fmt: skip
    assert not report.aborted and not report.ok and report.devices[0].reason == "no outcome within 0.05 s"


def test_bad_plans_and_empty_groups_are_named(store) -> None:
    with pytest.raises(InputError, match=r"canary = 0.0; expected a fraction in \(0, 1\]"):
        RolloutPlan("u", "0" * 64, "beta", 0.0)
    with pytest.raises(InputError, match="abort_after = 0; expected a whole number >= 1"):
        RolloutPlan("u", "0" * 64, "beta", 0.5, 0)
    with pytest.raises(InputError, match="group 'nobody': no device announced this tag"):
        run_rollout(RolloutPlan("u", "0" * 64, "nobody"), store, lambda d: "n", lambda s: None)
