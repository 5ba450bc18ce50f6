"""The hostile files of issue 17, made exactly and cheaply (no multi-GB buffers in the test process)."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def zero_png(path: Path, width: int, height: int) -> Path:
    """A valid, all-black 8-bit RGB PNG of ``width`` x ``height``, written row by row.

    Every row is deflated as its own block after a full flush (no history), so one row's compressed bytes
    repeat for every row: a 40000 x 40000 image is 4.7 MB, like the file the outside test used.
    """
    row = bytes(1 + 3 * width)  # filter byte 0 + black pixels
    comp = zlib.compressobj(9)
    first = comp.compress(row) + comp.flush(zlib.Z_FULL_FLUSH)
    block = comp.compress(row) + comp.flush(zlib.Z_FULL_FLUSH)
    tail = comp.flush(zlib.Z_FINISH)
    # The trailer's Adler-32 must cover every row: recompute it (the stream above saw only two rows).
    adler = 1
    for _ in range(height):
        adler = zlib.adler32(row, adler)
    body = first + block * (height - 1) + tail[:-4] + struct.pack(">I", adler)
    with open(path, "wb") as fh:
        fh.write(b"\x89PNG\r\n\x1a\n")
        fh.write(_chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)))
        fh.write(_chunk(b"IDAT", body))
        fh.write(_chunk(b"IEND", b""))
    return path
