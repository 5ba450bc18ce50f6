"""The daemon's text service on hostile requests (issue 17, defect 1): each is answered with text.error."""

from __future__ import annotations

import pytest

from edge.daemon.config import TextSettings
from edge.daemon.text_service import TextService


@pytest.fixture()
def service() -> TextService:
    return TextService(TextSettings(model_dir=None, max_new_tokens=64, max_prompt_chars=4000, threads=1), 1)


@pytest.mark.parametrize(
    ("payload", "error"),
    [
        # tokenizers raised TypeError on the lone surrogate: the daemon exited
        (b'{"id":"a","prompt":"x \\ud800"}', "request: a string: character 2 is U+D800, a lone surrogate; expected valid Unicode text"),
        # a 60 KB nested request: RecursionError
        (b'{"id":"a","prompt":' + b"[" * 30_000 + b"]" * 30_000 + b"}", "request: nested 30001 levels deep; expected at most 2"),
        (b"x" * 70_000, "request: 70000 bytes; expected at most 65536"),
        (b'{"id":"a","prompt":"hi","max_new_tokens":' + b"9" * 400 + b"}", "request: integer 999999999999…(400 digits) is out of range; expected at most ±9007199254740991 (2^53 - 1)"),
    ],
)
def test_hostile_requests_get_an_error_reply(service: TextService, payload: bytes, error: str) -> None:
    assert service.answer(payload) == ("text.error", {"id": None, "error": error})


def test_a_good_request_without_a_model_is_told_so(service: TextService) -> None:
    task, data = service.answer(b'{"id":"r1","prompt":"hello"}')
    assert (task, data["id"]) == ("text.error", "r1")
    assert data["error"] == "text model not configured: set text.model_dir in the daemon config"
