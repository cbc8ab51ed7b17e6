"""Chat prompts: the model's Jinja2 chat template, or a plain fallback."""

from __future__ import annotations

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
