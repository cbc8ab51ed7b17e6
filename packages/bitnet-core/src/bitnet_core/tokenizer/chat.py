"""Chat prompts: the model's Jinja2 chat template, or a plain fallback.

:func:`render_chat_parts` renders a template and says which parts of the result
are the text of messages: a prompt's template text may hold special tokens
(``<|eot_id|>``), a message's text never does (see ``Tokenizer.chat_ids``).
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping, Sequence
from datetime import datetime

from ..errors import TokenizerError


def _raise(message: str) -> None:
    raise TokenizerError(f"chat template: {message}")


def plain_chat(messages: Sequence[Mapping[str, str]], *, add_generation_prompt: bool) -> str:
    """The fallback for models without a template: one ``Role: content`` line per message.

    ``[{"role": "user", "content": "Hi"}]`` becomes ``"User: Hi\\nAssistant:"``
    (the last line only with ``add_generation_prompt``).
    """
    lines = [f"{m['role'].capitalize()}: {m['content']}" for m in messages]
    if add_generation_prompt:
        lines.append("Assistant:")
    return "\n".join(lines)


def _check(messages: Sequence[Mapping[str, str]]) -> None:
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise TokenizerError("chat: messages must be a list of {'role', 'content'} mappings")
    for m in messages:
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str):
            raise TokenizerError("chat: each message needs a string 'role'")
        if not isinstance(m.get("content"), str):
            raise TokenizerError("chat: each message needs a string 'content'")


def _render(
    template: str,
    messages: Sequence[Mapping[str, str]],
    add_generation_prompt: bool,
    bos_token: str,
    eos_token: str,
) -> str:
    from jinja2 import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    try:
        return env.from_string(template).render(
            messages=[dict(m) for m in messages],
            add_generation_prompt=add_generation_prompt,
            bos_token=bos_token,
            eos_token=eos_token,
        )
    except TokenizerError:
        raise
    except TemplateError as exc:
        raise TokenizerError(f"chat template: {exc}") from exc


#: Stands around a message's placeholder: whitespace to ``str.strip`` (Jinja's
#: ``trim``), so a template that trims a message's text is seen doing it.
_PROBE = "\x1f"


def render_chat_parts(
    template: str | None,
    messages: Sequence[Mapping[str, str]],
    *,
    add_generation_prompt: bool = True,
    bos_token: str = "",
    eos_token: str = "",
) -> list[tuple[str, bool]]:
    """The prompt as ``(text, is_message_text)`` parts, in order; joined, :func:`render_chat`.

    The template is rendered with a unique placeholder for each message's
    ``content``; the placeholders are then replaced by the text (trimmed where
    the template trims it) and flagged, so the caller can encode message text
    as plain text and only the template's own text with special tokens.
    """
    _check(messages)
    if not template:
        parts: list[tuple[str, bool]] = []
        for i, m in enumerate(messages):
            parts += [(("\n" if i else "") + f"{m['role'].capitalize()}: ", False)]
            parts += [(m["content"], True)]
        if add_generation_prompt:
            parts.append(("\nAssistant:" if messages else "Assistant:", False))
        return [p for p in parts if p[0]]
    nonce = secrets.token_hex(8)
    probes = [
        {**m, "content": f"{_PROBE}\ue000{nonce}:{i}\ue001{_PROBE}"} for i, m in enumerate(messages)
    ]
    rendered = _render(template, probes, add_generation_prompt, bos_token, eos_token)
    slot = re.compile(f"({_PROBE}?)\ue000{nonce}:(\\d+)\ue001({_PROBE}?)")
    parts, pos = [], 0
    for hit in slot.finditer(rendered):
        parts.append((rendered[pos : hit.start()], False))
        text = messages[int(hit[2])]["content"]
        if not hit[1]:
            text = text.lstrip()
        if not hit[3]:
            text = text.rstrip()
        parts.append((text, True))
        pos = hit.end()
    parts.append((rendered[pos:], False))
    return [p for p in parts if p[0]]


def render_chat(
    template: str | None,
    messages: Sequence[Mapping[str, str]],
    *,
    add_generation_prompt: bool = True,
    bos_token: str = "",
    eos_token: str = "",
) -> str:
    """Render ``messages`` with ``template`` (Hugging Face conventions) or :func:`plain_chat`."""
    _check(messages)
    if not template:
        return plain_chat(messages, add_generation_prompt=add_generation_prompt)
    return _render(template, messages, add_generation_prompt, bos_token, eos_token)
