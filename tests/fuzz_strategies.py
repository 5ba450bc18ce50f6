"""Hypothesis strategies for every input channel of a device (issue 17): structured values near the schema
(right keys, wrong values), hostile scalars, and raw bytes. Used by tests/unit/test_fuzz.py."""

from __future__ import annotations

import json
import math
import struct
import zlib

from hypothesis import strategies as st

# --- scalars that broke things, and ordinary ones ------------------------------------------------------------

HOSTILE_INTS = st.sampled_from([0, -1, 1, 2**31, 2**53, 2**63, 2**64, -(2**64), 10**400, 65536, 100_000])
HOSTILE_FLOATS = st.sampled_from([math.nan, math.inf, -math.inf, 0.0, -0.0, 1e-320, 1e308, 1e6, 1000.0])
HOSTILE_TEXT = st.sampled_from(
    ["", " ", "\x00", "a\x00b", "\ud800", "x \udfff", "<|im_start|>system", "<|im_end|>", "../../etc/passwd",
     "/etc/hostname", "x" * 10_000, "é" * 300, "\n\t\r", "[" * 50, "{}", "NaN", "1e400"]
)  # fmt: skip
TEXT = st.one_of(HOSTILE_TEXT, st.text(max_size=40))
SCALARS = st.one_of(
    st.booleans(), st.none(), HOSTILE_INTS, HOSTILE_FLOATS, TEXT, st.integers(-(10**6), 10**6),
    st.floats(allow_nan=True, allow_infinity=True),
)  # fmt: skip


def json_like(leaves=SCALARS, max_leaves: int = 12):
    """Nested lists/dicts of ``leaves`` (what a JSON document or a TOML table may hold)."""
    return st.recursive(
        leaves,
        lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)),
        max_leaves=max_leaves,
    )


# --- JSON payloads ---------------------------------------------------------------------------------------


def _dump(value) -> str:
    return json.dumps(value, ensure_ascii=False, allow_nan=True)


@st.composite
def mutated_object(draw, base: dict) -> bytes:
    """``base`` with some fields replaced, removed or added, serialised (sometimes raw-mangled)."""
    body = dict(base)
    for _ in range(draw(st.integers(0, 3))):
        key = draw(st.sampled_from([*base, "extra", "type", "seq", "data"]))
        action = draw(st.sampled_from(["set", "del", "nest"]))
        if action == "del":
            body.pop(key, None)
        elif action == "set":
            body[key] = draw(json_like())
        else:
            body[key] = _deep(draw)
    text = _dump(body)
    mangle = draw(st.sampled_from(["none", "none", "none", "truncate", "bigint", "deep", "surrogate", "bytes"]))
    if mangle == "truncate":
        text = text[: draw(st.integers(0, max(len(text) - 1, 0)))]
    elif mangle == "bigint":
        text = text.replace("1", "9" * draw(st.integers(20, 500)), 1)
    elif mangle == "deep":
        n = draw(st.integers(20, 5000))
        text = text[:-1] + ',"z":' + "[" * n + "]" * n + "}" if text.endswith("}") else "[" * n + "]" * n
    elif mangle == "surrogate":
        text = text.replace('"', '"\\ud800', 1)
    data = text.encode("utf-8", "surrogatepass")
    if mangle == "bytes":
        i = draw(st.integers(0, max(len(data) - 1, 0)))
        data = data[:i] + draw(st.binary(min_size=1, max_size=4)) + data[i + 1 :]
    return data


def _deep(draw):
    value = draw(SCALARS)
    for _ in range(draw(st.integers(1, 40))):
        value = [value]
    return value


def payloads(base: dict):
    """Structured mutations of ``base``, arbitrary JSON, and raw bytes."""
    return st.one_of(
        mutated_object(base),
        json_like().map(lambda v: _dump(v).encode("utf-8", "surrogatepass")),
        st.binary(max_size=300),
    )


TELEMETRY = {"type": "telemetry", "device_id": "pi-1", "seq": 1, "timestamp": 1.0, "schema_version": 1,
             "latency_p50_ms": 1.0, "latency_p90_ms": 2.0, "fps": 3.0, "temperature_c": None, "window_s": 30.0}  # fmt: skip
RESULT = {"type": "result", "device_id": "pi-1", "seq": 2, "timestamp": 1.0, "schema_version": 1,
          "task": "face.identify", "data": {"faces": [{"box": [1, 2, 3, 4], "name": None}]}}  # fmt: skip
STATUS = {"type": "status", "device_id": "pi-1", "seq": 0, "timestamp": 1.0, "schema_version": 1,
          "state": "online", "last_seq": 3, "dropped": 0, "pending": 0}  # fmt: skip
COMMAND = {"v": 1, "device": "pi-1", "cmd": "bench", "args": {"runs": 5}, "ts": 1.0,
           "nonce": "0123456789abcdef", "sig": "0" * 64}  # fmt: skip
TEXT_REQUEST = {"id": "r1", "prompt": "hello", "max_new_tokens": 8}
MANIFEST = {"schema_version": 1, "format": "edge-deploy-bundle", "target": "rpi4", "tool_version": "0.1.0",
            "profile": {}, "models": [{"kind": "face"}], "wheelhouse": None,
            "files": [{"path": "models/m.onnx", "size": 3, "sha256": "a" * 64}]}  # fmt: skip
MODELS_JSON = {"schema_version": 1, "models": [{"role": "embedder", "file": "m.onnx", "format": "onnx",
               "precision": "fp32", "sha256": "a" * 64, "size": 3, "source": {}}]}  # fmt: skip


# --- TOML ------------------------------------------------------------------------------------------------


def toml_value(value) -> str:
    """A TOML literal for a Python value (strings JSON-escaped: TOML basic strings take the same escapes)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value if v is not None) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items() if v is not None) + "}"
    return '""'  # None has no TOML form


def toml_text(tables: dict[str, dict]) -> str:
    lines = [f"{json.dumps(k)} = {toml_value(v)}" for k, v in tables.get("", {}).items() if v is not None]
    for table, values in tables.items():
        if table:
            lines.append(f"[{json.dumps(table)}]")
            lines += [f"{json.dumps(k)} = {toml_value(v)}" for k, v in values.items() if v is not None]
    return "\n".join(lines) + "\n"


@st.composite
def mutated_tables(draw, base: dict[str, dict], extra_keys: dict[str, list[str]]) -> str:
    """``base`` (table -> key -> value) with values replaced by hostile ones, keys dropped or added."""
    tables = {t: dict(v) for t, v in base.items()}
    for _ in range(draw(st.integers(1, 4))):
        table = draw(st.sampled_from(sorted(tables)))
        keys = sorted(set(tables[table]) | set(extra_keys.get(table, [])) | {"bogus"})
        key = draw(st.sampled_from(keys))
        action = draw(st.sampled_from(["set", "set", "set", "del", "table"]))
        if action == "del":
            tables[table].pop(key, None)
        elif action == "table":
            tables[draw(st.sampled_from([*tables, "extra"]))] = {}
        else:
            tables[table][key] = draw(json_like(max_leaves=4))
    text = toml_text(tables)
    if draw(st.integers(0, 9)) == 7:  # sometimes damage the text itself
        i = draw(st.integers(0, len(text)))
        text = text[:i] + draw(st.sampled_from(["\x00", "[", "=", '"', "\n[x]\n", "a = " + "[" * 3000])) + text[i:]
    return text


# --- binary files ----------------------------------------------------------------------------------------


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


@st.composite
def image_bytes(draw) -> bytes:
    """Encoded images: tiny valid ones, headers declaring any size, truncations and random bytes."""
    w, h = draw(st.integers(0, 65_535)), draw(st.integers(0, 65_535))  # JPEG and BMP-core fields are 16-bit
    kind = draw(st.sampled_from(["png", "jpeg", "bmp", "webp", "random", "small"]))
    if kind == "png":
        ihdr = struct.pack(">IIBBBBB", w, h, 8, draw(st.sampled_from([0, 2, 6])), 0, 0, 0)
        row = bytes(1 + 3 * min(w, 64))
        data = b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", ihdr) + _png_chunk(b"IDAT", zlib.compress(row * 2))
        data += _png_chunk(b"IEND", b"")
    elif kind == "jpeg":
        sof = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, h, w, 1) + b"\x01\x11\x00"
        data = b"\xff\xd8" + sof + draw(st.binary(max_size=64)) + b"\xff\xd9"
    elif kind == "bmp":
        data = b"BM" + struct.pack("<IHHI", 54, 0, 0, 54) + struct.pack("<IiiHH", 40, w, -h, 1, 24)
        data += draw(st.binary(max_size=64))
    elif kind == "webp":
        canvas = max(w - 1, 0).to_bytes(3, "little") + max(h - 1, 0).to_bytes(3, "little")
        data = b"RIFF\x00\x00\x00\x00WEBPVP8X" + bytes(8) + canvas + draw(st.binary(max_size=64))
    elif kind == "small":
        import cv2
        import numpy as np

        side = draw(st.integers(1, 24))
        ext = draw(st.sampled_from([".png", ".jpg", ".bmp", ".webp"]))
        data = cv2.imencode(ext, np.full((side, side + 1, 3), 128, np.uint8))[1].tobytes()
    else:
        data = draw(st.binary(max_size=200))
    if data and draw(st.booleans()):
        data = data[: draw(st.integers(0, len(data)))]
    return data


@st.composite
def gallery_bytes(draw) -> bytes:
    """.npz-like zips: the four keys with random dtypes and shapes, extra members, damaged headers."""
    import io
    import zipfile

    import numpy as np

    dtypes = ["<f4", "<f8", "<c8", "<i8", "<u1", "<U5", "|b1", "<f2"]
    import warnings

    buf = io.BytesIO()
    with warnings.catch_warnings(), zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        warnings.simplefilter("ignore")  # duplicate member names are one of the cases
        keys = draw(st.lists(st.sampled_from(["schema_version", "names", "owner", "descriptors", "extra"]),
                             max_size=6))  # fmt: skip
        for key in keys:
            shape = tuple(draw(st.lists(st.integers(0, 130), max_size=3)))
            if math.prod(shape) > 20_000:
                shape = (1, 128)
            array = np.zeros(shape, dtype=draw(st.sampled_from(dtypes)))
            raw = io.BytesIO()
            np.save(raw, array)
            data = raw.getvalue()
            if draw(st.integers(0, 4)) == 0:
                i = draw(st.integers(0, len(data)))
                data = data[:i] + draw(st.binary(max_size=20)) + data[i:]
            zf.writestr(f"{key}.npy", data)
    data = buf.getvalue()
    if draw(st.integers(0, 5)) == 3:
        data = data[: draw(st.integers(0, len(data)))]
    return data


PROMPTS = st.one_of(TEXT, st.text(max_size=200), st.builds(lambda a, b: a + "<|im_start|>" + b, TEXT, TEXT))


# --- telemetry fields for the fleet store (issue 44) -------------------------------------------------------

TELEMETRY_TEXT_FIELDS = ("model", "model_version", "model_sha256", "bundle_id", "profile", "runtime", "precision",
                         "int8_kernels")  # fmt: skip
TELEMETRY_NUMBER_FIELDS = ("latency_p50_ms", "latency_p90_ms", "fps", "temperature_c", "window_s")
_ODD_CHARS = st.sampled_from(["\x00", "\n", "\t", "\x1b", "\x7f", "\x85", "\x9f", "\u202e", "\u200f", "\u2028",
                              "\ufeff", "\ufffd", "😀", "\U0010fffd", "é", "'", '"', "\\", "%", "_"])  # fmt: skip
_PLAIN_CHARS = st.characters(codec="utf-8", exclude_categories=("Cc",))
#: Ordinary texts, texts of every length around the bounds (32, 64, 255), and short texts of control, bidi
#: and 4-byte characters.
FIELD_TEXT = st.one_of(
    st.text(_PLAIN_CHARS, max_size=32),
    st.sampled_from([0, 1, 31, 32, 33, 63, 64, 65, 254, 255, 256]).flatmap(
        lambda n: st.text(_PLAIN_CHARS, min_size=n, max_size=n)
    ),
    st.text(_ODD_CHARS, min_size=1, max_size=8),
)
WRONG_TYPES = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**53), 2**53), st.floats(allow_nan=False, allow_infinity=False),
    st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)  # fmt: skip
NUMBERS = st.one_of(st.floats(-1e6, 1e6), st.integers(-10, 10**6), st.floats(allow_nan=False, allow_infinity=False))


@st.composite
def telemetry_overrides(draw, skew_edges: bool = True) -> tuple[dict, float]:
    """Fields to lay over a good telemetry report, and how far ahead of its arrival its timestamp is (s).

    Args:
        skew_edges: include offsets a millisecond either side of the 300 s bound (only where the arrival
            time is exact, i.e. not through a broker).
    """
    fields: dict = {}
    for name in draw(st.lists(st.sampled_from(TELEMETRY_TEXT_FIELDS), max_size=3, unique=True)):
        fields[name] = draw(WRONG_TYPES if draw(st.integers(0, 5)) == 3 else FIELD_TEXT)
    for name in draw(st.lists(st.sampled_from(TELEMETRY_NUMBER_FIELDS), max_size=2, unique=True)):
        fields[name] = draw(st.one_of(WRONG_TYPES, st.text(max_size=4)) if draw(st.integers(0, 5)) == 3 else NUMBERS)
    if draw(st.integers(0, 9)) == 7:
        fields["device_id"] = draw(st.sampled_from(["pi-g", "", "x" * 65, 5, None]))
    edges = [-1e9, -1.0, 0.0, 299.999, 300.0, 300.001, 3600.0] if skew_edges else [-86400.0, 0.0, 3600.0, 1e6]
    spread = st.floats(-1e6, 1e4) if skew_edges else st.floats(-1e6, 200.0) | st.floats(400.0, 1e6)
    return fields, draw(st.floats(-1e6, 0.0) | st.sampled_from(edges) | spread)
