"""Atheris fuzz target: chat templates rendered with hostile messages, then encoded.

Run: ``python tools/fuzz/fuzz_chat.py -max_total_time=60`` (see ``harness.py``).
The input drives a ``FuzzedDataProvider``: one of the templates of
``make_seeds.CHAT_TEMPLATES`` (or none: the plain fallback), then up to six
messages whose role and content are any text (Jinja syntax, the renderer's
own placeholder characters, special-token texts) or, now and then, not text
at all, then the flags.

Property: ``Tokenizer.chat_ids`` and ``render_chat`` either succeed or raise a
``BitnetError``; the ids lie inside the vocabulary; every message's content
(stripped) appears in the rendered prompt, and no message text becomes a
special token.
"""

from __future__ import annotations

import os
import sys

import atheris

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import make_seeds  # noqa: E402

from bitnet_core.errors import BitnetError  # noqa: E402
from bitnet_core.model.random import byte_tokenizer_metadata  # noqa: E402
from bitnet_core.tokenizer import Tokenizer  # noqa: E402
from bitnet_core.tokenizer.chat import render_chat, render_chat_parts  # noqa: E402

TEMPLATES = (None, *make_seeds.CHAT_TEMPLATES.values())
#: Texts a hostile message may carry, beside random text.
HOSTILE = (
    "{{ 7*7 }}",
    "{% for x in range(99999) %}",
    "<|bos|>",
    "<|eos|>",
    "<|im_end|>",
    "\x1f\ue0000:0\ue001\x1f",
    "\ue000",
    "{{ messages.__class__.__mro__ }}",
    "system",
)
_META = byte_tokenizer_metadata(280)
TOKENIZERS = tuple(
    Tokenizer.from_metadata({**_META, "tokenizer.chat_template": t or ""}) for t in TEMPLATES
)


def text(fdp: atheris.FuzzedDataProvider) -> object:
    kind = fdp.ConsumeIntInRange(0, 9)
    if kind == 0:
        return HOSTILE[fdp.ConsumeIntInRange(0, len(HOSTILE) - 1)]
    if kind == 1:  # not text at all
        return (None, 7, ["a"], {"x": 1})[fdp.ConsumeIntInRange(0, 3)]
    return fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 40))


def test_one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    which = fdp.ConsumeIntInRange(0, len(TEMPLATES) - 1)
    roles = ("system", "user", "assistant")
    messages = []
    for _ in range(fdp.ConsumeIntInRange(0, 6)):
        role = roles[fdp.ConsumeIntInRange(0, 2)] if fdp.ConsumeBool() else text(fdp)
        messages.append({"role": role, "content": text(fdp)})
    add_generation_prompt = fdp.ConsumeBool()
    tok = TOKENIZERS[which]
    try:
        prompt = render_chat(
            TEMPLATES[which], messages, add_generation_prompt=add_generation_prompt
        )
        parts = render_chat_parts(
            TEMPLATES[which], messages, add_generation_prompt=add_generation_prompt
        )
        ids = tok.chat_ids(messages, add_generation_prompt=add_generation_prompt)
    except BitnetError:
        return
    assert isinstance(prompt, str)
    assert all(0 <= i < tok.vocab_size for i in ids), ids
    message_text = "".join(p for p, is_message in parts if is_message)
    for m in messages:
        assert m["content"].strip() in prompt
        assert m["content"].strip() in message_text or not m["content"].strip()
    specials = {i for i in ids if tok.is_special(i)}
    template_specials = {
        i
        for i in tok.encode("".join(p for p, m in parts if not m), special=True, add_bos=False)
        if tok.is_special(i)
    }
    assert specials <= template_specials | {tok.bos_id}, (specials, template_specials)


if __name__ == "__main__":
    harness.run("chat", test_one_input)
