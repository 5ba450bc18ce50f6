"""Where edge-deploy finds the files it ships beside its code: ``web/`` (the browser page's sources),
``data/`` (the SLM gate's held-out texts), ``firmware_configs/`` (the target profiles) and the lock
(``constraints.txt``: the exact versions of every library).

An installed wheel carries them as package data under ``edge/_shipped/`` (setup.py puts them there);
a checkout or an editable install has them at the repository's root. The wheel's copy wins when it exists,
so a stray ``data/`` folder another package put into site-packages is never taken for ours.
"""

from __future__ import annotations

from pathlib import Path

FOLDERS = ("web", "data", "firmware_configs")
LOCK_FILE = "constraints.txt"
_PACKAGE_DIR = Path(__file__).resolve().parent
#: The repository checkout this package runs from, when it runs from one (an editable install too).
CHECKOUT_ROOT = _PACKAGE_DIR.parent
#: Where a wheel puts them.
INSTALLED_ROOT = _PACKAGE_DIR / "_shipped"


def shipped_dir(folder: str) -> Path:
    """The folder ``folder`` (one of ``FOLDERS``): the installed wheel's copy, else the checkout's.

    Raises:
        ValueError: ``folder`` is not one edge-deploy ships (a programming error).
    """
    if folder not in FOLDERS:
        raise ValueError(f"{folder!r} is not a shipped folder; expected one of {', '.join(FOLDERS)}")
    installed = INSTALLED_ROOT / folder
    return installed if installed.is_dir() else CHECKOUT_ROOT / folder


def lock_file() -> Path:
    """The lock, ``constraints.txt``: the installed wheel's copy, else the checkout's."""
    installed = INSTALLED_ROOT / LOCK_FILE
    return installed if installed.is_file() else CHECKOUT_ROOT / LOCK_FILE
