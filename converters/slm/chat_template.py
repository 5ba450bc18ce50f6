"""Turn a Jinja chat template into the string pieces of :class:`edge.text.chat.ChatFormat`.

The device has no jinja2. Here, on the host, we render the template with marker messages, read off the
pieces (message prefix, role suffix, message suffix, generation prompt, default system message), then
render a set of conversations both ways and refuse (ConversionError) unless every one matches exactly.
A template that does more than this role/content pattern is therefore caught at conversion time.
"""

from __future__ import annotations

from collections.abc import Mapping

from edge.errors import ConversionError, require
from edge.text.chat import ChatFormat

_CONTENT = "\x01CONTENT\x01"
_SYSTEM = "\x02SYSTEM\x02"

_CHECKS: tuple[tuple[list[dict], bool], ...] = (
    ([{"role": "user", "content": "Hello!"}], True),
    ([{"role": "user", "content": "Hello!"}], False),
    ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], True),
    (
        [
            {"role": "user", "content": "What is 2+2?"},
            {"role": "assistant", "content": "4"},
            {"role": "user", "content": "And {3}+3?\n"},
        ],
        True,
    ),
    ([{"role": "assistant", "content": "ünïcode 🙂"}], False),
)


def _renderer(template: str, special_tokens: Mapping[str, str]):
    jinja2 = require("jinja2", "convert", "reading the chat template")
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    # The settings transformers' apply_chat_template uses, so both render alike.
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    try:
        compiled = env.from_string(template)
    except jinja2.TemplateError as exc:
        raise ConversionError(f"tokenizer.chat_template: not valid Jinja ({exc})") from exc

    def render(messages: list[dict], add_generation_prompt: bool) -> str:
        try:
            return compiled.render(messages=messages, add_generation_prompt=add_generation_prompt, **special_tokens)
        except jinja2.TemplateError as exc:
            raise ConversionError(f"tokenizer.chat_template: rendering failed ({exc})") from exc

    return render


def derive_chat_format(template: str, special_tokens: Mapping[str, str] | None = None) -> ChatFormat:
    """The string pieces of a ChatML-like Jinja template, checked to reproduce it exactly.

    Args:
        template: the Jinja source (``tokenizer.chat_template`` of the GGUF).
        special_tokens: ``bos_token``, ``eos_token``... as the template may name them (TinyLlama's ends each
            message with ``eos_token``); transformers' ``apply_chat_template`` passes the same.

    Returns:
        The equivalent chat format.

    Raises:
        ConversionError: the template is not of the role/content pattern, or the pieces differ from it.
    """
    render = _renderer(template, special_tokens or {})
    one = render([{"role": "system", "content": _CONTENT}], False)
    head, sep, tail = one.partition(_CONTENT)
    if not sep or "system" not in head:
        raise ConversionError(
            "tokenizer.chat_template: a system message does not render as prefix + role + content + suffix"
        )
    cut = head.rindex("system")
    prefix, role_suffix, suffix = head[:cut], head[cut + len("system") :], tail
    # after one message, not zero: templates such as Qwen2.5's read messages[0] unconditionally
    first = [{"role": "user", "content": _CONTENT}]
    generation = render(first, True)[len(render(first, False)) :]
    fmt = ChatFormat(prefix, role_suffix, suffix, generation, None)
    user_only = render([{"role": "user", "content": _CONTENT}], False)
    lead = user_only[: len(user_only) - len(fmt.message("user", _CONTENT))]
    if lead:
        start, end = fmt.message("system", _SYSTEM).split(_SYSTEM)
        if not (lead.startswith(start) and lead.endswith(end)):
            raise ConversionError(
                f"tokenizer.chat_template: the text before a first user message ({lead[:60]!r}) is not a system message"
            )
        fmt = ChatFormat(prefix, role_suffix, suffix, generation, lead[len(start) : len(lead) - len(end)])
    for messages, add in _CHECKS:
        expected, got = render(messages, add), fmt.render(messages, add)
        if expected != got:
            raise ConversionError(
                f"tokenizer.chat_template: derived format renders {got!r}; the template renders {expected!r}"
            )
    return fmt
