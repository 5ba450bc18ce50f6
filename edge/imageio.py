"""Reading photos on the device: bytes on disk -> uint8 RGB array, with errors that name the file."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

from edge.errors import InputError


def decode_image(data: bytes, name: str) -> np.ndarray:
    """Decode an encoded image (JPEG, PNG, BMP, WebP, ...) held in memory.

    Args:
        data: the encoded bytes.
        name: what to call the source in error messages (usually the file name).

    Returns:
        uint8 array [H, W, 3], RGB. Grey images are expanded to three channels, alpha is dropped.

    Raises:
        InputError: if the bytes are empty or cv2 cannot decode them.
    """
    if len(data) == 0:
        raise InputError(f"{name}: empty file (0 bytes); expected an image")
    buf = np.frombuffer(data, dtype=np.uint8)
    bgr = cv2.imdecode(buf, cv2.IMREAD_COLOR)
    if bgr is None or bgr.size == 0:
        raise InputError(f"{name}: not an image (cv2 could not decode {len(data)} bytes)")
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


def load_image(path: str | Path) -> np.ndarray:
    """Read an image file as uint8 RGB.

    Args:
        path: image file.

    Returns:
        uint8 array [H, W, 3], RGB.

    Raises:
        InputError: if the file is missing, a directory, empty or not a decodable image.
    """
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such file; expected an image")
    if not path.is_file():
        raise InputError(f"{path}: not a file; expected an image")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from exc
    return decode_image(data, str(path))


def save_image(path: str | Path, rgb: np.ndarray, jpeg_quality: int = 95) -> Path:
    """Write a uint8 RGB array; the format follows the suffix (.jpg, .png, ...).

    Args:
        path: destination file.
        rgb: uint8 array [H, W, 3], RGB.
        jpeg_quality: 1..100, used for JPEG only.

    Returns:
        The path written.

    Raises:
        InputError: if the array is not uint8 [H, W, 3] or cv2 cannot encode it for that suffix.
    """
    path = Path(path)
    if rgb.dtype != np.uint8 or rgb.ndim != 3 or rgb.shape[2] != 3 or rgb.size == 0:
        raise InputError(f"{path}: image to save is {rgb.dtype} {rgb.shape}; expected uint8 [H, W, 3]")
    suffix = path.suffix or ".png"
    # The quality parameter only for JPEG: other encoders warn about a key they don't know.
    params = [cv2.IMWRITE_JPEG_QUALITY, int(jpeg_quality)] if suffix.lower() in (".jpg", ".jpeg") else []
    try:
        ok, buf = cv2.imencode(suffix, cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), params)
    except cv2.error:  # raised (not returned) for a suffix no codec claims
        ok, buf = False, None
    if not ok or buf is None:
        raise InputError(f"{path}: cv2 cannot encode an image with suffix '{path.suffix}'")
    path.write_bytes(buf.tobytes())
    return path
