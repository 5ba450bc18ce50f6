"""Read a GGUF file's structure within its bounds: header, metadata and tensor infos, memory-mapped.

Every count and length is checked against the bytes left in the file before anything is read or
allocated, as llama.cpp's ``gguf_init_from_file`` does: the header's tensor and key counts, string lengths,
array lengths times their item size, nesting depth, tensor dimensions, types and offsets (with Python
ints: no wrap-around), and every tensor's data inside the file. Metadata values are decoded only when
asked for (:meth:`GgufFile.value`), so a file costs memory for the keys read, not for every item it
declares; tensor data are views of the memory map. gguf-py supplies the tensor type table only (its
``GGUFReader`` builds a Python object per array item, before any count is checked).

Usage::

    f = scan_gguf(Path("model.gguf"))
    f.value("general.architecture"), [t.name for t in f.tensors]
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edge.errors import ConversionError, InputError, require

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
#: Arrays of arrays are allowed this deep (llama.cpp reads none; writers emit at most one level).
MAX_ARRAY_DEPTH = 3
#: Items in one metadata array, and in all of them together (the largest vocabularies hold 262,144 tokens).
MAX_ARRAY_ITEMS = 1 << 20
MAX_METADATA_ITEMS = 1 << 22
MAX_TENSORS = 1 << 16
#: llama.cpp's GGML_MAX_DIMS and GGML_MAX_NAME (names hold at most 63 bytes).
MAX_DIMS = 4
MAX_NAME_BYTES = 63
_ALIGNMENT_KEY = "general.alignment"
_DEFAULT_ALIGNMENT = 32
_MIN_KV_BYTES = 8 + 4 + 1  # key length, value type, smallest value
_MIN_TENSOR_INFO_BYTES = 8 + 4 + 4 + 8  # name length, dimension count, type, offset
_STRING, _ARRAY = 8, 9
_U64 = struct.Struct("<Q")
#: GGUF value type -> (name, struct format); strings and arrays are read apart.
_SCALARS = {
    0: ("uint8", "<B"),
    1: ("int8", "<b"),
    2: ("uint16", "<H"),
    3: ("int16", "<h"),
    4: ("uint32", "<I"),
    5: ("int32", "<i"),
    6: ("float32", "<f"),
    7: ("bool", "<?"),
    10: ("uint64", "<Q"),
    11: ("int64", "<q"),
    12: ("float64", "<d"),
}
_TYPE_NAMES = {**{k: v[0] for k, v in _SCALARS.items()}, _STRING: "string", _ARRAY: "array"}
#: tensor types gguf-py maps to a typed array; every other type is read as its raw bytes (as gguf-py does)
_TYPED_TENSORS = {"F16": np.float16, "F32": np.float32, "F64": np.float64, "I8": np.int8, "I16": np.int16}
_TYPED_TENSORS |= {"I32": np.int32, "I64": np.int64}


@dataclass(frozen=True)
class GgufTensor:
    """One tensor: ``shape`` in GGUF order (innermost first), ``data`` a view of the memory map."""

    name: str
    tensor_type: Any  # gguf.GGMLQuantizationType
    shape: tuple[int, ...]
    n_bytes: int
    data_offset: int
    data: np.ndarray


@dataclass(frozen=True)
class _Slot:
    """Where a metadata value lies (checked), to decode it when asked for."""

    value_type: int
    offset: int
    end: int


class GgufFile:
    """A checked GGUF: its version, metadata (decoded on demand) and tensors."""

    def __init__(self, path: Path, buf: np.ndarray, version: int, slots: dict[str, _Slot]) -> None:
        self.path, self.version = path, version
        self._buf, self._slots = buf, slots
        self.tensors: list[GgufTensor] = []

    def __contains__(self, key: str) -> bool:
        return key in self._slots

    def value(self, key: str) -> Any:
        """The value of metadata ``key``: an int, float, bool, str or a list of them.

        Raises:
            KeyError: the file has no such key.
            ConversionError: a string in it is not UTF-8.
        """
        slot = self._slots[key]
        return _Cursor(self.path, self._buf, slot.offset).value(slot.value_type, key, slot.end)


class _Cursor:
    """Reads forward through ``buf``, refusing any read past its end."""

    def __init__(self, path: Path, buf: np.ndarray, pos: int = 0) -> None:
        self.path, self.buf, self.pos, self.size = path, buf, pos, len(buf)
        self.view = buf.data

    def fail(self, what: str, expected: str) -> ConversionError:
        return ConversionError(f"{self.path}: {what} at byte {self.pos}; expected {expected}")

    def need(self, nbytes: int, what: str) -> None:
        left = self.size - self.pos
        if nbytes > left:
            raise self.fail(f"{what} needs {nbytes} bytes", f"at most {left}, the rest of the file (truncated GGUF?)")

    def scalar(self, fmt: str, what: str) -> Any:
        n = struct.calcsize(fmt)
        self.need(n, what)
        (v,) = struct.unpack_from(fmt, self.view, self.pos)
        self.pos += n
        return v

    def text(self, what: str, limit: int | None = None) -> str:
        n = self.scalar("<Q", f"{what} length")
        if limit is not None and n > limit:
            raise self.fail(f"{what} length = {n}", f"at most {limit}")
        self.need(n, f"{what} of {n} bytes")
        start, self.pos = self.pos, self.pos + n
        try:
            return str(self.view[start : self.pos], "utf-8")
        except UnicodeDecodeError as exc:
            self.pos = start
            raise self.fail(f"{what} is not UTF-8 ({exc.reason})", "UTF-8 text") from exc

    def skip_texts(self, count: int, what: str) -> None:
        """Step over ``count`` strings, checking each length (a tight loop: vocabularies hold 10^5)."""
        view, pos, size = self.view, self.pos, self.size
        for _ in range(count):
            n = _U64.unpack_from(view, pos)[0] if size - pos >= 8 else 8
            if n > size - pos - 8:
                self.pos = pos
                self.text(what)  # raises, naming the length and the bytes left
            pos += 8 + n
        self.pos = pos

    def texts(self, count: int, end: int, what: str) -> list[str]:
        """``count`` strings ending at ``end`` (lengths already checked by :meth:`skip_texts`)."""
        data, pos, out = self.view[self.pos : end].tobytes(), 0, []  # one copy: slicing bytes is fast
        try:
            for _ in range(count):
                n = _U64.unpack_from(data, pos)[0]
                out.append(data[pos + 8 : pos + 8 + n].decode("utf-8"))
                pos += 8 + n
        except UnicodeDecodeError as exc:
            self.pos += pos
            raise self.fail(f"{what} #{len(out)} is not UTF-8 ({exc.reason})", "UTF-8 text") from exc
        self.pos += pos
        return out

    def value_type(self, what: str) -> int:
        t = self.scalar("<I", what)
        if t not in _TYPE_NAMES:
            self.pos -= 4
            raise self.fail(f"{what} = {t}", f"a GGUF value type ({', '.join(_TYPE_NAMES.values())})")
        return t

    def value(self, t: int, key: str, end: int) -> Any:
        """Decode a value of type ``t`` that ends at ``end`` (already checked by :class:`_Scan`)."""
        if t == _STRING:
            return self.text(f"metadata key {key!r} string")
        if t != _ARRAY:
            return self.scalar(_SCALARS[t][1], key)
        item, n = self.scalar("<I", key), self.scalar("<Q", key)
        if item in _SCALARS:
            fmt = _SCALARS[item][1]
            values = np.frombuffer(self.buf, np.dtype(fmt), n, self.pos).tolist()
            self.pos += n * struct.calcsize(fmt)
            return values
        if item == _STRING:
            return self.texts(n, end, f"metadata key {key!r} string")
        return [self.value(item, key, end) for _ in range(n)]


class _Scan(_Cursor):
    """Walks the whole structure once, checking every count against the bytes left."""

    def __init__(self, path: Path, buf: np.ndarray) -> None:
        super().__init__(path, buf, 8)
        self.items = 0

    def counts(self) -> tuple[int, int]:
        n_tensors = self.scalar("<Q", "tensor count")
        n_kv = self.scalar("<Q", "metadata key count")
        if n_tensors > MAX_TENSORS:
            raise self.fail(f"tensor count = {n_tensors}", f"at most {MAX_TENSORS}")
        floor = n_tensors * _MIN_TENSOR_INFO_BYTES + n_kv * _MIN_KV_BYTES
        self.need(floor, f"a header of {n_tensors} tensors and {n_kv} metadata keys")
        return n_tensors, n_kv

    def metadata(self, n_kv: int) -> dict[str, _Slot]:
        slots: dict[str, _Slot] = {}
        for i in range(n_kv):
            key = self.text(f"metadata key #{i}")
            if key in slots:
                raise self.fail(f"metadata key {key!r} repeated", "each key once")
            t, start = self.value_type(f"metadata key {key!r} type"), self.pos
            self.check_value(t, key, 0)
            slots[key] = _Slot(t, start, self.pos)
        return slots

    def check_value(self, t: int, key: str, depth: int) -> None:
        if t == _STRING:
            self.skip_texts(1, f"metadata key {key!r} string")
        elif t != _ARRAY:
            self.need(struct.calcsize(_SCALARS[t][1]), f"metadata key {key!r} {_TYPE_NAMES[t]}")
            self.pos += struct.calcsize(_SCALARS[t][1])
        else:
            self.check_array(key, depth + 1)

    def check_array(self, key: str, depth: int) -> None:
        if depth > MAX_ARRAY_DEPTH:
            raise self.fail(f"metadata key {key!r}: arrays nested {depth} deep", f"at most {MAX_ARRAY_DEPTH}")
        item = self.value_type(f"metadata key {key!r} array item type")
        n = self.scalar("<Q", f"metadata key {key!r} array length")
        least = struct.calcsize(_SCALARS[item][1]) if item in _SCALARS else 8 if item == _STRING else 12
        self.need(n * least, f"metadata key {key!r}: array of {n} {_TYPE_NAMES[item]}")
        self.items += n
        if n > MAX_ARRAY_ITEMS or self.items > MAX_METADATA_ITEMS:
            raise self.fail(
                f"metadata key {key!r}: array of {n} items ({self.items} in all)",
                f"at most {MAX_ARRAY_ITEMS} in an array and {MAX_METADATA_ITEMS} in all",
            )
        if item in _SCALARS:
            self.pos += n * least
        elif item == _STRING:
            self.skip_texts(n, f"metadata key {key!r} string")
        else:
            for _ in range(n):
                self.check_value(item, key, depth)


def check_header(path: Path) -> int:
    """Check the magic and version of a GGUF before anything else reads it.

    Returns:
        The GGUF version.

    Raises:
        InputError: the file does not exist.
        ConversionError: the file is too short, has the wrong magic or an unsupported version.
    """
    if not path.is_file():
        raise InputError(f"{path}: no such file; expected a GGUF model")
    with path.open("rb") as fh:
        head = fh.read(8)
    if len(head) < 8:
        raise ConversionError(f"{path}: truncated GGUF ({len(head)} bytes); expected at least an 8-byte header")
    if head[:4] != GGUF_MAGIC:
        raise ConversionError(f"{path}: not a GGUF file (magic {head[:4]!r}); expected {GGUF_MAGIC!r}")
    (version,) = struct.unpack("<I", head[4:8])
    if version not in SUPPORTED_VERSIONS:
        raise ConversionError(
            f"{path}: GGUF version {version}; expected one of {', '.join(map(str, SUPPORTED_VERSIONS))}"
        )
    return version


def scan_gguf(path: Path) -> GgufFile:
    """Check a GGUF's whole structure within the file's bounds and map it.

    Args:
        path: the ``.gguf`` file.

    Returns:
        The file's metadata slots and tensors (data memory-mapped, nothing copied).

    Raises:
        InputError: the file does not exist.
        ConversionError: a count, length, type, depth or offset the file cannot hold; the message names the
            file, the field or key, the value and what was expected.
    """
    path = Path(path)
    version = check_header(path)
    try:
        buf = np.memmap(path, dtype=np.uint8, mode="r")
    except (OSError, ValueError) as exc:
        raise ConversionError(f"{path}: cannot map the GGUF ({exc})") from exc
    scan = _Scan(path, buf)
    n_tensors, n_kv = scan.counts()
    gguf = GgufFile(path, buf, version, scan.metadata(n_kv))
    infos = [_tensor_info(scan, i) for i in range(n_tensors)]
    align = _alignment(gguf)
    base = -(-scan.pos // align) * align
    names: set[str] = set()
    for name, dims, ggml_type, offset in infos:
        if name in names:
            raise ConversionError(f"{path}: tensor {name!r} repeated; expected each tensor name once")
        names.add(name)
        gguf.tensors.append(_tensor(gguf, (name, dims, ggml_type, offset), base, align))
    return gguf


def _tensor_info(scan: _Scan, index: int) -> tuple[str, tuple[int, ...], int, int]:
    """Name, dimensions, type id and offset of tensor ``index``; bounds are checked by :func:`_tensor`."""
    name = scan.text(f"tensor #{index} name", MAX_NAME_BYTES)
    n_dims = scan.scalar("<I", f"tensor {name!r} dimension count")
    if n_dims > MAX_DIMS:
        raise scan.fail(f"tensor {name!r} dimension count = {n_dims}", f"at most {MAX_DIMS}")
    scan.need(8 * n_dims, f"tensor {name!r}: {n_dims} dimensions")
    dims = struct.unpack_from(f"<{n_dims}Q", scan.view, scan.pos)
    scan.pos += 8 * n_dims
    ggml_type = scan.scalar("<I", f"tensor {name!r} type")
    offset = scan.scalar("<Q", f"tensor {name!r} offset")
    return name, dims, ggml_type, offset


def _alignment(gguf: GgufFile) -> int:
    if _ALIGNMENT_KEY not in gguf:
        return _DEFAULT_ALIGNMENT
    slot = gguf._slots[_ALIGNMENT_KEY]
    if slot.value_type != 4:
        raise ConversionError(f"{gguf.path}: {_ALIGNMENT_KEY} has type {_TYPE_NAMES[slot.value_type]}; expected uint32")
    value = gguf.value(_ALIGNMENT_KEY)
    if value == 0 or value & (value - 1):
        raise ConversionError(f"{gguf.path}: {_ALIGNMENT_KEY} = {value}; expected a power of two")
    return value


def _tensor(gguf: GgufFile, info: tuple[str, tuple[int, ...], int, int], base: int, align: int) -> GgufTensor:
    """The tensor ``info`` describes, its size computed with Python ints and its data inside the file."""
    g = require("gguf", "convert", "reading a GGUF file")
    name, dims, type_id, offset = info
    where = f"{gguf.path}: tensor {name!r}"
    try:
        ggml_type = g.GGMLQuantizationType(type_id)
        block, type_size = g.GGML_QUANT_SIZES[ggml_type]
    except (ValueError, KeyError) as exc:
        raise ConversionError(f"{where} has type {type_id}; expected a ggml tensor type") from exc
    n_elems = 1
    for d in dims:
        n_elems *= d
    if n_elems >= 1 << 63:
        raise ConversionError(f"{where} has shape {list(dims)} ({n_elems} elements); expected fewer than 2^63")
    row = dims[0] if dims else 1
    if row % block:
        raise ConversionError(
            f"{where}: row of {row} elements; expected a multiple of the {ggml_type.name} block {block}"
        )
    if offset % align:
        raise ConversionError(f"{where}: offset {offset}; expected a multiple of the alignment {align}")
    n_bytes = n_elems // block * type_size
    start, size = base + offset, len(gguf._buf)
    if start + n_bytes > size:
        raise ConversionError(
            f"{where}: data of {n_bytes} bytes at offset {offset} ends at byte {start + n_bytes}; "
            f"expected at most the file's {size} bytes (truncated GGUF?)"
        )
    shape = tuple(reversed(dims))
    dtype = _TYPED_TENSORS.get(ggml_type.name)
    raw = gguf._buf[start : start + n_bytes]
    if dtype is not None:
        data = raw.view(dtype).reshape(shape)
    else:
        data = raw.reshape(*shape[:-1], shape[-1] // block * type_size) if shape else raw
    return GgufTensor(name, ggml_type, dims, n_bytes, start, data)
