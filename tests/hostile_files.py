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


def gallery_arrays() -> dict:
    """The arrays of a valid one-person gallery file."""
    import numpy as np

    return {
        "schema_version": np.array(1, np.int64),
        "names": np.array(["ada"]),
        "owner": np.zeros(1, np.int64),
        "descriptors": np.full((1, 128), 0.1, np.float32),
    }


def npy_bytes(array) -> bytes:
    import io

    import numpy as np

    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


def zip_bomb_gallery(path: Path, unpacked: int = 1536 << 20) -> Path:
    """A valid gallery plus an unknown member ``bomb.npy`` of ``unpacked`` zero bytes (1.5 GiB in ~1.5 MB)."""
    import zipfile

    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for key, array in gallery_arrays().items():
            zf.writestr(f"{key}.npy", npy_bytes(array))
        with zf.open("bomb.npy", "w", force_zip64=True) as fh:
            block = bytes(16 << 20)
            for _ in range(unpacked // len(block)):
                fh.write(block)
    return path


def huge_header_gallery(path: Path) -> Path:
    """A gallery whose ``descriptors`` header claims (10^10, 128) float32: 4.66 TiB."""
    import zipfile

    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (10000000000, 128), }"
    header += " " * (63 - (len(header) + 10) % 64) + "\n"
    npy = b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode() + bytes(512)
    arrays = gallery_arrays()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for key in ("schema_version", "names", "owner"):
            zf.writestr(f"{key}.npy", npy_bytes(arrays[key]))
        zf.writestr("descriptors.npy", npy)
    return path


# --- GGUF (issue 44, item 6): files whose counts, lengths or offsets the file cannot hold --------------------

GGUF_UINT8, GGUF_STRING, GGUF_ARRAY = 0, 8, 9


def gguf_string(text: str) -> bytes:
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


def gguf_kv(key: str, value_type: int, payload: bytes) -> bytes:
    """One metadata entry: key, value type, the value's bytes as given."""
    return gguf_string(key) + struct.pack("<I", value_type) + payload


def gguf_tensor_info(name: str, dims: tuple[int, ...], ggml_type: int, offset: int) -> bytes:
    return gguf_string(name) + struct.pack(f"<I{len(dims)}QIQ", len(dims), *dims, ggml_type, offset)


def gguf_file(path: Path, kvs: list[bytes], tensors: list[bytes] = (), data: bytes = b"", size: int = 0) -> Path:
    """A GGUF v3 of these entries and tensor infos, the data section at the next 32-byte boundary, then zeros
    up to ``size`` bytes."""
    body = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)) + b"".join(kvs) + b"".join(tensors)
    if data:
        body += bytes(-len(body) % 32) + data
    path.write_bytes(body + bytes(max(0, size - len(body))))
    return path


def gguf_huge_array(path: Path) -> Path:
    """100 bytes declaring a metadata array of 2^60 uint8."""
    return gguf_file(path, [gguf_kv("evil", GGUF_ARRAY, struct.pack("<IQ", GGUF_UINT8, 1 << 60))], size=100)


def gguf_nested_arrays(path: Path, depth: int = 5000) -> Path:
    """A metadata value that is ``depth`` arrays, each holding the next, around one uint8."""
    payload = struct.pack("<IQ", GGUF_ARRAY, 1) * (depth - 1) + struct.pack("<IQ", GGUF_UINT8, 1) + b"\x00"
    return gguf_file(path, [gguf_kv("deep", GGUF_ARRAY, payload)])


def gguf_tensor_at(path: Path, offset: int, dims: tuple[int, ...] = (8,)) -> Path:
    """One F32 tensor at ``offset`` in a 32-byte data section starting at byte 96 (2^64-64 wraps to 32)."""
    return gguf_file(path, [], [gguf_tensor_info("output_norm.weight", dims, 0, offset)], bytes(32))
