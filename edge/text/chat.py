"""The chat template without jinja2.

SmolLM2's template (in the GGUF, Jinja) is ChatML: each message is
``<|im_start|>{role}\\n{content}<|im_end|>\\n``, a default system message goes first when the
conversation has none, and ``<|im_start|>assistant\\n`` asks for the reply. The converter derives these
pieces from the Jinja source on the host (where jinja2 is) and checks that they reproduce it exactly on
several conversations; the device only concatenates strings.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from edge.errors import InputError
from edge.payload import PayloadError, check_text

ROLES = ("system", "user", "assistant")
#: Text shaped like a ChatML control token (``<|im_start|>``, ``<|im_end|>``, ``<|endoftext|>``, ...): the
#: tokenizer turns it into the control token itself, so a message holding it could open its own turn.
CONTROL_TOKEN = re.compile(r"<\|[^<>|\s]{1,48}\|>")


@dataclass(frozen=True)
class ChatFormat:
    """A message is ``message_prefix + role + role_suffix + content + message_suffix``."""

    message_prefix: str
    role_suffix: str
    message_suffix: str
    generation_prompt: str
    default_system: str | None = None

    def to_dict(self) -> dict:
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, data: Mapping, where: str = "generation.json") -> ChatFormat:
        """Read the ``chat_format`` table of generation.json.

        Raises:
            InputError: a key is missing or not a string.
        """
        values = {}
        for key in ("message_prefix", "role_suffix", "message_suffix", "generation_prompt"):
            value = data.get(key)
            if not isinstance(value, str):
                raise InputError(f"{where}: chat_format.{key} = {value!r}; expected a string")
            values[key] = value
        default = data.get("default_system")
        if default is not None and not isinstance(default, str):
            raise InputError(f"{where}: chat_format.default_system = {default!r}; expected a string or null")
        return cls(**values, default_system=default)

    def markers(self) -> tuple[str, ...]:
        """The template's own control text (e.g. ``<|im_start|>``, ``<|im_end|>``), which content may not hold."""
        parts = (self.message_prefix, self.message_suffix, self.generation_prompt)
        return tuple(sorted({p.strip() for p in parts if p.strip()} - {""}))

    def check_content(self, what: str, content: str, reserved: Sequence[str] = ()) -> None:
        """Refuse message content that would be read as structure, or that no tokenizer can take.

        Args:
            what: how the error names the content.
            content: the message text.
            reserved: the tokenizer's special tokens (a SentencePiece ``<s>``/``</s>`` is not ChatML-shaped).

        Raises:
            InputError: the content holds a control token (``<|im_start|>``...), a reserved token or the
                template's markers, or a lone surrogate.
        """
        try:
            check_text(content, what)
        except PayloadError as exc:
            raise InputError(str(exc)) from None
        found = CONTROL_TOKEN.search(content)
        hits = [(content.find(m), m) for m in (*self.markers(), *reserved) if m and m in content]
        if found:
            hits.append((found.start(), found.group()))
        if hits:
            pos, token = min(hits)
            raise InputError(
                f"{what} holds the control token {token!r} at character {pos}; expected plain text (a message may "
                "not open or close a turn)"
            )

    def message(self, role: str, content: str) -> str:
        """One formatted message."""
        return self.message_prefix + role + self.role_suffix + content + self.message_suffix

    def render(
        self, messages: Sequence[Mapping[str, str]], add_generation_prompt: bool = True, reserved: Sequence[str] = ()
    ) -> str:
        """The prompt text for a conversation.

        Args:
            messages: ``[{"role": "user", "content": "..."}, ...]``; roles system, user or assistant.
            add_generation_prompt: end with the assistant's opening so the model replies.
            reserved: text no message may hold (the tokenizer's special tokens), besides the template's markers.

        Raises:
            InputError: a message without a known role or with non-text content.
        """
        parts = []
        for i, msg in enumerate(messages):
            role, content = msg.get("role"), msg.get("content")
            if role not in ROLES:
                raise InputError(f"messages[{i}].role = {role!r}; expected one of {', '.join(ROLES)}")
            if not isinstance(content, str):
                raise InputError(f"messages[{i}].content = {content!r}; expected a string")
            self.check_content(f"messages[{i}].content", content, reserved)
            if i == 0 and role != "system" and self.default_system is not None:
                parts.append(self.message("system", self.default_system))
            parts.append(self.message(role, content))
        if add_generation_prompt:
            parts.append(self.generation_prompt)
        return "".join(parts)
