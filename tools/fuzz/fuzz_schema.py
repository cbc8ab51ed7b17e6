"""Atheris fuzz target: the structured-output schema compiler (llguidance), then a few steps.

Run: ``python tools/fuzz/fuzz_schema.py -max_total_time=60`` (see ``harness.py``).
An input is JSON text: a schema as ``response_format`` carries it. It is
compiled (``json_grammar``), bound to a byte-level tokenizer
(``JsonConstraint``), and driven four steps: the mask of allowed tokens, then
the first allowed token accepted.

Property: a schema either compiles and every step allows a token until the
grammar is done, or a ``BitnetError`` (``ConfigError``) says why.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

from bitnet_core.errors import BitnetError  # noqa: E402
from bitnet_core.model.random import byte_tokenizer_metadata  # noqa: E402
from bitnet_core.model.structured import JsonConstraint, guidance_tokenizer, json_grammar  # noqa: E402
from bitnet_core.tokenizer import Tokenizer  # noqa: E402

TOKENIZER = Tokenizer.from_metadata(byte_tokenizer_metadata(280))
EOS = [TOKENIZER.eos_id]
LLTOKENIZER = guidance_tokenizer(TOKENIZER, TOKENIZER.vocab_size, EOS)


def test_one_input(data: bytes) -> None:
    try:
        schema = json.loads(data)
    except (ValueError, RecursionError):
        return
    try:
        constraint = JsonConstraint(LLTOKENIZER, json_grammar(schema))
        logits = np.zeros(TOKENIZER.vocab_size, np.float32)
        for _ in range(4):
            if constraint.done:
                break
            masked = constraint.process(logits)
            allowed = np.flatnonzero(np.isfinite(masked))
            assert allowed.size, "no token allowed before the grammar is done"
            constraint.accept(int(allowed[0]), masked)
    except BitnetError:
        pass


if __name__ == "__main__":
    harness.run("schema", test_one_input)
