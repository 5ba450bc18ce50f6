"""Where the host side finds its files: the repository's (scripts, side venvs), and the page sources and data
that an installed wheel carries too (``WEB_DIR``, ``DATA_DIR``: ``edge.shipped``)."""

from __future__ import annotations

from pathlib import Path

from edge.errors import ConversionError
from edge.shipped import shipped_dir

#: The repository checkout this package runs from (editable install): scripts/ and the side venvs, which only
#: a checkout has. Installed from a wheel, this is site-packages.
REPO_ROOT = Path(__file__).resolve().parent.parent
#: The browser page's sources (web/): the checkout's, or an installed wheel's copy.
WEB_DIR = shipped_dir("web")
#: data/ (the SLM gate's held-out texts): the checkout's, or an installed wheel's copy.
DATA_DIR = shipped_dir("data")


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
