"""Our token ids and token bytes equal llama.cpp's (through llama-cpp-python) for the same GGUF."""

from __future__ import annotations

import ctypes

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizer_vocabs import TEST_STRINGS, gpt2_metadata, spm_metadata, write_vocab_gguf

from bitnet_core.tokenizer import Tokenizer

llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")

VOCABS = {
    "gpt2-default": lambda: gpt2_metadata("default"),
    "gpt2-missing-pre": lambda: gpt2_metadata(None),
    "gpt2-gpt-2": lambda: gpt2_metadata("gpt-2"),
    "gpt2-llama-bpe": lambda: gpt2_metadata("llama-bpe"),
    "spm": lambda: spm_metadata(),
    "spm-random-scores": lambda: spm_metadata(random_scores=True),
}


@pytest.fixture(scope="module", params=sorted(VOCABS))
def pair(request, tmp_path_factory):
    meta = VOCABS[request.param]()
    path = write_vocab_gguf(tmp_path_factory.mktemp("vocab") / f"{request.param}.gguf", meta)
    ref = llama_cpp.Llama(str(path), vocab_only=True, verbose=False)
    return Tokenizer.from_metadata(meta), ref


@pytest.mark.parametrize("special", [False, True], ids=["text", "parse-special"])
@pytest.mark.parametrize("add", [False, True], ids=["no-bos", "file-bos"])
def test_ids_equal_llama_cpp(pair, special, add):
    ours, ref = pair
    for text in TEST_STRINGS:
        want = ref.tokenize(text.encode("utf-8"), add_bos=add, special=special)
        got = ours.encode(text, add_bos=None if add else False, special=special)
        assert got == want, text


def _piece(ref, token_id: int, special: bool) -> bytes:
    buf = ctypes.create_string_buffer(256)
    n = llama_cpp.llama_token_to_piece(ref._model.vocab, token_id, buf, 256, 0, special)
    assert 0 <= n <= 256
    return buf.raw[:n]


@pytest.mark.parametrize("special", [False, True])
def test_token_bytes_equal_llama_cpp(pair, special):
    ours, ref = pair
    for i in range(ours.vocab_size):
        assert ours.token_bytes(i, special=special) == _piece(ref, i, special), i


def test_special_ids_equal_llama_cpp(pair):
    ours, ref = pair
    assert ours.bos_id == ref.token_bos()
    assert ours.eos_id == ref.token_eos()
    assert ours.vocab_size == ref.n_vocab()


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40))
def test_random_text_ids_equal_llama_cpp(pair, text):
    ours, ref = pair
    assert ours.encode(text, add_bos=False) == ref.tokenize(text.encode("utf-8"), add_bos=False)
