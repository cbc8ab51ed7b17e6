"""``model/generation.py`` around the token loop: ``stream_text`` (the reference text of
a token stream, what the scheduler's tests compare with) and a ``Session``'s reuse of
its cache when the same prompt comes again."""

from __future__ import annotations

import pytest

from bitnet_core.config import BitNetConfig
from bitnet_core.model.api import load
from bitnet_core.model.generation import GenerationStats, Session, generate_tokens, stream_text
from bitnet_core.model.random import random_model_file
from bitnet_core.model.sampling import SamplingParams

CONFIG = BitNetConfig(
    vocab_size=300, hidden_size=256, num_layers=2, num_heads=4, num_kv_heads=2,
    intermediate_size=256, context_length=64,
)  # fmt: skip


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("gen") / "m.gguf"
    random_model_file(path, CONFIG, seed=44)
    return load(path, device="cpu")


def _tokens(model, ids, n=16):
    return list(generate_tokens(model.runner, ids, SamplingParams(temperature=0.0, max_tokens=n)))


def test_stream_text_pieces_make_the_decoded_text(model):
    ids = model.encode("Hello there")
    toks = _tokens(model, ids)
    stats = GenerationStats()
    pieces = list(stream_text(iter(toks), model.decode, ids, (), stats))
    assert all(pieces) and "".join(pieces) == model.decode(ids + toks)[len(model.decode(ids)) :]
    assert stats.finish_reason == ""  # no stop string: the caller's reason stands


def test_stream_text_ends_before_a_stop_string(model):
    ids = model.encode("Hello there")
    full = model.decode(ids + _tokens(model, ids))[len(model.decode(ids)) :]
    stop = full[3:5]
    assert stop and full.index(stop) == 3, full  # a stop string first seen at character 3
    stats = GenerationStats()
    got = "".join(stream_text(iter(_tokens(model, ids)), model.decode, ids, (stop,), stats))
    assert got == full[:3] and stats.finish_reason == "stop"


def test_a_session_recomputes_only_the_last_token_of_a_repeated_prompt(model):
    """The same prompt again: every row but the last is reused (its logits are needed)."""
    ids = model.encode("The same prompt, twice")
    with Session(model.runner) as sess:
        first, n0 = sess.prefill(ids)
        again, n1 = sess.prefill(ids)
        assert (n0, n1) == (0, len(ids) - 1) and sess.length == len(ids)
        assert sess.ids == ids
    fresh, _ = Session(model.runner).prefill(ids)
    assert (again == fresh).all() and (first == fresh).all()
