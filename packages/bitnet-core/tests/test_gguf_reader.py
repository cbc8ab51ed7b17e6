"""GGUF reader: round trips through write_gguf, gguf-py agreement, memory mapping, errors."""

from __future__ import annotations

import dataclasses
import os
import struct
import subprocess
import sys

import gguf
import numpy as np
import pytest
from formats_testlib import FLOAT32, STRING, TINY, UINT32, gguf_blob, gpt2_vocab, random_tensors

from bitnet_core.config import BitNetConfig
from bitnet_core.errors import GGUFFormatError, ModelFileError, UnsupportedModelError
from bitnet_core.formats import ternarize_rows
from bitnet_core.gguf import GGUFFile, expected_shapes, open_model_file, write_gguf
from bitnet_core.gguf.metadata import ternary_tensor_names
from bitnet_core.hal.weights import TernaryWeight

TYPES = ("tq2_0", "tq1_0", "i2_s", "qk256", "bitnet32", "f16", "f32", "bf16")
F16_SCALES = {"tq2_0", "tq1_0", "bitnet32", "f16"}


@pytest.fixture(scope="module")
def tensors():
    return random_tensors(TINY, seed=1)


@pytest.fixture(scope="module")
def files(tmp_path_factory, tensors):
    d = tmp_path_factory.mktemp("models")
    return {
        t: write_gguf(
            d / f"tiny-{t}.gguf",
            TINY,
            tensors,
            ternary_type=t,
            tokenizer_metadata=gpt2_vocab(TINY.vocab_size),
        )
        for t in TYPES
    }


@pytest.mark.parametrize("ttype", TYPES)
def test_written_model_reads_back(files, tensors, ttype):
    m = open_model_file(files[ttype])
    assert m.config == TINY
    assert (
        m.metadata["tokenizer.ggml.tokens"] == gpt2_vocab(TINY.vocab_size)["tokenizer.ggml.tokens"]
    )
    for name in ternary_tensor_names(TINY):
        w = m.ternary(name)
        assert isinstance(w, TernaryWeight) and (w.rows, w.cols) == tensors[name].shape
        codes, scales = w.unpack()
        want_codes, want_scales = ternarize_rows(tensors[name], per_row=False)
        np.testing.assert_array_equal(codes, want_codes)
        if ttype in F16_SCALES:
            want_scales = want_scales.astype(np.float16).astype(np.float32)
        np.testing.assert_allclose(scales, want_scales, rtol=1e-2 if ttype == "bf16" else 0)
    np.testing.assert_array_equal(
        m.dense("blk.1.ffn_sub_norm.weight"), tensors["blk.1.ffn_sub_norm.weight"]
    )
    embd = m.dense("token_embd.weight")
    assert embd.dtype == np.float16 and embd.shape == (TINY.vocab_size, TINY.hidden_size)
    np.testing.assert_array_equal(embd, tensors["token_embd.weight"].astype(np.float16))


def test_i2s_flavours_told_apart_by_size(files):
    for ttype in ("i2_s", "qk256", "bitnet32"):
        info = open_model_file(files[ttype]).tensor_info("blk.0.ffn_down.weight")
        assert (info.type_id, info.codec) == (36, ttype)


def test_agrees_with_gguf_py_reader(files):
    ours = open_model_file(files["tq2_0"])
    ref = gguf.GGUFReader(files["tq2_0"])
    for field in ref.fields.values():
        if field.name.startswith("GGUF."):
            continue
        assert ours.metadata[field.name] == field.contents(), field.name
    assert [t.name for t in ref.tensors] == ours.tensor_names
    for t in ref.tensors:
        info = ours.tensor_info(t.name)
        assert info.shape == tuple(int(d) for d in reversed(t.shape))
        assert info.type_id == int(t.tensor_type)
        assert info.offset == t.data_offset and info.nbytes == t.n_bytes


def test_tensors_are_views_of_the_file(files):
    m = open_model_file(files["tq1_0"])
    w = m.ternary("blk.0.attn_q.weight")
    assert isinstance(w.raw, np.memmap)
    assert isinstance(m.dense("token_embd.weight"), np.memmap)
    assert isinstance(m.dense("output_norm.weight"), np.memmap)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


READ_ONLY_IMPORTS = """
import sys
import bitnet_core
model = bitnet_core.load(sys.argv[1], device="cpu-reference")
print(sorted(n for n in ("gguf", "yaml", "sentencepiece") if n in sys.modules))
from bitnet_core.gguf import gguf_constants as ours
import gguf
print(ours.GGMLQuantizationType is gguf.GGMLQuantizationType)
assert ours.GGML_QUANT_SIZES[gguf.GGMLQuantizationType.TQ2_0] == (256, 66)
assert gguf.GGML_QUANT_SIZES[ours.GGMLQuantizationType.TQ2_0] == (256, 66)
for a, b in ((ours.GGMLQuantizationType, gguf.GGMLQuantizationType),
             (ours.GGUFValueType, gguf.GGUFValueType)):
    assert {m.name: int(m) for m in a} == {m.name: int(m) for m in b}
    assert all(m == b[m.name] and hash(m) == hash(b[m.name]) for m in a)
"""


def test_reading_imports_gguf_py_constants_only(files):
    """A process that only reads never imports all of gguf-py (writer, yaml, sentencepiece).

    Its constants are loaded alone from gguf-py's file; once gguf-py is imported
    too, their members equal and hash as gguf-py's.
    """
    run = subprocess.run(
        [sys.executable, "-c", READ_ONLY_IMPORTS, str(files["tq2_0"])],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["[]", "False"]


def test_opening_a_2gb_model_reads_no_tensor_data(tmp_path):
    """A 2 GiB (sparse) model opens without its tensor data being read."""
    cfg = BitNetConfig(
        vocab_size=1 << 20,
        hidden_size=512,
        num_layers=1,
        num_heads=4,
        num_kv_heads=4,
        intermediate_size=512,
    )
    md = {
        "general.architecture": (STRING, "bitnet"),
        "bitnet.vocab_size": (UINT32, cfg.vocab_size),
        "bitnet.embedding_length": (UINT32, 512),
        "bitnet.block_count": (UINT32, 1),
        "bitnet.feed_forward_length": (UINT32, 512),
        "bitnet.attention.head_count": (UINT32, 4),
        "bitnet.rope.freq_base": (FLOAT32, 10000.0),
    }
    kvs = [(k, t, v) for k, (t, v) in md.items()]
    entries, offset = [], 0
    for name, shape in expected_shapes(cfg).items():
        ttype = 0 if len(shape) == 1 or name == "token_embd.weight" else 1  # F32 / F16
        nbytes = int(np.prod(shape)) * (4 if ttype == 0 else 2)
        entries.append((name, tuple(reversed(shape)), ttype, offset))
        offset += -(-nbytes // 32) * 32
    path = tmp_path / "big.gguf"
    header = gguf_blob(kvs, entries)
    with open(path, "wb") as f:
        f.write(header)
        f.truncate(len(header) + offset)
    assert path.stat().st_size > 2 << 30
    before = _rss_bytes()
    m = open_model_file(path)
    embd = m.dense("token_embd.weight")
    w = m.ternary("blk.0.ffn_up.weight")
    grown = _rss_bytes() - before
    assert embd.shape == (1 << 20, 512) and isinstance(embd, np.memmap)
    assert w.raw.nbytes == 512 * 512 * 2
    assert grown < 64 << 20, f"opening grew RSS by {grown >> 20} MiB"


def test_llama_cpp_scale_tensor_multiplies(tmp_path, tensors):
    t = dict(tensors)
    t["blk.0.attn_q.scale"] = np.array([2.5], np.float32)
    t["blk.1.ffn_down.scale"] = np.linspace(1, 2, TINY.hidden_size).astype(np.float32)
    m = open_model_file(write_gguf(tmp_path / "s.gguf", TINY, t))
    plain = open_model_file(write_gguf(tmp_path / "p.gguf", TINY, tensors))
    for name, factor in (
        ("blk.0.attn_q.weight", 2.5),
        ("blk.1.ffn_down.weight", t["blk.1.ffn_down.scale"]),
    ):
        c, s = m.ternary(name).unpack()
        c0, s0 = plain.ternary(name).unpack()
        np.testing.assert_array_equal(c, c0)
        np.testing.assert_allclose(s, s0 * factor, rtol=1e-6)


def test_untied_output(tmp_path, tensors):
    t = dict(tensors, **{"output.weight": tensors["token_embd.weight"] * 2})
    cfg = dataclasses.replace(TINY, tied_embeddings=False)
    m = open_model_file(write_gguf(tmp_path / "u.gguf", cfg, t))
    assert m.config.tied_embeddings is False and m.has("output.weight")
    assert m.dense("output.weight").shape == (TINY.vocab_size, TINY.hidden_size)


def test_config_errors_name_file_and_tensor(tmp_path, tensors):
    p = write_gguf(tmp_path / "a.gguf", TINY, tensors, extra_metadata={"bitnet.block_count": 3})
    with pytest.raises(
        ModelFileError, match=r"a\.gguf: missing tensor 'blk\.2\.attn_norm\.weight'"
    ):
        open_model_file(p)
    p = write_gguf(
        tmp_path / "b.gguf", TINY, tensors, extra_metadata={"bitnet.feed_forward_length": 1024}
    )
    with pytest.raises(
        ModelFileError,
        match=r"b\.gguf: tensor 'blk\.0\.ffn_gate\.weight' has shape \[512, 256\], the config needs \[1024, 256\]",
    ):
        open_model_file(p)
    p = write_gguf(tmp_path / "c.gguf", dataclasses.replace(TINY, arch="qwen2"), tensors)
    with pytest.raises(UnsupportedModelError, match="architecture 'qwen2' is not a BitNet model"):
        open_model_file(p)
    p = write_gguf(
        tmp_path / "d.gguf", TINY, tensors, extra_metadata={"bitnet.ffn_activation": "geglu"}
    )
    with pytest.raises(ModelFileError, match="unknown ffn_activation"):
        open_model_file(p)
    p = write_gguf(
        tmp_path / "e.gguf", TINY, tensors, extra_metadata={"bitnet.embedding_length": "x"}
    )
    with pytest.raises(GGUFFormatError, match="must be an integer"):
        open_model_file(p)


def test_llama_file_runs_only_as_a_ternary_model(tmp_path, tensors):
    """Arch ``llama`` (HF1BitLLM's layout): no sub-norms needed, adjacent-pair rope, and
    float layer weights must already be ternary (any other llama model is refused)."""
    cfg = dataclasses.replace(TINY, arch="llama", rope_style="norm")
    llama = {k: v for k, v in tensors.items() if "sub_norm" not in k}
    p = write_gguf(tmp_path / "l.gguf", cfg, llama, ternary_type="f16")
    mf = open_model_file(p)
    assert mf.config == cfg and not mf.config.sub_norms
    name = "blk.0.attn_q.weight"
    codes, _ = mf.unpack(name)
    raw = mf.raw(name).tobytes()
    data = bytearray(p.read_bytes())
    at = data.find(raw)
    values = np.frombuffer(raw, "<f2").copy()
    values[np.flatnonzero(values)[0]] *= 3  # one weight off the row's magnitude
    data[at : at + len(raw)] = values.tobytes()
    (tmp_path / "m.gguf").write_bytes(bytes(data))
    with pytest.raises(
        UnsupportedModelError, match=r"'blk\.0\.attn_q\.weight' \(f16\) is not ternary"
    ):
        open_model_file(tmp_path / "m.gguf").unpack(name)
    p = write_gguf(
        tmp_path / "b.gguf", dataclasses.replace(TINY, arch="bitnet"), tensors, ternary_type="f16"
    )
    assert open_model_file(p).config.sub_norms


def test_activation_default_and_key(tmp_path, tensors):
    p = write_gguf(tmp_path / "r.gguf", dataclasses.replace(TINY, ffn_activation="relu2"), tensors)
    assert open_model_file(p).config.ffn_activation == "relu2"
    cfg = dataclasses.replace(TINY, arch="bitnet-b1.58", ffn_activation="relu2")
    p = write_gguf(tmp_path / "b.gguf", cfg, tensors)
    data = bytearray(p.read_bytes())
    key = b"bitnet-b1.58.ffn_activation"
    data[data.find(key) : data.find(key) + len(key)] = b"bitnet-b1.58.ffn_activatioX"
    p.write_bytes(bytes(data))
    assert open_model_file(p).config.ffn_activation == "relu2"  # bitnet-b1.58's default


def test_block_scales_that_differ_within_a_row(tmp_path, tensors):
    p = write_gguf(tmp_path / "t.gguf", TINY, tensors, ternary_type="tq2_0")
    m = open_model_file(p)
    info = m.tensor_info("blk.0.ffn_down.weight")  # 512 columns: 2 blocks a row
    data = bytearray(p.read_bytes())
    off = info.offset + 66 + 64  # second block's d
    data[off : off + 2] = np.array([7.0], np.float16).tobytes()
    p.write_bytes(bytes(data))
    with pytest.raises(
        ModelFileError,
        match=r"t\.gguf: tensor 'blk\.0\.ffn_down\.weight'.*different per-block scales",
    ):
        open_model_file(p).unpack("blk.0.ffn_down.weight")


def test_qk256_without_scale_tensor(files, tmp_path):
    data = files["qk256"].read_bytes().replace(b"blk.0.attn_q.scale", b"blk.0.attn_q.scalX")
    p = tmp_path / "noscale.gguf"
    p.write_bytes(data)
    with pytest.raises(UnsupportedModelError, match="has no scale tensor 'blk.0.attn_q.scale'"):
        open_model_file(p).ternary("blk.0.attn_q.weight")


def test_type_36_of_no_known_size(files, tmp_path):
    data = bytearray(files["tq2_0"].read_bytes())
    name = b"blk.0.attn_q.weight"
    pos = data.find(name) + len(name) + 4 + 16  # n_dims, two dims
    assert struct.unpack_from("<I", data, pos)[0] == 35
    struct.pack_into("<I", data, pos, 36)
    p = tmp_path / "x.gguf"
    p.write_bytes(bytes(data))
    with pytest.raises(GGUFFormatError, match="match none of I2_S"):
        open_model_file(p)


def test_dense_dequantizes_other_gguf_types(tmp_path):
    x = np.random.default_rng(0).standard_normal((2, 64)).astype(np.float32)
    q = gguf.quants.quantize(x, gguf.GGMLQuantizationType.Q8_0)
    blob = gguf_blob(
        [("general.architecture", STRING, "test")], [("q", (64, 2), 8, 0)], q.tobytes()
    )
    (tmp_path / "q.gguf").write_bytes(blob)
    f = GGUFFile(tmp_path / "q.gguf")
    np.testing.assert_allclose(
        f.dense("q"), gguf.quants.dequantize(q, gguf.GGMLQuantizationType.Q8_0)
    )
    with pytest.raises(ModelFileError, match="no tensor 'nope'"):
        f.tensor_info("nope")


@pytest.mark.parametrize(
    "qtype", [gguf.GGMLQuantizationType.TQ2_0, gguf.GGMLQuantizationType.TQ1_0]
)
def test_reads_a_file_written_by_gguf_py_itself(tmp_path, tensors, qtype):
    """A file made the llama.cpp way (gguf-py's writer and quantizer), not by write_gguf."""
    path = tmp_path / "ref.gguf"
    w = gguf.GGUFWriter(path, "bitnet")
    w.add_context_length(TINY.context_length)
    w.add_embedding_length(TINY.hidden_size)
    w.add_block_count(TINY.num_layers)
    w.add_feed_forward_length(TINY.intermediate_size)
    w.add_head_count(TINY.num_heads)
    w.add_head_count_kv(TINY.num_kv_heads)
    w.add_rope_freq_base(TINY.rope_theta)
    w.add_layer_norm_rms_eps(TINY.rms_norm_eps)
    w.add_vocab_size(TINY.vocab_size)
    want = {}
    ternary = set(ternary_tensor_names(TINY))
    for name, x in tensors.items():
        if name in ternary:  # llama.cpp's converter: round(W / mean|W|).clamp(-1, 1) * mean|W|
            s = np.abs(x).mean()
            q = (np.clip(np.round(x / s), -1, 1) * s).astype(np.float32)
            want[name] = q
            w.add_tensor(name, gguf.quants.quantize(q, qtype), raw_dtype=qtype)
        else:
            w.add_tensor(name, x.astype(np.float16 if x.ndim == 2 else np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    m = open_model_file(path)
    assert m.config == TINY
    for name, q in want.items():
        np.testing.assert_array_equal(
            m.ternary(name).dense(), gguf.quants.dequantize(gguf.quants.quantize(q, qtype), qtype)
        )


@pytest.mark.parametrize("device", ["cpu", "cpu-reference"])
def test_scale_tensors_of_a_tq2_0_model_reach_the_logits(tmp_path, tensors, device):
    """llama.cpp's optional ``.scale`` of a TQ2_0 weight multiplies it on every provider:
    the native CPU one reads TQ2_0 bytes as they are (layout ``auto``), which hold the
    block scales but not this factor. A model with the scales equals one whose weights
    were written already multiplied (the same codes, scales times the factor)."""
    from bitnet_core.model.api import load

    t = dict(tensors)
    factors = {"blk.0.attn_q": 2.0, "blk.1.ffn_down": 0.5}  # powers of two: exact either way
    scaled = dict(tensors)
    for base, f in factors.items():
        t[base + ".scale"] = np.array([f], np.float32)
        scaled[base + ".weight"] = tensors[base + ".weight"] * np.float32(f)
    with_scales = load(write_gguf(tmp_path / "s.gguf", TINY, t), device=device, progress=False)
    multiplied = load(write_gguf(tmp_path / "m.gguf", TINY, scaled), device=device, progress=False)
    plain = load(write_gguf(tmp_path / "p.gguf", TINY, tensors), device=device, progress=False)
    ids = [1, 5, 9, 14, 3]
    want = multiplied.runner.logits(ids)
    np.testing.assert_allclose(with_scales.runner.logits(ids), want, rtol=1e-5, atol=1e-5)
    assert np.abs(plain.runner.logits(ids) - want).max() > 0.05
