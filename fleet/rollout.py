"""Staged rollouts: an over-the-air update to a group of devices, a canary wave first, stopped on failures.

``edge-deploy fleet rollout URL --sha256 HEX --group beta --canary 10% --abort-after 1 --store ...``:

1. The group is every device whose newest ``device.announce`` result (sent by the daemon at each start with
   the ``tags`` of its config) carries the tag.
2. The first wave is ``ceil(canary x members)`` devices (at least one, in device-id order); the rest is the
   second wave.
3. Each device of a wave gets its own signed ``update`` command; the rollout then watches the fleet store
   for that command's outcome, matched by its nonce: ``update.accepted`` (success), ``update.rolled_back``,
   ``update.failed``, ``command.failed``, ``command.rejected`` (failures), or nothing within the timeout
   (a failure too: the device may be off).
4. Once ``abort_after`` devices have failed, no further wave is sent.

Every device ends with one outcome: accepted, rolled_back, failed, rejected, timeout, or not_sent.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from edge.errors import InputError

TASK_ANNOUNCE = "device.announce"
#: Result task -> the outcome it means for the update command whose nonce it carries.
TERMINAL = {
    "update.accepted": "accepted",
    "update.rolled_back": "rolled_back",
    "update.failed": "failed",
    "command.failed": "failed",
    "command.rejected": "rejected",
}


@dataclass(frozen=True)
class RolloutPlan:
    """What to roll out where, and when to stop.

    Attributes:
        url, sha256: the signed bundle archive and its sha256 (as the ``update`` command takes them).
        group: the tag whose devices are updated.
        canary: fraction of the group in the first wave, in (0, 1].
        abort_after: stop sending further waves once this many devices failed.
        timeout_s: how long to wait for one wave's outcomes.
        poll_s: how often the store is read meanwhile.
    """

    url: str
    sha256: str
    group: str
    canary: float = 0.1
    abort_after: int = 1
    timeout_s: float = 900.0
    poll_s: float = 1.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.canary) and 0.0 < self.canary <= 1.0):
            raise InputError(f"canary = {self.canary!r}; expected a fraction in (0, 1], e.g. 10%")
        if isinstance(self.abort_after, bool) or not isinstance(self.abort_after, int) or self.abort_after < 1:
            raise InputError(f"abort_after = {self.abort_after!r}; expected a whole number >= 1")


@dataclass
class DeviceOutcome:
    """One device's line of the rollout table."""

    device_id: str
    wave: int
    outcome: str = "not_sent"
    from_id: str = ""
    to_id: str = ""
    reason: str = ""
    nonce: str = ""


@dataclass
class RolloutReport:
    """The whole rollout: one outcome per member of the group."""

    plan: RolloutPlan
    devices: list[DeviceOutcome] = field(default_factory=list)
    aborted: bool = False

    @property
    def failed(self) -> int:
        return sum(d.outcome not in ("accepted", "not_sent") for d in self.devices)

    @property
    def ok(self) -> bool:
        return not self.aborted and all(d.outcome == "accepted" for d in self.devices)

    def table(self) -> str:
        """One line per device: wave, outcome, from -> to, reason."""
        lines = [f"{'device':24} {'wave':>4}  {'outcome':12} {'from':16} -> {'to':16} reason"]
        for d in self.devices:
            lines.append(
                f"{d.device_id:24} {d.wave:>4}  {d.outcome:12} {d.from_id or '-':16} -> {d.to_id or '-':16} "
                f"{d.reason[:100]}"
            )
        state = "ABORTED" if self.aborted else ("done" if self.ok else "done with failures")
        lines.append(f"rollout to group {self.plan.group}: {state}; {self.failed} of {len(self.devices)} failed")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "group": self.plan.group,
            "url": self.plan.url,
            "aborted": self.aborted,
            "ok": self.ok,
            "devices": [d.__dict__ for d in self.devices],
        }


def group_members(store: Any, group: str) -> list[str]:
    """Devices whose newest ``device.announce`` carries ``group`` in its tags, sorted."""
    newest: dict[str, dict] = {}
    for body in store.results((TASK_ANNOUNCE,)):
        newest[body["device_id"]] = body  # oldest first per device: the last one wins
    return sorted(d for d, body in newest.items() if group in (body.get("data") or {}).get("tags", []))


def waves(members: list[str], canary: float) -> list[list[str]]:
    """The canary wave (``ceil(canary x n)``, at least 1) and the rest (omitted when empty)."""
    first = max(1, math.ceil(canary * len(members) - 1e-9))
    return [w for w in (members[:first], members[first:]) if w]


def _collect(store: Any, pending: dict[str, DeviceOutcome]) -> None:
    """Fill in the outcome of every pending device whose command's terminal report arrived."""
    by_nonce = {d.nonce: d for d in pending.values()}
    for body in store.results(tuple(TERMINAL)):
        data = body.get("data") or {}
        device = by_nonce.get(data.get("nonce"))
        if device is None or device.device_id != body.get("device_id") or device.outcome != "sent":
            continue
        device.outcome = TERMINAL[body["task"]]
        device.from_id, device.to_id = str(data.get("from", "")), str(data.get("to", ""))
        device.reason = str(data.get("reason") or data.get("error") or "")


def run_rollout(
    plan: RolloutPlan,
    store: Any,
    send: Callable[[str], str],
    sleep: Callable[[float], None] = time.sleep,
    progress: Callable[[str], None] = lambda _line: None,
) -> RolloutReport:
    """Roll an update out to a group, wave by wave.

    Args:
        plan: what, where, and when to stop.
        store: an open fleet store (``fleet.open_store``) that a monitor keeps filling.
        send: sends the signed ``update`` command to one device; returns the command's nonce.
        sleep: waits between store reads.
        progress: called with a line per step.

    Returns:
        The report (one outcome per member).

    Raises:
        InputError: no device announced the group's tag.
    """
    members = group_members(store, plan.group)
    if not members:
        raise InputError(f"group {plan.group!r}: no device announced this tag (config 'tags'; seen at daemon start)")
    report = RolloutReport(plan)
    plan_waves = waves(members, plan.canary)
    for number, wave in enumerate(plan_waves, 1):
        report.devices += [DeviceOutcome(d, number) for d in wave]
    for number in range(1, len(plan_waves) + 1):
        if report.failed >= plan.abort_after:
            report.aborted = True
            progress(f"aborted before wave {number}: {report.failed} device(s) failed (abort after {plan.abort_after})")
            break
        pending = {d.device_id: d for d in report.devices if d.wave == number}
        for device in pending.values():
            device.nonce, device.outcome = send(device.device_id), "sent"
        progress(f"wave {number}: update sent to {len(pending)} device(s): {', '.join(pending)}")
        deadline = time.monotonic() + plan.timeout_s
        while any(d.outcome == "sent" for d in pending.values()) and time.monotonic() < deadline:
            sleep(plan.poll_s)
            _collect(store, pending)
        for device in pending.values():
            if device.outcome == "sent":
                device.outcome, device.reason = "timeout", f"no outcome within {plan.timeout_s:g} s"
    return report
