"""``logprobs`` in the two OpenAI shapes, from a :class:`LogprobRecorder`'s entries."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..model.processors import TokenLogprob


def _text(tokenizer: Any, token: int) -> tuple[str, list[int]]:
    raw = tokenizer.token_bytes(token) if tokenizer is not None else b""
    return raw.decode("utf-8", errors="replace"), list(raw)


def chat_logprobs(tokenizer: Any, entries: Sequence[TokenLogprob]) -> dict:
    """Chat completions: ``{"content": [{token, logprob, bytes, top_logprobs}]}``."""
    content = []
    for e in entries:
        text, raw = _text(tokenizer, e.token)
        top = []
        for t, lp in e.top:
            t_text, t_raw = _text(tokenizer, t)
            top.append({"token": t_text, "logprob": lp, "bytes": t_raw})
        content.append({"token": text, "logprob": e.logprob, "bytes": raw, "top_logprobs": top})
    return {"content": content}


def completion_logprobs(tokenizer: Any, entries: Sequence[TokenLogprob], offset: int = 0) -> dict:
    """Legacy completions: ``tokens``, ``token_logprobs``, ``top_logprobs``, ``text_offset``."""
    tokens, logprobs, tops, offsets = [], [], [], []
    for e in entries:
        text, _ = _text(tokenizer, e.token)
        tokens.append(text)
        logprobs.append(e.logprob)
        tops.append({_text(tokenizer, t)[0]: lp for t, lp in e.top} if e.top else None)
        offsets.append(offset)
        offset += len(text)
    return {
        "tokens": tokens,
        "token_logprobs": logprobs,
        "top_logprobs": tops,
        "text_offset": offsets,
    }
