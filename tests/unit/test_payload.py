"""edge.payload: the JSON boundary (issue 17) — size, depth, integer range, finite numbers, valid text."""

from __future__ import annotations

import pytest

from edge.payload import MAX_INT, PayloadError, check_text, parse_json


def _error(data, **kw) -> str:
    with pytest.raises(PayloadError) as info:
        parse_json(data, "SRC", **kw)
    return str(info.value)


def test_plain_json_passes_unchanged() -> None:
    value = {"a": [1, -2, 3.5, None, True, "é"], "b": {"c": "[[[{{{"}, "n": MAX_INT, "m": -MAX_INT}
    import json

    assert parse_json(json.dumps(value), "SRC") == value
    assert parse_json(json.dumps(value).encode(), "SRC") == value


def test_brackets_inside_strings_do_not_count_as_depth() -> None:
    text = '{"s": "' + "[" * 100 + '\\"' + "{" * 100 + '", "t": [[1]]}'
    assert parse_json(text, "SRC", max_depth=3)["t"] == [[1]]
    assert _error('{"s": "\\"", "t": [[[1]]]}', max_depth=3) == "SRC: nested 4 levels deep; expected at most 3"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"[" * 40 + b"]" * 40, "SRC: nested 40 levels deep; expected at most 32"),
        (b"x" * 70_000, "SRC: 70000 bytes; expected at most 65536"),
        (b"\xff", "SRC: not UTF-8 text (byte 0: invalid start byte)"),
        (b"[9007199254740992]", "SRC: integer 9007199254740992 is out of range; expected at most ±9007199254740991 (2^53 - 1)"),
        (b"[-1" + b"0" * 30 + b"]", "SRC: integer -10000000000…(31 digits) is out of range; expected at most ±9007199254740991 (2^53 - 1)"),
        (b"[1e400]", "SRC: number 1e400 is not a finite float; expected a finite number"),
        (b"[-Infinity]", "SRC: -Infinity is not allowed; expected a finite number"),
        (b'{"\\udc00": 1}', "SRC: a string: character 0 is U+DC00, a lone surrogate; expected valid Unicode text"),
        (b"[1,]", "SRC: not valid JSON (Expecting value: line 1 column 4 (char 3))"),
    ],
)
def test_each_bound_names_the_source(data: bytes, message: str) -> None:
    assert _error(data) == message


def test_an_unterminated_string_of_escapes_is_one_token() -> None:
    # A scanner that retried a string at every quote would take minutes here (quadratic); ours ends it at
    # the end of the text, so the brackets after it are inside the string, as JSON reads them.
    data = '"' + '\\"' * 30_000 + "[" * 40
    assert _error(data, max_bytes=1 << 20).startswith("SRC: not valid JSON")


def test_check_text() -> None:
    assert check_text("ok é", "W") == "ok é"
    with pytest.raises(PayloadError, match=r"^W: character 1 is U\+D800, a lone surrogate"):
        check_text("a\ud800", "W")
