"""Mode checks for files that hold secrets (passwords, private keys, the command secret).

Like ssh with a private key, edge-deploy refuses a secret file that group or others may read: on a shared
or compromised account such a file has already leaked, and refusing says so before the secret is used.
"""

from __future__ import annotations

import stat
from pathlib import Path

from edge.errors import InputError


def check_private_mode(path: Path, label: str) -> None:
    """Refuse a file that group or others may read, write or execute.

    Args:
        path: the file (its mode is read with ``stat``, following links as ``open`` would).
        label: how errors name it, e.g. ``"broker.password_file = '/etc/edge-deploy/pw'"``.

    Raises:
        InputError: ``<label>: mode 644 lets group or others read it; expected 600 (chmod 600 '<path>')``, or
            that it can't be read.
    """
    try:
        mode = stat.S_IMODE(Path(path).stat().st_mode)
    except OSError as exc:
        raise InputError(f"{label}: cannot read ({exc.strerror})") from exc
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise InputError(f"{label}: mode {mode:03o} lets group or others read it; expected 600 (chmod 600 '{path}')")
