"""The chat template without jinja2.

SmolLM2's template (in the GGUF, Jinja) is ChatML: each message is
``<|im_start|>{role}\\n{content}<|im_end|>\\n``, a default system message goes first when the
conversation has none, and ``<|im_start|>assistant\\n`` asks for the reply. The converter derives these
pieces from the Jinja source on the host (where jinja2 is) and checks that they reproduce it exactly on
several conversations; the device only concatenates strings.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from edge.errors import InputError

ROLES = ("system", "user", "assistant")


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

    def message(self, role: str, content: str) -> str:
        """One formatted message."""
        return self.message_prefix + role + self.role_suffix + content + self.message_suffix

    def render(self, messages: Sequence[Mapping[str, str]], add_generation_prompt: bool = True) -> str:
        """The prompt text for a conversation.

        Args:
            messages: ``[{"role": "user", "content": "..."}, ...]``; roles system, user or assistant.
            add_generation_prompt: end with the assistant's opening so the model replies.

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
            if i == 0 and role != "system" and self.default_system is not None:
                parts.append(self.message("system", self.default_system))
            parts.append(self.message(role, content))
        if add_generation_prompt:
            parts.append(self.generation_prompt)
        return "".join(parts)
