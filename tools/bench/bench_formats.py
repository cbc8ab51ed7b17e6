"""Benchmarks of the ternary codecs and the GGUF reader (pytest-benchmark).

Run: ``uv run --no-sync pytest tools/bench/bench_formats.py --benchmark-only``.
Shapes are bitnet-b1.58-2B-4T's FFN (6912 x 2560); the reader opens a file
with a Llama-3-sized vocabulary (128256 tokens, 280000 merges).
"""

from __future__ import annotations

import numpy as np
import pytest

from bitnet_core.config import BitNetConfig
from bitnet_core.formats import get_codec, quantize
from bitnet_core.gguf import expected_shapes, open_model_file, write_gguf
from bitnet_core.model.presets import preset

B2B4T = preset("2b4t")
ROWS, COLS = B2B4T.intermediate_size, B2B4T.hidden_size
CODECS = ("tq2_0", "tq1_0", "i2_s", "qk256", "bitnet32", "f16")


@pytest.fixture(scope="module")
def codes():
    return np.random.default_rng(0).integers(-1, 2, (ROWS, COLS)).astype(np.int8)


@pytest.mark.parametrize("name", CODECS)
def test_unpack(benchmark, codes, name):
    codec = get_codec(name)
    raw = codec.pack(codes, np.float32(0.5))
    if name == "qk256":
        codec = codec.with_scales(0.5)
    got, _ = benchmark(codec.unpack, raw, ROWS, COLS)
    assert np.array_equal(got, codes)


@pytest.mark.parametrize("name", CODECS)
def test_pack(benchmark, codes, name):
    benchmark(get_codec(name).pack, codes, np.float32(0.5))


@pytest.mark.parametrize("qtype", ["i2s", "tl1", "tl2"])
def test_quantize(benchmark, qtype):
    x = np.random.default_rng(1).standard_normal((ROWS, COLS)).astype(np.float32)
    benchmark(quantize, x, qtype)


def test_open_model_with_llama3_vocab(benchmark, tmp_path_factory):
    vocab = B2B4T.vocab_size
    cfg = BitNetConfig(
        vocab_size=vocab,
        hidden_size=256,
        num_layers=1,
        num_heads=4,
        num_kv_heads=4,
        intermediate_size=256,
    )
    rng = np.random.default_rng(2)
    tensors = {
        n: rng.standard_normal(s).astype(np.float32) for n, s in expected_shapes(cfg).items()
    }
    tok = {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.tokens": [f"tok{i}" for i in range(vocab)],
        "tokenizer.ggml.token_type": [1] * vocab,
        "tokenizer.ggml.merges": [f"a{i} b{i}" for i in range(280000)],
    }
    path = write_gguf(tmp_path_factory.mktemp("b") / "v.gguf", cfg, tensors, tokenizer_metadata=tok)
    m = benchmark.pedantic(open_model_file, args=(path,), rounds=3, iterations=1)
    assert m.config.vocab_size == vocab
