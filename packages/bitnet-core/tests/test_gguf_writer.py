"""write_gguf: atomic, no overwrite, value types, TernaryWeight input, llama.cpp loads its files."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
from formats_testlib import TINY, gpt2_vocab, random_tensors

from bitnet_core.errors import ModelFileError, QuantizationError
from bitnet_core.gguf import open_model_file, write_gguf
from bitnet_core.hal.weights import TernaryWeight


@pytest.fixture(scope="module")
def tensors():
    return random_tensors(TINY, seed=2)


def test_refuses_to_overwrite(tmp_path, tensors):
    p = tmp_path / "m.gguf"
    p.write_bytes(b"precious")
    with pytest.raises(ModelFileError, match="file exists"):
        write_gguf(p, TINY, tensors)
    assert p.read_bytes() == b"precious"
    write_gguf(p, TINY, tensors, overwrite=True)
    assert open_model_file(p).config == TINY
    assert sorted(x.name for x in tmp_path.iterdir()) == ["m.gguf"]  # no temp file left


def test_failed_write_leaves_nothing(tmp_path, tensors):
    p = tmp_path / "m.gguf"
    with pytest.raises(ModelFileError, match="empty array"):
        write_gguf(p, TINY, tensors, tokenizer_metadata={"tokenizer.ggml.merges": []})
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ModelFileError, match="cannot write ternary type 'tl1'"):
        write_gguf(p, TINY, tensors, ternary_type="tl1")
    with pytest.raises(ModelFileError, match="missing tensor 'blk.1.ffn_up.weight'"):
        write_gguf(p, TINY, {k: v for k, v in tensors.items() if k != "blk.1.ffn_up.weight"})
    with pytest.raises(QuantizationError, match="blk.0.attn_q.weight.*one scale per tensor"):
        t = dict(tensors)
        t["blk.0.attn_q.weight"] = TernaryWeight.from_codes(
            np.ones((256, 256), np.int8), np.linspace(1, 2, 256)
        )
        write_gguf(p, TINY, t, ternary_type="i2_s")
    assert list(tmp_path.iterdir()) == []


def test_ternary_weight_input_is_repacked(tmp_path, tensors):
    rng = np.random.default_rng(0)
    codes = rng.integers(-1, 2, (512, 256)).astype(np.int8)
    scales = rng.uniform(0.5, 1.5, 512).astype(np.float32)
    t = dict(tensors, **{"blk.1.ffn_gate.weight": TernaryWeight.from_codes(codes, scales)})
    m = open_model_file(write_gguf(tmp_path / "w.gguf", TINY, t, ternary_type="tq1_0"))
    got, got_s = m.ternary("blk.1.ffn_gate.weight").unpack()
    np.testing.assert_array_equal(got, codes)
    np.testing.assert_array_equal(got_s, scales.astype(np.float16).astype(np.float32))


def test_metadata_value_types(tmp_path, tensors):
    extra = {
        "x.u": 7,
        "x.neg": -3,
        "x.f": 0.5,
        "x.b": True,
        "x.s": "hi",
        "x.ints": [1, -2],
        "x.floats": [0.5, 1],
        "x.strs": ["a", "b"],
        "x.forced": (7, gguf.GGUFValueType.UINT64),
    }
    p = write_gguf(tmp_path / "k.gguf", TINY, tensors, extra_metadata=extra)
    r = gguf.GGUFReader(p)
    T = gguf.GGUFValueType
    want = {
        "x.u": T.UINT32,
        "x.neg": T.INT32,
        "x.f": T.FLOAT32,
        "x.b": T.BOOL,
        "x.s": T.STRING,
        "x.forced": T.UINT64,
        "bitnet.context_length": T.UINT32,
        "bitnet.attention.layer_norm_rms_epsilon": T.FLOAT32,
    }
    for key, vt in want.items():
        assert r.fields[key].types == [vt], key
    assert r.fields["x.ints"].types == [T.ARRAY, T.INT32]
    assert r.fields["x.floats"].types == [T.ARRAY, T.FLOAT32]
    md = open_model_file(p).metadata
    assert md["x.ints"] == [1, -2] and md["x.strs"] == ["a", "b"] and md["x.b"] is True


def test_norms_f32_embeddings_f16_or_f32(tmp_path, tensors):
    m = open_model_file(write_gguf(tmp_path / "a.gguf", TINY, tensors))
    assert m.tensor_info("output_norm.weight").type_name == "F32"
    assert m.tensor_info("token_embd.weight").type_name == "F16"
    m = open_model_file(write_gguf(tmp_path / "b.gguf", TINY, tensors, dense_type="f32"))
    assert m.tensor_info("token_embd.weight").type_name == "F32"


@pytest.mark.parametrize("ttype", ["tq2_0", "tq1_0"])
def test_llama_cpp_loads_and_runs_our_file(tmp_path, tensors, ttype):
    llama_cpp = pytest.importorskip(
        "llama_cpp",
        reason="llama-cpp-python is a test-only extra: uv pip install --find-links "
        "/root/.cache/bitnet-ci/wheels llama-cpp-python==0.3.36",
    )
    p = write_gguf(
        tmp_path / f"ll-{ttype}.gguf",
        TINY,
        tensors,
        ternary_type=ttype,
        tokenizer_metadata=gpt2_vocab(TINY.vocab_size),
    )
    llm = llama_cpp.Llama(str(p), n_ctx=32, n_threads=1, verbose=False, logits_all=True)
    assert llm.n_vocab() == TINY.vocab_size and llm.n_embd() == TINY.hidden_size
    ids = llm.tokenize(b"the cat", add_bos=False)
    assert ids[:2] == [83, 257]  # 't' then the merged 'he' of our tiny vocab
    llm.eval(ids)
    logits = np.asarray(llm.scores[: llm.n_tokens])
    assert logits.shape == (len(ids), TINY.vocab_size) and np.isfinite(logits).all()
    assert logits.std() > 0
