"""Where the host side finds the repository's own files (scripts, side venvs, web sources, data)."""

from __future__ import annotations

from pathlib import Path

from edge.errors import ConversionError

#: The repository checkout this package runs from (editable install): scripts/, web/, data/, side venvs.
REPO_ROOT = Path(__file__).resolve().parent.parent


def make_output_dir(path: Path) -> Path:
    """Create a stage's output folder (and its parents) if missing.

    Raises:
        ConversionError: it cannot be created (the message says why: a file in the way, no permission...).
    """
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConversionError(f"{path}: cannot create the output folder ({exc.strerror or exc})") from exc
    return path


#: The build cache shared by every command and test that converts or fetches (``--cache`` overrides it).
DEFAULT_BUILD_CACHE = Path.home() / ".cache" / "edge-deploy" / "build"
