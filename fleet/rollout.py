"""Staged rollouts: an over-the-air update to a group of devices, a canary wave first, stopped on failures.

``edge-deploy fleet rollout URL --sha256 HEX --group beta --canary 10% --abort-after 1 --store ...``:

1. The group is every device whose newest ``device.announce`` result (sent by the daemon at each start with
   the ``tags`` of its config) carries the tag.
2. The first wave is ``ceil(canary x members)`` devices (at least one, in device-id order); the rest is the
   second wave.
3. Each device of a wave gets its own signed ``update`` command; the rollout then watches the fleet store
   for that command's outcome, matched by its nonce: ``update.rolled_back``, ``update.failed``,
   ``command.failed``, ``command.rejected`` (failures), or ``update.accepted`` followed by the device's own
   telemetry naming the new bundle (success: the device runs it), or neither within the timeout (a failure
   too: the device may be off).
4. Once ``abort_after`` devices have failed, no further wave is sent.

Every device ends with one outcome: accepted, rolled_back, failed, rejected, timeout, or not_sent.

The store's rows are only as trustworthy as the broker that carried them: the monitor files a report under
the device id of its topic, and the fleet's ACL (``fleet.credentials``) lets a device publish under its own
id only, by its certificate. Rows are still read defensively: one whose fields have the wrong type is
skipped and listed in the report, never a crash.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from edge.errors import InputError
from edge.telemetry.schema import MessageKind

TASK_ANNOUNCE = "device.announce"
TASK_ACCEPTED = "update.accepted"
#: Bounds of ``--timeout`` (seconds a wave may take).
MAX_TIMEOUT_S = 86_400.0
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
        for name, value in (("timeout_s", self.timeout_s), ("poll_s", self.poll_s)):
            if not (math.isfinite(value) and 0.0 < value <= MAX_TIMEOUT_S):
                raise InputError(f"{name} = {value!r}; expected seconds in (0, {MAX_TIMEOUT_S:g}]")


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
    #: seq of the device's ``update.accepted``; the outcome is accepted once a later telemetry names ``to_id``.
    claimed_seq: int = -1


@dataclass
class RolloutReport:
    """The whole rollout: one outcome per member of the group."""

    plan: RolloutPlan
    devices: list[DeviceOutcome] = field(default_factory=list)
    aborted: bool = False
    #: Stored rows that were skipped because a field has the wrong type (one line each, no repeats).
    skipped: list[str] = field(default_factory=list)

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
        lines += [f"skipped a malformed stored row: {line}" for line in self.skipped]
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
            "skipped": list(self.skipped),
        }


def _malformed(body: Any, fields: dict[str, type | tuple[type, ...]]) -> str:
    """Why a stored result can't be used ("" when it can): ``fields`` are the ``data`` keys it needs, by type."""
    if not isinstance(body, dict) or not isinstance(body.get("device_id"), str):
        return f"a result without a device id: {str(body)[:120]}"
    where = f"{body['device_id']} {str(body.get('task'))[:40]} seq {str(body.get('seq'))[:20]}"
    seq, data = body.get("seq"), body.get("data")
    if isinstance(seq, bool) or not isinstance(seq, int):
        return f"{where}: seq = {str(seq)[:40]!r}; expected a whole number"
    if not isinstance(data, dict):
        return f"{where}: data = {str(data)[:40]!r}; expected an object"
    for key, kind in fields.items():
        value = data.get(key)
        if isinstance(value, bool) or not isinstance(value, kind):
            names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
            return f"{where}: data.{key} = {str(value)[:40]!r}; expected {names}"
    bad_tags = [t for t in data["tags"] if not isinstance(t, str)] if "tags" in fields else []
    if bad_tags:
        return f"{where}: data.tags holds {str(bad_tags[0])[:40]!r}; expected strings"
    return ""


def _skip(skipped: list[str] | None, why: str) -> None:
    if skipped is not None and why not in skipped:
        skipped.append(why)


def group_members(store: Any, group: str, skipped: list[str] | None = None) -> list[str]:
    """Devices whose newest well-formed ``device.announce`` carries ``group`` in its tags, sorted.

    Args:
        store: the fleet store.
        group: the tag.
        skipped: collects a line per malformed announcement (skipped, not fatal).
    """
    newest: dict[str, dict] = {}
    for body in store.results((TASK_ANNOUNCE,)):
        why = _malformed(body, {"tags": list})
        if why:
            _skip(skipped, why)
            continue
        newest[body["device_id"]] = body  # oldest first per device: the last one wins
    return sorted(d for d, body in newest.items() if group in body["data"]["tags"])


def waves(members: list[str], canary: float) -> list[list[str]]:
    """The canary wave (``ceil(canary x n)``, at least 1) and the rest (omitted when empty)."""
    first = max(1, math.ceil(canary * len(members) - 1e-9))
    return [w for w in (members[:first], members[first:]) if w]


#: The fields an outcome's ``data`` must carry, by type (``from``/``to``/``reason``/``error`` are optional).
_OUTCOME_FIELDS: dict[str, type | tuple[type, ...]] = {"nonce": str}
_OPTIONAL_TEXT = ("from", "to", "reason", "error")


def _collect(store: Any, pending: dict[str, DeviceOutcome], skipped: list[str]) -> None:
    """Fill in the outcome of every pending device whose command's terminal report arrived."""
    by_nonce = {d.nonce: d for d in pending.values()}
    for body in store.results(tuple(TERMINAL)):
        why = _malformed(body, _OUTCOME_FIELDS)
        data = body.get("data") if not why else {}
        if not why and (bad := [k for k in _OPTIONAL_TEXT if not isinstance(data.get(k, ""), str | None)]):
            why = f"{body['device_id']} {body.get('task')} seq {body['seq']}: data.{bad[0]} is not a string"
        if why:
            _skip(skipped, why)
            continue
        device = by_nonce.get(data["nonce"])
        if device is None or device.device_id != body["device_id"] or device.outcome != "sent":
            continue
        device.from_id, device.to_id = data.get("from") or "", data.get("to") or ""
        device.reason = data.get("reason") or data.get("error") or ""
        if body["task"] == TASK_ACCEPTED:
            device.claimed_seq = body["seq"] if device.claimed_seq < 0 else device.claimed_seq
        else:
            device.outcome = TERMINAL[body["task"]]
    for device in pending.values():
        if device.outcome == "sent" and device.claimed_seq >= 0 and _runs(store, device, skipped):
            device.outcome = "accepted"


def _runs(store: Any, device: DeviceOutcome, skipped: list[str]) -> bool:
    """Whether the device's newest telemetry came after its ``update.accepted`` and names the new bundle."""
    for body in store.latest(MessageKind.TELEMETRY, device.device_id, 1).get(device.device_id, []):
        seq, bundle = body.get("seq") if isinstance(body, dict) else None, body.get("bundle_id")
        if isinstance(seq, bool) or not isinstance(seq, int) or not isinstance(bundle, str):
            _skip(skipped, f"{device.device_id} telemetry: seq/bundle_id of the wrong type")
            return False
        return seq > device.claimed_seq and bool(device.to_id) and bundle == device.to_id
    return False


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
    report = RolloutReport(plan)
    members = group_members(store, plan.group, report.skipped)
    for line in report.skipped:
        progress(f"skipped a malformed stored row: {line}")
    if not members:
        raise InputError(f"group {plan.group!r}: no device announced this tag (config 'tags'; seen at daemon start)")
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
            _collect(store, pending, report.skipped)
        for device in pending.values():
            if device.outcome == "sent":
                device.outcome, device.reason = "timeout", _timeout_reason(device, plan.timeout_s)
    return report


def _timeout_reason(device: DeviceOutcome, timeout_s: float) -> str:
    if device.claimed_seq < 0:
        return f"no outcome within {timeout_s:g} s"
    return f"update.accepted reported, but no telemetry naming bundle {device.to_id or '?'} within {timeout_s:g} s"
