"""Over-the-air updates in the daemon: the ``update`` command, A/B slots, the acceptance check, rollback.

The state machine (docs/fleet.md draws it)::

    idle/good/failed/rolled_back --update--> downloading --> installing --> checking --> trial --> good
                                                 |               |             |           |
                                                 +--> failed <---+             +-----------+--> rolled_back

- ``downloading``: the archive is fetched to the state folder on a worker thread (size, time and speed bounds,
  sha256 from the signed command) while the daemon's loop goes on with frames, telemetry and commands; the
  loop picks the outcome up in ``tick`` and does the rest. A stop cancels the download (``update.failed``).
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
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edge.daemon.config import DaemonConfig
from edge.errors import BundleError, EdgeDeployError, InputError
from edge.face.models import read_models_folder
from edge.signing import PublicKey, load_trusted_keys
from edge.update.download import Download, DownloadLimits, check_url
from edge.update.golden import check_golden
from edge.update.slots import BASE, Phase, Slots, UpdateRecord

log = logging.getLogger("edge.daemon")

TASK_DOWNLOADING = "update.downloading"
TASK_INSTALLED = "update.installed"
TASK_ACCEPTED = "update.accepted"
TASK_ROLLED_BACK = "update.rolled_back"
TASK_FAILED = "update.failed"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
#: How long a stop waits for the cancelled download's thread (a cancel shuts its socket: it ends at once).
_JOIN_S = 5.0

#: Reports an event: (task, data).
Emit = Callable[[str, dict[str, Any]], None]


@dataclass
class Finished:
    """How an ``update`` command ended (for its ``command.done`` / ``command.failed`` answer)."""

    nonce: str
    data: dict[str, Any] | None = None  # the done report's data
    error: EdgeDeployError | None = None  # why it failed; nothing was switched


@dataclass
class _Pending:
    """An update whose archive downloads on a worker thread."""

    fetch: Download
    use_models: Callable[[Path], Any]
    use_text: Callable[[Path], Any]
    thread: threading.Thread | None = None
    size: int = 0
    error: Exception | None = None


def _bundle_id(models: Path) -> str:
    try:
        return read_models_folder(models).running()["bundle_id"]
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
        self._pending: _Pending | None = None

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

    def tick(self) -> Finished | None:
        """Called from the daemon's loop: a trial that outlived the crash window becomes good; a finished
        download is installed and checked here (on the loop's thread).

        Returns:
            How an update command ended, once it has; else None.
        """
        if self.record.phase == Phase.TRIAL.value and self._trial_over():
            self.record.phase = Phase.GOOD.value
            self.slots.write_record(self.record)
            log.info("update to %s: no crash within %g s; kept", self.record.to_id, self.settings.crash_window_s)
        pending = self._pending
        if pending is None or pending.thread is None or pending.thread.is_alive():
            return None
        return self._finish_pending(pending)

    def stop(self) -> Finished | None:
        """Cancel a download in progress (the daemon is stopping): ``update.failed``, leftovers removed.

        Returns:
            How the update command ended, when one was downloading; else None.
        """
        pending = self._pending
        if pending is None or pending.thread is None:
            return None
        pending.fetch.cancel("the daemon is stopping")
        pending.thread.join(_JOIN_S)
        if pending.thread.is_alive():  # left as "downloading": the next start removes what it wrote
            log.error("update: the download of %s did not stop within %g s", pending.fetch.url, _JOIN_S)
            return None
        return self._finish_pending(pending)

    def on_clean_stop(self) -> None:
        """Record that this run stopped cleanly (so the next start counts no crash)."""
        self.record.running = False
        self.slots.write_record(self.record)

    # -- the update command ------------------------------------------------------------------------------

    def _check_args(self, args: dict[str, Any]) -> tuple[str, str]:
        if not self.trusted:
            raise InputError("update: no trusted_keys configured; over-the-air updates take signed bundles only")
        if self._pending is not None:
            raise InputError(f"update: {self._pending.fetch.url} is still downloading; send it again after")
        url, sha256 = check_url(args.get("url")), args.get("sha256")
        if not isinstance(sha256, str) or not _SHA256.match(sha256):
            raise InputError(f"update: sha256 = {str(sha256)[:80]!r}; expected 64 lowercase hex digits")
        if self.record.phase == Phase.TRIAL.value and not self._trial_over():
            raise InputError(
                f"update: the update to {self.record.to_id} is still in its trial window "
                f"(update.crash_window_s = {self.settings.crash_window_s:g}); send it again after"
            )
        return url, sha256

    def begin(
        self,
        args: dict[str, Any],
        nonce: str,
        use_models: Callable[[Path], Any],
        use_text: Callable[[Path], Any] = lambda _p: None,
    ) -> None:
        """Start one ``update`` command: the download runs on a worker thread; ``tick`` finishes the update.

        Args:
            args: ``{"url": ..., "sha256": ...}`` from the verified command.
            nonce: the command's nonce (in every event).
            use_models: switches the running face pipeline to a models folder (raises if it does not load).
            use_text: switches the text service to the slot's language model (when the slot has one and text
                is configured).

        Raises:
            InputError / BundleError: bad arguments, no trusted keys, a trial or another download under way
                (nothing was started, no event reported).
        """
        url, sha256 = self._check_args(args)
        s = self.settings
        limits = DownloadLimits(s.max_bytes, s.download_timeout_s, s.min_bytes_per_s)
        pending = _Pending(Download(url, self.slots.archive, sha256, limits), use_models, use_text)
        slot, previous = self.slots.inactive(), self.slots.current() or BASE
        self.record = UpdateRecord(Phase.DOWNLOADING.value, slot, previous, _bundle_id(self.active_models()),
                                   nonce=nonce, url=url, running=True)  # fmt: skip
        self.slots.write_record(self.record)
        self.emit(TASK_DOWNLOADING, {**self._base(), "url": url, "sha256": sha256})
        pending.thread = threading.Thread(target=_download, args=(pending,), name="edge-update-download", daemon=True)
        self._pending = pending
        pending.thread.start()

    def run(
        self,
        args: dict[str, Any],
        nonce: str,
        use_models: Callable[[Path], Any],
        use_text: Callable[[Path], Any] = lambda _p: None,
    ) -> dict[str, Any]:
        """Carry out one ``update`` command and wait for it (``begin``, then ``tick`` once downloaded).

        Returns:
            ``{"outcome": "accepted" | "rolled_back", "from", "to", ...}`` for the command's done report.

        Raises:
            InputError / BundleError: bad arguments, a failed download, a bad signature or file — nothing was
                switched (``update.failed`` was reported unless the arguments were refused).
        """
        self.begin(args, nonce, use_models, use_text)
        pending = self._pending
        assert pending is not None and pending.thread is not None
        pending.thread.join(self.settings.download_timeout_s + _JOIN_S)  # the download bounds its own time
        finished = self.tick() if not pending.thread.is_alive() else self.stop()
        assert finished is not None
        if finished.error is not None:
            raise finished.error
        assert finished.data is not None
        return finished.data

    def _finish_pending(self, pending: _Pending) -> Finished:
        """The download ended: on to installing and checking, or ``update.failed``."""
        self._pending = None
        nonce = self.record.nonce
        try:
            return Finished(nonce, data=self._install(pending))
        except EdgeDeployError as exc:
            return Finished(nonce, error=exc)

    def _install(self, pending: _Pending) -> dict[str, Any]:
        """Install the downloaded archive into the inactive slot, switch, check; roll back what fails."""
        slot, previous = self.record.slot, self.record.previous
        try:
            if pending.error is not None:
                raise pending.error
            self._set(Phase.INSTALLING)
            folder = self.slots.install(slot, self.trusted)
        except EdgeDeployError as exc:
            self.slots.clear_work()
            self._finish(Phase.FAILED, TASK_FAILED, str(exc))
            raise
        self.record.to_id = _bundle_id(folder / "models" / "face")
        self._set(Phase.CHECKING)  # before the switch: a kill from here on rolls back at the next start
        self.slots.switch(slot)
        self.emit(TASK_INSTALLED, {**self._base(), "bytes": pending.size})
        try:
            golden = check_golden(folder, self.threads, self.settings.max_latency_ms, self.settings.bench_runs)
            pending.use_models(folder / "models" / "face")
        except EdgeDeployError as exc:
            self._rollback(f"acceptance check failed: {exc}")
            return {"outcome": "rolled_back", **self._base(), "reason": self.record.reason}
        text = self.active_text()
        if text is not None and text != self.config.text.model_dir:
            pending.use_text(text)
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
        self.slots.clear_work()  # the archive and the refused slot: nothing will switch to them again
        self._finish(Phase.ROLLED_BACK, TASK_ROLLED_BACK, f"{reason}; back on {back}")


def _download(pending: _Pending) -> None:
    """The worker thread: download, keeping the size or the error for the loop (``Updater.tick``)."""
    try:
        pending.size = pending.fetch.run()
    except Exception as exc:  # handed to the loop's thread, which raises it there
        pending.error = exc
