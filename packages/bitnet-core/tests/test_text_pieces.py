"""TextPieces (generated ids to streamed text) against decoding the whole sequence."""

from __future__ import annotations

import bisect

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizer_vocabs import gpt2_metadata, spm_metadata

from bitnet_core.model.generation import TextPieces
from bitnet_core.model.sampling import StopMatcher
from bitnet_core.tokenizer import Tokenizer

TOKENIZERS = {
    "gpt2": Tokenizer.from_metadata(gpt2_metadata("default")),
    "spm": Tokenizer.from_metadata(spm_metadata()),
}


class WholeDecodePieces:
    """What TextPieces hands out, by definition: each piece is the new text of
    decode(prompt + generated) past decode(prompt), held back while it ends in an
    incomplete character, cut at the first stop string."""

    def __init__(self, decode, prompt_ids, stops) -> None:
        self.decode, self.prompt, self.generated = decode, list(prompt_ids), []
        self.base = decode(self.prompt)
        self.text, self.emitted, self.shown, self.starts = "", 0, 0, []
        self.matcher = StopMatcher(stops)

    def feed(self, tok: int) -> str:
        self.generated.append(tok)
        self.starts.append(len(self.text.rstrip("\ufffd")))
        whole = self.decode(self.prompt + self.generated)
        base = self.base
        text = whole[len(base) :] if whole.startswith(base) else self.decode(self.generated)
        self.text = text
        if text.endswith("\ufffd"):
            return ""
        piece, self.emitted = text[self.emitted :], len(text)
        return self.out(self.matcher.feed(piece))

    def out(self, piece: str) -> str:
        self.shown += len(piece)
        return piece

    @property
    def tokens_shown(self) -> int:
        return bisect.bisect_left(self.starts, self.shown)

    def finish(self) -> str:
        return self.out(self.matcher.feed(self.text[self.emitted :]) + self.matcher.flush())


def _ids(tok: Tokenizer, texts: list[str]) -> list[int]:
    return [i for t in texts for i in tok.encode(t, add_bos=False)]


@settings(max_examples=300, deadline=None)
@given(
    name=st.sampled_from(sorted(TOKENIZERS)),
    prompt=st.lists(st.integers(0, 10**6), min_size=0, max_size=12),
    generated=st.lists(st.integers(0, 10**6), min_size=1, max_size=40),
    texts=st.lists(
        st.sampled_from(["Hello", " world", "🤖", "日本", "é", "\n", " ", "a b"]), max_size=4
    ),
    stops=st.lists(st.sampled_from(["world", "\n", "o w", "🤖"]), max_size=2),
)
def test_pieces_equal_decoding_everything(name, prompt, generated, texts, stops):
    """Random ids (control, byte and multi-byte pieces included) and encoded text:
    the same pieces, tokens shown and tail as decoding the whole sequence each time."""
    tok = TOKENIZERS[name]
    n = tok.vocab_size
    prompt_ids = [i % n for i in prompt] + _ids(tok, texts)
    gen_ids = [i % n for i in generated] + _ids(tok, texts[::-1])
    want, got = (
        WholeDecodePieces(tok.decode, prompt_ids, stops),
        TextPieces(tok.decode, prompt_ids, stops),
    )
    for t in gen_ids:
        assert got.feed(t) == want.feed(t)
        assert got.tokens_shown == want.tokens_shown
        assert got.stopped == want.matcher.stopped
    assert got.finish() == want.finish()
    assert got.tokens_shown == want.tokens_shown


def _control_ids(tok: Tokenizer) -> list[int]:
    return [i for i in (tok.bos_id, tok.eos_id) if i is not None]


@pytest.mark.parametrize("name", sorted(TOKENIZERS))
@pytest.mark.parametrize(
    "case",
    [
        "prompt ends in a control token",
        "prompt is one control token",
        "prompt ends inside a character",
        "a control token and a lone space in the generation",
    ],
)
def test_pieces_at_the_edges_of_a_window(name, case):
    """Where a window's context could have no text, or start or end inside a
    character: still the pieces of decoding everything."""
    tok = TOKENIZERS[name]
    ctl = _control_ids(tok)
    enc = lambda t: tok.encode(t, add_bos=False)  # noqa: E731
    euro = enc("€")  # several byte tokens in both vocabularies
    prompts = {
        "prompt ends in a control token": enc("Hi there you") + ctl,
        "prompt is one control token": ctl[:1],
        "prompt ends inside a character": enc("Hi there 日本") + euro[:-1],
        "a control token and a lone space in the generation": enc("one two three four"),
    }
    generated = {
        "prompt ends inside a character": euro[-1:] + enc(" and more"),
        "a control token and a lone space in the generation": ctl
        + enc(" ")
        + ctl
        + enc(" five six"),
    }.get(case, enc(" Hello world") + ctl + enc(" again"))
    prompt = prompts[case]
    want, got = WholeDecodePieces(tok.decode, prompt, ()), TextPieces(tok.decode, prompt, ())
    assert [got.feed(t) for t in generated] == [want.feed(t) for t in generated]
    assert got.finish() == want.finish()
    assert got.tokens_shown == want.tokens_shown


@pytest.mark.parametrize("name", sorted(TOKENIZERS))
def test_a_long_prompt_is_not_decoded_again_for_every_token(name):
    """Decoding the whole sequence for each token cost prompt-length work a token
    (quadratic over a chat's history); the window decodes a few ids a token."""
    tok = TOKENIZERS[name]
    prompt = tok.encode("The quick brown fox jumps over the lazy dog. " * 60, add_bos=True)
    generated = tok.encode(" and then it ran far away into the forest 🤖 日本", add_bos=False)
    decoded = []

    def decode(ids):
        decoded.append(len(ids))
        return tok.decode(ids)

    pieces = TextPieces(decode, prompt, ())
    text = "".join(pieces.feed(t) for t in generated) + pieces.finish()
    assert text == tok.decode(prompt + generated)[len(tok.decode(prompt)) :]
    assert len(prompt) > 500
    after_prompt = sum(decoded) - len(prompt)  # the first decode is the prompt's own
    assert after_prompt <= 16 * len(generated)
