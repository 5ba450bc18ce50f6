"""Reading photos on the device: bytes on disk -> uint8 RGB array, with errors that name the file."""

from __future__ import annotations

import glob
from collections.abc import Sequence
from pathlib import Path

import cv2
import numpy as np

from edge.errors import InputError

#: Largest image file read (a 24 MP JPEG is ~10 MB).
MAX_FILE_BYTES = 64 << 20
#: Pixel limit when no board profile says otherwise (``MemorySpec.max_image_pixels`` of a 4 GB machine).
DEFAULT_MAX_PIXELS = 1 << 26
#: The formats whose size is read from the header before decoding; others are refused.
FORMATS = ("JPEG", "PNG", "BMP", "WebP")
#: Suffixes of the files a folder or a glob pattern gives (``image_files``); a file named directly may have any.
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp")
_JPEG_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    """Width and height from the first SOF segment of a JPEG, or None when there is none."""
    i = 2
    while i + 4 <= len(data):
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in (0x01, *range(0xD0, 0xD8)):  # standalone markers carry no length
            i += 2
            continue
        length = int.from_bytes(data[i + 2 : i + 4], "big")
        if marker in _JPEG_SOF:
            if i + 9 > len(data):
                return None
            return int.from_bytes(data[i + 7 : i + 9], "big"), int.from_bytes(data[i + 5 : i + 7], "big")
        if length < 2 or marker == 0xDA:  # a scan before any frame header
            return None
        i += 2 + length
    return None


def _webp_size(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8X" and len(data) >= 30:
        return 1 + int.from_bytes(data[24:27], "little"), 1 + int.from_bytes(data[27:30], "little")
    if chunk == b"VP8L" and len(data) >= 25:
        b = data[21:25]
        return 1 + (b[0] | (b[1] & 0x3F) << 8), 1 + (b[1] >> 6 | b[2] << 2 | (b[3] & 0x0F) << 10)
    if chunk == b"VP8 " and len(data) >= 30:
        return int.from_bytes(data[26:28], "little") & 0x3FFF, int.from_bytes(data[28:30], "little") & 0x3FFF
    return None


def image_header(data: bytes) -> tuple[str, tuple[int, int] | None] | None:
    """The format and (width, height) an encoded image declares, read without decoding it.

    Returns:
        None for bytes of none of ``FORMATS``; else (format, size), size None when the header is damaged.
    """
    if data[:3] == b"\xff\xd8\xff":
        return "JPEG", _jpeg_size(data)
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        ok = len(data) >= 24 and data[12:16] == b"IHDR"
        return "PNG", (int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")) if ok else None
    if data[:2] == b"BM" and len(data) >= 26:
        if int.from_bytes(data[14:18], "little") == 12:  # OS/2 BITMAPCOREHEADER
            return "BMP", (int.from_bytes(data[18:20], "little"), int.from_bytes(data[20:22], "little"))
        w, h = (int.from_bytes(data[o : o + 4], "little", signed=True) for o in (18, 22))
        return "BMP", (abs(w), abs(h))
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "WebP", _webp_size(data)
    return None


def check_header(data: bytes, name: str, max_pixels: int = DEFAULT_MAX_PIXELS) -> tuple[int, int]:
    """Refuse an encoded image before decoding it: unknown format, damaged header, or too many pixels.

    Returns:
        (width, height) as the header declares them.

    Raises:
        InputError: naming the source, the declared size and the limit.
    """
    header = image_header(data)
    if header is None:
        raise InputError(f"{name}: not an image ({len(data)} bytes with no {', '.join(FORMATS)} signature)")
    fmt, size = header
    if size is None or min(size) < 1:
        raise InputError(f"{name}: not an image (a {fmt} signature but no readable size in {len(data)} bytes)")
    width, height = size
    if width * height > max_pixels:
        raise InputError(
            f"{name}: {fmt} image of {width}x{height} = {width * height / 1e6:.1f} megapixels; expected at most "
            f"{max_pixels / 1e6:.1f} (refused before decoding; the limit follows the board's memory)"
        )
    return width, height


def decode_image(data: bytes, name: str, max_pixels: int = DEFAULT_MAX_PIXELS) -> np.ndarray:
    """Decode an encoded image (JPEG, PNG, BMP, WebP) held in memory, checking its header first.

    Args:
        data: the encoded bytes.
        name: what to call the source in error messages (usually the file name).
        max_pixels: largest width x height accepted, read from the header before decoding.

    Returns:
        uint8 array [H, W, 3], RGB. Grey images are expanded to three channels, alpha is dropped.

    Raises:
        InputError: if the bytes are empty, of another format, declare too many pixels, or cv2 cannot
            decode them.
    """
    if len(data) == 0:
        raise InputError(f"{name}: empty file (0 bytes); expected an image")
    check_header(data, name, max_pixels)
    buf = np.frombuffer(data, dtype=np.uint8)
    try:
        bgr = cv2.imdecode(buf, cv2.IMREAD_COLOR)
    except cv2.error as exc:  # e.g. OpenCV's own size limit, or a decoder's allocation failure
        raise InputError(f"{name}: not an image (cv2 could not decode {len(data)} bytes: {exc.err})") from None
    if bgr is None or bgr.size == 0:
        raise InputError(f"{name}: not an image (cv2 could not decode {len(data)} bytes)")
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


def load_image(path: str | Path, max_pixels: int = DEFAULT_MAX_PIXELS) -> np.ndarray:
    """Read an image file as uint8 RGB.

    Args:
        path: image file.
        max_pixels: largest width x height accepted (see ``decode_image``).

    Returns:
        uint8 array [H, W, 3], RGB.

    Raises:
        InputError: if the file is missing, a directory, larger than ``MAX_FILE_BYTES``, empty or not a
            decodable image within the limits.
    """
    path = Path(path)
    shown = str(path).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    try:
        st = path.stat()
    except FileNotFoundError:
        raise InputError(f"{shown}: no such file; expected an image") from None
    except OSError as exc:
        raise InputError(f"{shown}: cannot read ({exc.strerror})") from None
    if not path.is_file():
        raise InputError(f"{shown}: not a file; expected an image")
    if st.st_size > MAX_FILE_BYTES:
        raise InputError(f"{shown}: {st.st_size} bytes; expected an image file of at most {MAX_FILE_BYTES}")
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise InputError(f"{shown}: cannot read ({exc.strerror})") from exc
    return decode_image(data, shown, max_pixels)


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


def _shown(path: str | Path) -> str:
    return str(path).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _folder_images(folder: Path) -> list[Path]:
    found = sorted(
        p for p in folder.iterdir() if p.is_file() and not p.name.startswith(".") and p.suffix.lower() in IMAGE_SUFFIXES
    )
    if not found:
        raise InputError(
            f"{_shown(folder)}: a folder with no image file; expected {', '.join(IMAGE_SUFFIXES)} files in it"
        )
    return found


def _pattern_images(pattern: str) -> list[Path]:
    found = sorted(
        Path(p)
        for p in glob.glob(pattern, recursive=True)
        if Path(p).is_file() and Path(p).suffix.lower() in IMAGE_SUFFIXES
    )
    if not found:
        raise InputError(f"{_shown(pattern)}: the pattern matches no image file ({', '.join(IMAGE_SUFFIXES)})")
    return found


def image_files(sources: Sequence[str | Path]) -> list[Path]:
    """The image files that files, folders and glob patterns name, in order, each once.

    Args:
        sources: a file is taken as it is (a missing one too: ``load_image`` then says so); a folder gives the
            image files directly in it (by suffix, ``IMAGE_SUFFIXES``; sorted; hidden files and sub-folders
            left out); a pattern with ``*``, ``?`` or ``[`` that names no existing path gives the image files it
            matches (sorted; ``**`` matches sub-folders).

    Returns:
        The files, duplicates (the same path twice) dropped.

    Raises:
        InputError: a folder with no image file, or a pattern that matches none, naming it.
    """
    out: list[Path] = []
    for source in sources:
        path = Path(source)
        if path.is_dir():
            out += _folder_images(path)
        elif not path.exists() and any(c in str(source) for c in "*?["):
            out += _pattern_images(str(source))
        else:
            out.append(path)
    unique: dict[Path, Path] = {}
    for p in out:
        unique.setdefault(p.absolute(), p)
    return list(unique.values())
