"""Atheris fuzz target: a tokenizer built from GGUF metadata, then encode and decode of any text.

Run: ``python tools/fuzz/fuzz_tokenizer.py -max_total_time=60`` (see ``harness.py``).
The input drives a ``FuzzedDataProvider``: one of three real vocabularies
(byte-level GPT-2, a small BPE without every byte, SentencePiece with byte
fallback), then changes to it (added tokens of any text, token types, scores,
merges, special ids, flags, the pre-tokenizer name), then a text.

Property: the metadata either builds a ``Tokenizer`` or raises a
``BitnetError``; a built one encodes any text to ids inside its vocabulary
(with and without special-token parsing), decodes them back to a ``str``, and
token by token through ``stream``. On the byte-level vocabulary, plain text
without special tokens decodes back to itself.
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

BASES = (
    byte_tokenizer_metadata(280),
    make_seeds.small_bpe_metadata(make_seeds.CHAT_TEMPLATES["chatml"]),
    make_seeds.spm_tokenizer_metadata(),
)
PRE = ("default", "gpt-2", "llama-bpe", "llama3", "qwen2", "falcon", "unknown-pre", "")
KEYS = (
    "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.unknown_token_id",
    "tokenizer.ggml.eot_token_id",
)


def metadata(fdp: atheris.FuzzedDataProvider) -> tuple[int, dict]:
    base = fdp.ConsumeIntInRange(0, len(BASES) - 1)
    meta = {k: (list(v) if isinstance(v, list) else v) for k, v in BASES[base].items()}
    tokens, types = meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.token_type"]
    for _ in range(fdp.ConsumeIntInRange(0, 3)):
        tokens.append(fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 12)))
        types.append(fdp.ConsumeIntInRange(0, 7))
    if fdp.ConsumeBool():  # retype one token (control, user-defined, byte, unused...)
        types[fdp.ConsumeIntInRange(0, len(types) - 1)] = fdp.ConsumeIntInRange(0, 7)
    if "tokenizer.ggml.scores" in meta:
        meta["tokenizer.ggml.scores"] += [
            fdp.ConsumeRegularFloat() for _ in tokens[len(meta["tokenizer.ggml.scores"]) :]
        ]
    if "tokenizer.ggml.merges" in meta and fdp.ConsumeBool():
        meta["tokenizer.ggml.merges"].append(fdp.ConsumeUnicodeNoSurrogates(12))
    if fdp.ConsumeBool():
        meta[KEYS[fdp.ConsumeIntInRange(0, len(KEYS) - 1)]] = fdp.ConsumeIntInRange(
            -2, len(tokens) + 2
        )
    if fdp.ConsumeBool():
        meta["tokenizer.ggml.pre"] = PRE[fdp.ConsumeIntInRange(0, len(PRE) - 1)]
    for flag in ("tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_space_prefix"):
        if fdp.ConsumeBool():
            meta[flag] = fdp.ConsumeBool()
    if fdp.ConsumeBool():  # a length that disagrees with the tokens
        meta["tokenizer.ggml.token_type"] = types[: fdp.ConsumeIntInRange(0, len(types))]
    return base, meta


def test_one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    base, meta = metadata(fdp)
    special = fdp.ConsumeBool()
    text = fdp.ConsumeUnicodeNoSurrogates(fdp.remaining_bytes())
    try:
        tok = Tokenizer.from_metadata(meta)
        ids = tok.encode(text, add_bos=False, special=special)
        assert all(0 <= i < tok.vocab_size for i in ids), ids
        back = tok.decode(ids, skip_special=False)
        assert isinstance(back, str)
        stream = tok.stream(skip_special=False, strip_prefix_space=tok.strips_prefix_space)
        streamed = "".join(stream.feed(i) for i in ids) + stream.flush()
        assert streamed == back, (streamed, back)
        plain = base == 0 and len(meta["tokenizer.ggml.tokens"]) == 280 and not special
        if plain and meta.get("tokenizer.ggml.token_type") == BASES[0]["tokenizer.ggml.token_type"]:
            assert back == text, (text, ids, back)
    except BitnetError:
        pass


if __name__ == "__main__":
    harness.run("tokenizer", test_one_input)
