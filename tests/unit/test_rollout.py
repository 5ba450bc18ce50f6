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
from edge.telemetry.schema import Result, Telemetry, to_json
from fleet import open_store
from fleet.records import decode
from fleet.rollout import RolloutPlan, group_members, run_rollout, waves

_SEQ = itertools.count(1)


def _result(store, device: str, task: str, data: dict) -> None:
    body = to_json(Result(device_id=device, seq=next(_SEQ), timestamp=time.time(), task=task, data=data))
    store.write([decode("edge-deploy", f"edge-deploy/{device}/result", body, time.time())])


def _telemetry(store, device: str, bundle_id: str) -> None:
    body = to_json(Telemetry(device_id=device, seq=next(_SEQ), timestamp=time.time(), latency_p50_ms=1.0,
                             latency_p90_ms=2.0, fps=3.0, temperature_c=None, window_s=1.0, bundle_id=bundle_id))  # fmt: skip
    store.write([decode("edge-deploy", f"edge-deploy/{device}/telemetry", body, time.time())])


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


def _answering(store, outcomes: dict[str, str], runs: bool = True):
    """A send() whose device answers with outcomes[device] (as the daemon reports it), or never; a device that
    accepts then reports telemetry naming the new bundle (unless ``runs`` is false)."""
    sent: list[str] = []

    def send(device: str) -> str:
        nonce = f"nonce-{device}-{len(sent)}-0000000"
        sent.append(device)
        task = outcomes.get(device)
        if task is not None:
            _result(store, device, task, {"nonce": nonce, "from": "old", "to": "new", "reason": f"{task} here"})
        if task == "update.accepted" and runs:
            _telemetry(store, device, "new")
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


def test_a_bare_update_accepted_is_no_proof_without_telemetry_naming_the_new_bundle(store) -> None:
    # what an outsider who read the nonces on +/cmd could publish; no telemetry of the device names "new"
    send, _ = _answering(store, {d: "update.accepted" for d in ("pi-1", "pi-2", "pi-4")}, runs=False)
    _telemetry(store, "pi-2", "old")  # a device still running the old bundle
    plan = RolloutPlan("http://x/b.tar.gz", "0" * 64, "beta", 1.0, 5, 0.05, 0.01)
    report = run_rollout(plan, store, send, lambda s: time.sleep(s))
    assert [d.outcome for d in report.devices] == ["timeout"] * 3 and not report.ok
    assert report.devices[0].reason == "update.accepted reported, but no telemetry naming bundle new within 0.05 s"
    assert report.table().splitlines()[-1] == "rollout to group beta: done with failures; 3 of 3 failed"


def test_malformed_stored_rows_are_skipped_and_listed_never_a_crash(store) -> None:
    _result(store, "pi-9", "device.announce", {"tags": 5})
    _result(store, "pi-8", "device.announce", {"tags": ["beta", 7]})
    send, _ = _answering(store, {d: "update.accepted" for d in ("pi-1", "pi-2", "pi-4")})
    _result(store, "pi-1", "update.failed", {"nonce": [1], "reason": "x"})
    _result(store, "pi-2", "update.rolled_back", {"nonce": "n", "to": {"a": 1}})
    lines: list[str] = []
    plan = RolloutPlan("http://x/b.tar.gz", "0" * 64, "beta", 0.1, 1, 5, 0.01)
    report = run_rollout(plan, store, send, lambda s: None, lines.append)
    assert report.ok and [d.outcome for d in report.devices] == ["accepted"] * 3
    assert [line.split(" seq ")[0] for line in report.skipped] == [
        "pi-8 device.announce", "pi-9 device.announce", "pi-1 update.failed", "pi-2 update.rolled_back"]  # fmt: skip
    assert report.skipped[1].endswith(": data.tags = '5'; expected list")
    assert report.skipped[2].endswith(": data.nonce = '[1]'; expected str")
    assert report.skipped[3].endswith(": data.to is not a string")
    assert f"skipped a malformed stored row: {report.skipped[0]}" in report.table()
    assert lines[0] == f"skipped a malformed stored row: {report.skipped[0]}"


@pytest.mark.parametrize("timeout", [float("nan"), -5.0, float("inf"), 0.0])
def test_a_timeout_that_is_not_a_finite_positive_number_is_refused(timeout: float) -> None:
    with pytest.raises(InputError, match=r"^timeout_s = .*; expected seconds in \(0, 86400\]$"):
        RolloutPlan("u", "0" * 64, "beta", timeout_s=timeout)


def _cli(argv: list[str], capsys) -> tuple[int, str]:
    from edge_deploy.cli import main

    code = main(argv)
    return code, capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize("timeout", ["nan", "-5", "inf"])
def test_the_cli_refuses_a_timeout_that_would_never_end_or_never_start(tmp_path: Path, capsys, timeout) -> None:
    argv = ["fleet", "rollout", "http://x/a.tar.gz", "--sha256", "0" * 64, "--group", "beta", "--store",
            str(tmp_path / "f.db"), "--secret-file", str(tmp_path / "k"), "--broker", "127.0.0.1:1", f"--timeout={timeout}"]  # fmt: skip
    assert _cli(argv, capsys) == (3, f"Error: --timeout {float(timeout):g}; expected seconds in (0, 86400]")


@pytest.mark.parametrize("command", [["monitor", "-o", "OUT"], ["fleet", "rollout", "http://x/a.tar.gz", "--sha256",
                                     "0" * 64, "--group", "beta", "--store", "OUT/f.db", "--secret-file", "OUT/k"]])  # fmt: skip
def test_a_remote_broker_without_tls_is_refused_as_the_daemon_refuses_it(tmp_path: Path, capsys, command) -> None:
    argv = [str(tmp_path) if a == "OUT" else a.replace("OUT", str(tmp_path)) for a in command]
    assert _cli([*argv, "--broker", "10.9.9.9:1883"], capsys) == (
        3,
        "Error: --broker 10.9.9.9:1883 without TLS; expected --tls-ca for a broker off this machine (the password, "
        "commands and results would cross the network in clear), or --allow-insecure to accept that",
    )
