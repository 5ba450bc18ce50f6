"""The text service: prompts from ``<prefix>/<device_id>/text/request``, replies as durable Result reports.

A request is ``{"id": "r1", "prompt": "...", "max_new_tokens": 32}`` (``max_new_tokens`` optional,
capped by ``text.max_new_tokens``). The reply is a ``Result`` with task ``text.reply`` (``id``, ``text``,
``stop_reason``, token counts, time to first token, decode speed) or ``text.error`` (``id``, ``error``).
The language model (``edge.text``) is imported only when ``text.model_dir`` is configured; without it
every request is answered with a "text model not configured" error.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

from edge.daemon.config import TextSettings
from edge.errors import EdgeDeployError
from edge.payload import PayloadError, parse_json

TASK_REPLY = "text.reply"
TASK_ERROR = "text.error"
_ID_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
MAX_REQUEST_BYTES = 65536
#: A request is one flat object.
MAX_REQUEST_DEPTH = 2


class TextRequestError(Exception):
    """A request that can't be answered; carries the request id when it could be read."""

    def __init__(self, message: str, request_id: str | None) -> None:
        super().__init__(message)
        self.request_id = request_id


class TextService:
    """Answers prompts with the configured language model, loaded on first use.

    Args:
        settings: the ``[text]`` table.
        threads: onnxruntime threads (``text.threads``, or the profile's when that is 0).
    """

    def __init__(self, settings: TextSettings, threads: int) -> None:
        self.settings = settings
        self.threads = threads
        self._generator = None

    @property
    def configured(self) -> bool:
        """Whether a model folder is configured."""
        return self.settings.model_dir is not None

    def _load(self):
        if self._generator is None:
            from edge.text import TextGenerator  # lazy: only a device that serves text needs tokenizers

            self._generator = TextGenerator(self.settings.model_dir, threads=self.threads)
        return self._generator

    def parse(self, payload: bytes) -> tuple[str, str, int]:
        """Check a request; return (id, prompt, max_new_tokens).

        Raises:
            TextRequestError: naming the field at fault.
        """
        try:
            body = parse_json(payload, "request", MAX_REQUEST_BYTES, MAX_REQUEST_DEPTH)
        except PayloadError as exc:
            raise TextRequestError(str(exc), None) from None
        if not isinstance(body, dict):
            raise TextRequestError(f"request is a JSON {type(body).__name__}; expected an object", None)
        rid = body.get("id")
        if not isinstance(rid, str) or not _ID_RE.match(rid):
            raise TextRequestError(f"field 'id' = {rid!r}; expected 1-64 of [A-Za-z0-9_.:-]", None)
        unknown = sorted(set(body) - {"id", "prompt", "max_new_tokens"})
        if unknown:
            raise TextRequestError(f"unknown field {unknown[0]!r}; expected id, prompt, max_new_tokens", rid)
        prompt = body.get("prompt")
        limit = self.settings.max_prompt_chars
        if not isinstance(prompt, str) or not prompt.strip() or len(prompt) > limit:
            raise TextRequestError(f"field 'prompt' must be non-empty text of at most {limit} characters", rid)
        cap = self.settings.max_new_tokens
        n = body.get("max_new_tokens", cap)
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= cap:
            raise TextRequestError(f"field 'max_new_tokens' = {n!r}; expected a whole number in 1..{cap}", rid)
        return rid, prompt, n

    def answer(self, payload: bytes) -> tuple[str, dict[str, Any]]:
        """Answer one request.

        Returns:
            (task, data) for a Result report: ``text.reply`` with the generation, or ``text.error``.
        """
        rid = None
        try:
            rid, prompt, max_new = self.parse(payload)
            if not self.configured:
                raise TextRequestError("text model not configured: set text.model_dir in the daemon config", rid)
            from edge.text import SamplingConfig

            result = self._load().generate(prompt, SamplingConfig(max_new_tokens=max_new))
        except TextRequestError as exc:
            return TASK_ERROR, {"id": exc.request_id, "error": str(exc)}
        except EdgeDeployError as exc:
            return TASK_ERROR, {"id": rid, "error": str(exc)}
        return TASK_REPLY, {
            "id": rid,
            "text": result.text,
            "stop_reason": result.stop_reason,
            "prompt_tokens": result.prompt_tokens,
            "new_tokens": len(result.token_ids),
            "time_to_first_token_s": round(result.time_to_first_token_s, 4),
            "decode_tokens_per_s": round(result.decode_tokens_per_s, 2),
        }

    def use_model_dir(self, model_dir: Path) -> None:
        """Answer from another model folder from now on (an update's slot); loaded at the next request."""
        self.close()
        self.settings = dataclasses.replace(self.settings, model_dir=Path(model_dir))

    def close(self) -> None:
        """Release the model."""
        if self._generator is not None:
            self._generator.close()
            self._generator = None
