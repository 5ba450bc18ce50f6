"""Over-the-air updates in the daemon: the ``update`` command, A/B slots, the acceptance check, rollback.

The state machine (docs/fleet.md draws it)::

    idle/good/failed/rolled_back --update--> downloading --> installing --> checking --> trial --> good
                                                 |               |             |           |
                                                 +--> failed <---+             +-----------+--> rolled_back

- ``downloading``: the archive is fetched to the state folder (size bound, sha256 from the signed command).
- ``installing``: extracted into the inactive slot after its signature (a trusted key) and every file are
  checked. ``update.installed`` is reported once ``current`` points at it.
- ``checking``: the record says so *before* ``current`` is switched; then the golden set must reproduce on
  this board (``edge.update.golden``) and the face pipeline must load from the new slot; otherwise
  ``current`` goes back (``update.rolled_back``).
- ``trial``: accepted (``update.accepted``); a daemon start that finds the last run did not stop cleanly counts
  a crash; ``update.crash_limit`` crashes within ``update.crash_window_s`` of the switch roll back.
- At a start, a record left in ``downloading``/``installing`` is an interrupted install: its leftovers are
  removed and ``current`` was never touched (``update.failed``); one left in ``checking`` is rolled back.

Events are Result reports (``task`` = ``update.downloading`` ... ) with ``from``/``to`` (the models' bundle
ids, as telemetry names them) and the reason; they go through the durable outbox like every report.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from edge.daemon.config import DaemonConfig
from edge.errors import BundleError, EdgeDeployError, InputError
from edge.face.models import running_of
from edge.signing import PublicKey, load_trusted_keys
from edge.update.download import check_url, download
from edge.update.golden import check_golden
from edge.update.slots import BASE, Phase, Slots, UpdateRecord

log = logging.getLogger("edge.daemon")

TASK_DOWNLOADING = "update.downloading"
TASK_INSTALLED = "update.installed"
TASK_ACCEPTED = "update.accepted"
TASK_ROLLED_BACK = "update.rolled_back"
TASK_FAILED = "update.failed"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")

#: Reports an event: (task, data).
Emit = Callable[[str, dict[str, Any]], None]


def _bundle_id(models: Path) -> str:
    try:
        return running_of(models)["bundle_id"]
    except EdgeDeployError:
        return ""


class Updater:
    """The daemon's update machinery over ``<state_dir>/slots``.

    Args:
        config: the daemon config (``trusted_keys``, ``[update]``, ``face.models`` as the base models).
        emit: reports an event (the daemon's durable ``_report`` of a Result).
        threads: onnxruntime threads for the acceptance check.

    Raises:
        InputError: a trusted key or the slots folder can't be read.
    """

    def __init__(self, config: DaemonConfig, emit: Emit, threads: int) -> None:
        self.config = config
        self.settings = config.update
        self.emit = emit
        self.threads = threads
        self.trusted: tuple[PublicKey, ...] = load_trusted_keys(config.trusted_keys)
        self.slots = Slots(config.slots_dir)
        self.record = self.slots.read_record()

    # -- what runs -------------------------------------------------------------------------------------

    def active_models(self) -> Path:
        """The face models to run: the current slot's, or the config's when no slot is current."""
        slot = self.slots.current()
        return self.config.face.models if slot is None else self.slots.folder(slot) / "models" / "face"

    def active_text(self) -> Path | None:
        """The language model to answer with: the current slot's when it has one and text is configured."""
        base = self.config.text.model_dir
        slot = self.slots.current()
        if base is None or slot is None or not (self.slots.folder(slot) / "models" / "slm").is_dir():
            return base
        return self.slots.folder(slot) / "models" / "slm"

    def _models_of(self, slot: str) -> Path:
        return self.config.face.models if slot == BASE else self.slots.folder(slot) / "models" / "face"

    # -- start, tick, stop -------------------------------------------------------------------------------

    def on_start(self) -> None:
        """Finish or undo what a killed run left, count a crash in the trial window, check the current slot."""
        rec = self.record
        phase = Phase(rec.phase)
        if phase in (Phase.DOWNLOADING, Phase.INSTALLING):
            self.slots.clear_work()
            self._finish(Phase.FAILED, TASK_FAILED, f"interrupted while {phase.value} (the daemon stopped); "
                         "the current slot was not touched")  # fmt: skip
        elif phase is Phase.CHECKING:
            self._rollback("the daemon stopped during the acceptance check")
        elif phase is Phase.TRIAL:
            if rec.running:
                rec.crashes += 1
                log.warning("update to %s: the last run did not stop cleanly (%d of %d crashes allowed)",
                            rec.to_id, rec.crashes, self.settings.crash_limit)  # fmt: skip
            if rec.crashes >= self.settings.crash_limit and not self._trial_over():
                self._rollback(
                    f"the daemon crashed {rec.crashes} times within {self.settings.crash_window_s:g} s after the switch"
                )
        self._verify_current()
        self.record.running = True
        self.tick()
        self.slots.write_record(self.record)

    def _verify_current(self) -> None:
        slot = self.slots.current()
        if slot is None or not self.trusted:
            return
        from edge.bundle import verify_bundle

        try:
            verify_bundle(self.slots.folder(slot), self.trusted)
        except BundleError as exc:
            self.record.to_id = _bundle_id(self._models_of(slot))
            self._rollback(f"the current slot {slot} failed verification at start: {exc}")

    def _trial_over(self) -> bool:
        return time.time() - self.record.switched_at > self.settings.crash_window_s

    def tick(self) -> None:
        """A trial that outlived the crash window becomes good (called from the daemon's loop)."""
        if self.record.phase == Phase.TRIAL.value and self._trial_over():
            self.record.phase = Phase.GOOD.value
            self.slots.write_record(self.record)
            log.info("update to %s: no crash within %g s; kept", self.record.to_id, self.settings.crash_window_s)

    def on_clean_stop(self) -> None:
        """Record that this run stopped cleanly (so the next start counts no crash)."""
        self.record.running = False
        self.slots.write_record(self.record)

    # -- the update command ------------------------------------------------------------------------------

    def _check_args(self, args: dict[str, Any]) -> tuple[str, str]:
        if not self.trusted:
            raise InputError("update: no trusted_keys configured; over-the-air updates take signed bundles only")
        url, sha256 = check_url(args.get("url")), args.get("sha256")
        if not isinstance(sha256, str) or not _SHA256.match(sha256):
            raise InputError(f"update: sha256 = {str(sha256)[:80]!r}; expected 64 lowercase hex digits")
        if self.record.phase == Phase.TRIAL.value and not self._trial_over():
            raise InputError(
                f"update: the update to {self.record.to_id} is still in its trial window "
                f"(update.crash_window_s = {self.settings.crash_window_s:g}); send it again after"
            )
        return url, sha256

    def run(
        self,
        args: dict[str, Any],
        nonce: str,
        use_models: Callable[[Path], Any],
        use_text: Callable[[Path], Any] = lambda _p: None,
    ) -> dict[str, Any]:
        """Carry out one ``update`` command.

        Args:
            args: ``{"url": ..., "sha256": ...}`` from the verified command.
            nonce: the command's nonce (in every event).
            use_models: switches the running face pipeline to a models folder (raises if it does not load).
            use_text: switches the text service to the slot's language model (when the slot has one and text
                is configured).

        Returns:
            ``{"outcome": "accepted" | "rolled_back", "from", "to", ...}`` for the command's done report.

        Raises:
            InputError / BundleError: bad arguments, a failed download, a bad signature or file — nothing was
                switched (``update.failed`` was reported).
        """
        url, sha256 = self._check_args(args)
        slot, previous = self.slots.inactive(), self.slots.current() or BASE
        self.record = UpdateRecord(Phase.DOWNLOADING.value, slot, previous, _bundle_id(self.active_models()),
                                   nonce=nonce, url=url, running=True)  # fmt: skip
        self.slots.write_record(self.record)
        self.emit(TASK_DOWNLOADING, {**self._base(), "url": url, "sha256": sha256})
        try:
            size = download(url, self.slots.archive, sha256, self.settings.max_bytes, self.settings.download_timeout_s)
            self._set(Phase.INSTALLING)
            folder = self.slots.install(slot, self.trusted)
        except EdgeDeployError as exc:
            self.slots.clear_work()
            self._finish(Phase.FAILED, TASK_FAILED, str(exc))
            raise
        self.record.to_id = _bundle_id(folder / "models" / "face")
        self._set(Phase.CHECKING)  # before the switch: a kill from here on rolls back at the next start
        self.slots.switch(slot)
        self.emit(TASK_INSTALLED, {**self._base(), "bytes": size})
        try:
            golden = check_golden(folder, self.threads, self.settings.max_latency_ms, self.settings.bench_runs)
            use_models(folder / "models" / "face")
        except EdgeDeployError as exc:
            self._rollback(f"acceptance check failed: {exc}")
            return {"outcome": "rolled_back", **self._base(), "reason": self.record.reason}
        text = self.active_text()
        if text is not None and text != self.config.text.model_dir:
            use_text(text)
        self.record.switched_at = time.time()
        self.record.extra = {"golden": golden.to_dict()}
        self._set(Phase.TRIAL)
        self.emit(TASK_ACCEPTED, {**self._base(), "golden": golden.to_dict()})
        self.slots.clear_work(keep=previous)
        return {"outcome": "accepted", **self._base()}

    # -- helpers -------------------------------------------------------------------------------------------

    def _base(self) -> dict[str, Any]:
        r = self.record
        return {"nonce": r.nonce, "from": r.from_id, "to": r.to_id, "slot": r.slot}

    def _set(self, phase: Phase) -> None:
        self.record.phase = phase.value
        self.slots.write_record(self.record)

    def _finish(self, phase: Phase, task: str, reason: str) -> None:
        self.record.reason = reason
        self._set(phase)
        log.error("update to %s: %s", self.record.to_id or self.record.url, reason)
        self.emit(task, {**self._base(), "url": self.record.url, "reason": reason})

    def _rollback(self, reason: str) -> None:
        """Point ``current`` back at the previous slot (or the base models) and report why."""
        back = self.record.previous if self.record.previous != self.slots.current() else BASE
        if back != BASE and not self.slots.folder(back).is_dir():
            back = BASE
        self.slots.switch(back)
        self._finish(Phase.ROLLED_BACK, TASK_ROLLED_BACK, f"{reason}; back on {back}")
