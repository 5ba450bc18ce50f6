"""Where the host side finds the repository's own files (scripts, side venvs, web sources, data)."""

from __future__ import annotations

from pathlib import Path

#: The repository checkout this package runs from (editable install): scripts/, web/, data/, side venvs.
REPO_ROOT = Path(__file__).resolve().parent.parent
