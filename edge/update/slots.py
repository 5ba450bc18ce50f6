"""A/B slots for over-the-air bundles, and the durable record of where an update stands.

Layout under the daemon's state folder (``<state_dir>/slots``)::

    a/, b/           two bundle folders (each a verified, extracted bundle)
    current          symbolic link to "a" or "b"; absent: the config's own models (the "base")
    update.json      the update record (phase, slots, versions, crash count), replaced atomically
    staging/         where an archive is extracted before it becomes a slot
    download/        the archive being downloaded

Every change that matters is one atomic step: a slot becomes visible by ``rename`` of a fully verified
folder; ``current`` changes by renaming a new link over it; the record by renaming a new file over it (each
fsynced with its folder). So a process killed at any instruction leaves either the old state or the new one,
and :class:`edge.daemon.updater.Updater` reads the record at the next start to finish or undo what was cut.
"""

from __future__ import annotations

import enum
import json
import os
import shutil
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from edge.bundle import extract_bundle, verify_bundle
from edge.errors import BundleError, InputError
from edge.signing import PublicKey

SLOTS = ("a", "b")
#: ``UpdateRecord.previous`` when the slot before was the config's own models folder.
BASE = "base"
CURRENT = "current"
RECORD = "update.json"


class Phase(enum.StrEnum):
    """Where an update stands (docs/fleet.md has the state machine)."""

    IDLE = "idle"
    DOWNLOADING = "downloading"
    INSTALLING = "installing"
    CHECKING = "checking"  # switched to the new slot, acceptance check not passed yet
    TRIAL = "trial"  # accepted; crashes within update.crash_window_s still roll it back
    GOOD = "good"
    ROLLED_BACK = "rolled_back"
    FAILED = "failed"


@dataclass
class UpdateRecord:
    """The durable update record (``update.json``)."""

    phase: str = Phase.IDLE.value
    slot: str = ""  # the slot being installed or tried
    previous: str = BASE  # what ``current`` pointed at before the switch: a slot or BASE
    from_id: str = ""
    to_id: str = ""
    nonce: str = ""
    url: str = ""
    switched_at: float = 0.0
    crashes: int = 0
    running: bool = False  # set while a daemon runs; found set at a start = the last run did not stop cleanly
    reason: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Slots:
    """The slot folders and the record of one device. Not thread-safe: the daemon's loop owns it.

    Args:
        root: ``<state_dir>/slots`` (created).

    Raises:
        InputError: the folder can't be created.
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        try:
            for sub in ("", "staging", "download"):
                (self.root / sub).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(f"{self.root}: cannot create the update slots folder ({exc.strerror})") from exc

    @property
    def archive(self) -> Path:
        """Where the downloaded archive goes."""
        return self.root / "download" / "bundle.tar.gz"

    def folder(self, slot: str) -> Path:
        """The folder of slot ``a`` or ``b``."""
        if slot not in SLOTS:
            raise InputError(f"slot {slot!r}; expected one of {', '.join(SLOTS)}")
        return self.root / slot

    def current(self) -> str | None:
        """The slot ``current`` points at, or None (the base models)."""
        link = self.root / CURRENT
        if not link.is_symlink():
            return None
        target = os.readlink(link)
        return target if target in SLOTS and (self.root / target).is_dir() else None

    def inactive(self) -> str:
        """The slot an update may overwrite: the one ``current`` does not point at."""
        return "b" if self.current() == "a" else "a"

    def switch(self, slot: str | None) -> None:
        """Point ``current`` at ``slot`` (None or BASE: remove it, back to the base models), atomically."""
        link = self.root / CURRENT
        if slot in (None, BASE):
            if link.is_symlink():
                link.unlink()
        else:
            self.folder(slot)  # checks the name
            tmp = self.root / f".{CURRENT}.new"
            if tmp.is_symlink() or tmp.exists():
                tmp.unlink()
            os.symlink(slot, tmp)
            os.replace(tmp, link)
        _fsync_dir(self.root)

    def read_record(self) -> UpdateRecord:
        """The record; a fresh one when there is none.

        Raises:
            InputError: the file exists but is not a record (naming it).
        """
        path = self.root / RECORD
        if not path.is_file():
            return UpdateRecord()
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            known = {f.name for f in fields(UpdateRecord)}
            record = UpdateRecord(**{k: v for k, v in raw.items() if k in known})
            Phase(record.phase)
        except (OSError, ValueError, TypeError, AttributeError) as exc:
            raise InputError(f"{path}: not an update record ({exc}); remove it to start afresh") from None
        return record

    def write_record(self, record: UpdateRecord) -> None:
        """Replace the record atomically (fsynced)."""
        path = self.root / RECORD
        tmp = path.with_name(f".{RECORD}.tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(asdict(record), fh, indent=2)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        _fsync_dir(self.root)

    def clear_work(self, keep: str | None = None) -> None:
        """Remove staging, download leftovers and the slot that is neither current nor ``keep``."""
        for sub in ("staging", "download"):
            shutil.rmtree(self.root / sub, ignore_errors=True)
            (self.root / sub).mkdir()
        current = self.current()
        for slot in SLOTS:
            if slot not in (current, keep):
                shutil.rmtree(self.root / slot, ignore_errors=True)

    def install(self, slot: str, trusted: tuple[PublicKey, ...]) -> Path:
        """Extract the downloaded archive into ``slot`` (which must not be current), verified.

        The archive is checked (signature by a trusted key, every member and hash) before anything is
        written, the extracted folder again after, and only then renamed into place.

        Raises:
            BundleError: a bad signature, file or member; a bundle without face models.
        """
        if slot == self.current():
            raise BundleError(f"{self.folder(slot)}: is the current slot; an update goes into the other one")
        staging = self.root / "staging"
        shutil.rmtree(staging, ignore_errors=True)
        extracted = extract_bundle(self.archive, staging, trusted)
        verify_bundle(extracted, trusted)
        if not (extracted / "models" / "face" / "models.json").is_file():
            raise BundleError(f"{self.archive}: no models/face/models.json; expected a face bundle")
        target = self.folder(slot)
        shutil.rmtree(target, ignore_errors=True)
        os.sync()  # the slot's files reach the disk before the slot can become current
        os.replace(extracted, target)
        _fsync_dir(self.root)
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        return target
