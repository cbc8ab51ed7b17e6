"""Embedding models (Qwen3/Gemma3 BitNet graphs): pooling, ``Model.embed``, bitnet.cpp's
files, and (marker ``crossval``) transformers' embeddings of the same checkpoints."""

from __future__ import annotations

import zlib

import gguf
import numpy as np
import pytest

import bitnet_core
from bitnet_core.config import BitNetConfig
from bitnet_core.errors import BitnetError, ConfigError, ContextLengthError, ShapeError
from bitnet_core.formats.absmean import ternarize_rows
from bitnet_core.gguf import write_gguf
from bitnet_core.hal.weights import TernaryWeight
from bitnet_core.model import embeddings
from bitnet_core.model.random import byte_tokenizer_metadata, random_weights

DEVICES = ["cpu-reference", "cpu"]


def _config(arch: str, **kw) -> BitNetConfig:
    """Shapes every ternary type holds (columns multiples of 256); head_dim != hidden/heads."""
    base = dict(
        vocab_size=300,
        hidden_size=256,
        num_heads=2,
        num_kv_heads=1,
        intermediate_size=512,
        context_length=64,
        arch=arch,
        linear_norms=True,
        pooling="last",
        rms_norm_eps=1e-6,
        linear_norm_eps=1e-6,
        key_length=128 if arch == "qwen3" else 256,
    )
    if arch == "gemma3":  # what a bitnet.cpp gemma3 file implies (no keys for these)
        base.update(
            num_layers=6,
            ffn_activation="gelu",
            attn_scalar=256.0,
            embedding_scale=16.0,
            sliding_window=512,
            sliding_window_pattern=6,
            rope_theta_local=10000.0,
            rope_theta=1e6,
        )
    else:
        base.update(num_layers=2, rope_theta=1e6)
    base.update(kw)
    return BitNetConfig(**base)


def _latent(cfg: BitNetConfig, seed: int) -> dict[str, np.ndarray]:
    """GGUF name -> float32: latent BitLinear weights (normal), float16-exact rest."""
    rng = np.random.default_rng(seed)
    ref = random_weights(cfg, seed=seed)
    out: dict[str, np.ndarray] = {}
    for name, w in ref.ternary.items():
        out[name] = rng.normal(0, 1 / np.sqrt(w.cols), (w.rows, w.cols)).astype(np.float32)
    for name, a in ref.dense.items():
        out[name] = np.asarray(a, dtype=np.float16).astype(np.float32)
    return out


def _bitnet_cpp_i2_s(w: np.ndarray) -> np.ndarray:
    """bitnet.cpp's embedding converter's ``quantize_to_i2_s`` (its steps, as documented)."""
    n = w.size
    abs_mean = max(float(np.mean(np.abs(w.reshape(-1)))), 1e-5)
    qf = np.round(w.reshape(-1) / np.float32(abs_mean)).clip(-1, 1)
    q = np.ones(n, np.uint8)
    q[qf > 0.5], q[qf < -0.5] = 2, 0
    q = q.reshape(-1, 4, 32)
    packed = (q[:, 0] << 6) | (q[:, 1] << 4) | (q[:, 2] << 2) | q[:, 3]
    out = np.zeros(n // 4 + 32, np.uint8)
    out[: n // 4] = packed.reshape(-1)
    out[n // 4 : n // 4 + 4] = np.frombuffer(np.float32(abs_mean).tobytes(), np.uint8)
    return out


def _write_bitnet_cpp_file(path, cfg: BitNetConfig, latent: dict[str, np.ndarray]) -> None:
    """A file as bitnet.cpp's ``convert-bitnet-embedding-to-gguf.py --outtype i2_s`` writes
    it: its keys only (no sliding window, rope base of local layers, query scalar, input
    norm eps), I2_S ternary weights, float16 norms and embeddings, no ``output.weight``."""
    w = gguf.GGUFWriter(str(path), cfg.arch)
    w.add_block_count(cfg.num_layers)
    w.add_context_length(cfg.context_length)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_heads)
    w.add_head_count_kv(cfg.num_kv_heads)
    w.add_vocab_size(cfg.vocab_size)
    w.add_rope_dimension_count(cfg.head_dim)
    w.add_key_length(cfg.head_dim)
    w.add_value_length(cfg.head_dim)
    w.add_rope_freq_base(cfg.rope_theta)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_file_type(40)
    w.add_pooling_type(gguf.PoolingType.LAST)
    for key, value in byte_tokenizer_metadata(cfg.vocab_size).items():
        if isinstance(value, list) and value and isinstance(value[0], str):
            w.add_array(key, value)
        elif isinstance(value, (list, np.ndarray)):
            w.add_array(key, list(np.asarray(value).tolist()))
        elif isinstance(value, bool):
            w.add_bool(key, value)
        elif isinstance(value, int):
            w.add_uint32(key, value)
        elif isinstance(value, str):
            w.add_string(key, value)
    data = []
    for name, a in latent.items():
        if a.ndim == 2 and name != "token_embd.weight":  # I2_S: GGML type 36 of its ggml fork
            raw = _bitnet_cpp_i2_s(a)
            w.add_tensor_info(name, a.shape, np.dtype(np.float32), raw.nbytes, raw_dtype=36)
        else:
            raw = a.astype(np.float16)
            w.add_tensor_info(name, a.shape, raw.dtype, raw.nbytes)
        data.append(raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for raw in data:
        w.write_tensor_data(raw)
    w.close()


def _write_ours(path, cfg: BitNetConfig, latent: dict[str, np.ndarray]) -> None:
    tensors: dict = {}
    for name, a in latent.items():
        if a.ndim == 2 and name != "token_embd.weight":
            codes, scales = ternarize_rows(a, per_row=False)
            tensors[name] = TernaryWeight.from_codes(codes, scales, name)
        else:
            tensors[name] = a
    write_gguf(
        path,
        cfg,
        tensors,
        ternary_type="i2_s",
        tokenizer_metadata=byte_tokenizer_metadata(cfg.vocab_size),
    )


def _ids(seed: int, *lengths: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(3, 300, n).tolist() for n in lengths]


@pytest.mark.parametrize("arch", ["qwen3", "gemma3"])
def test_bitnet_cpp_file_gives_our_embeddings(tmp_path, arch):
    """bitnet.cpp's names, keys and I2_S packing read as the same model as our conversion."""
    cfg = _config(arch)
    latent = _latent(cfg, zlib.crc32(arch.encode()))
    _write_bitnet_cpp_file(tmp_path / "theirs.gguf", cfg, latent)
    _write_ours(tmp_path / "ours.gguf", cfg, latent)
    ids = _ids(1, 9, 3)
    for quantize in (False, True):
        opts = dict(quantize_activations=quantize, progress=False)
        theirs = bitnet_core.load(tmp_path / "theirs.gguf", "cpu-reference", **opts)
        ours = bitnet_core.load(tmp_path / "ours.gguf", "cpu-reference", **opts)
        assert theirs.config == ours.config, (theirs.config, ours.config)
        got, want = theirs.embed(ids), ours.embed(ids)
        assert got.shape == (2, cfg.hidden_size)
        if not quantize:  # their scale is float32 absmean, ours the float64 one rounded
            np.testing.assert_allclose(got, want, atol=1e-5)
        assert np.sum(got * want, axis=1).min() >= 0.9999


@pytest.fixture(scope="module", params=["qwen3", "gemma3"])
def small_model_file(request, tmp_path_factory):
    """A small embedding model file of each graph (Gemma3: window 4, every 2nd layer global)."""
    arch = request.param
    kw = {} if arch == "qwen3" else dict(num_layers=4, sliding_window=4, sliding_window_pattern=2)
    cfg = _config(arch, **kw)
    path = tmp_path_factory.mktemp("emb") / f"{arch}.gguf"
    _write_ours(path, cfg, _latent(cfg, zlib.crc32(f"small-{arch}".encode())))
    return path


@pytest.mark.parametrize("device", DEVICES)
def test_embed_batched_equals_one_at_a_time(small_model_file, device):
    model = bitnet_core.load(small_model_file, device, progress=False)
    ids = _ids(2, 11, 2, 7)  # 11 > the Gemma3 window
    together = model.embed(ids)
    alone = np.concatenate([model.embed([x]) for x in ids])
    np.testing.assert_allclose(together, alone, atol=1e-5)
    assert np.allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)
    short = model.embed(ids, dimensions=16)
    np.testing.assert_allclose(short, embeddings.normalize(together[:, :16]), atol=1e-6)


def test_embed_refuses_bad_input_clearly(small_model_file):
    model = bitnet_core.load(small_model_file, "cpu-reference", progress=False)
    with pytest.raises(ShapeError, match="empty"):
        model.embed([[]])
    with pytest.raises(ContextLengthError, match="context"):
        model.embed([[5] * 65])
    with pytest.raises(ConfigError, match="dimensions"):
        model.embed([[5, 6]], dimensions=0)
    with pytest.raises(BitnetError, match="embedding model"):
        model.logits([5, 6])


def test_pooling_modes():
    h = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert embeddings.pool(h, "last").tolist() == [8, 9, 10, 11]
    assert embeddings.pool(h, "cls").tolist() == [0, 1, 2, 3]
    assert embeddings.pool(h, "mean").tolist() == [4, 5, 6, 7]
    v = embeddings.normalize(np.array([[3.0, 4.0, 12.0]]), dimensions=2)
    np.testing.assert_allclose(v, [[0.6, 0.8]], atol=1e-7)
    with pytest.raises(ConfigError):
        embeddings.normalize(np.ones((1, 3)), dimensions=4)


# --- against transformers ---------------------------------------------------------------


@pytest.mark.crossval
@pytest.mark.parametrize("arch", ["qwen3", "gemma3"])
def test_embeddings_match_transformers(tmp_path, arch):
    """Converted (F16, TQ2_0, TQ1_0, I2_S), run on the reference and native CPU providers:
    cosine with transformers' pooled, normalized output >= 0.9999 without activation
    quantization, >= 0.99 with it; inputs longer than Gemma3's window of 5."""
    from embedding_models import hf_embedding_checkpoint, transformers_embeddings

    from bitnet_core.convert.checkpoint import convert_checkpoint

    src = hf_embedding_checkpoint(tmp_path / "hf", arch, seed=zlib.crc32(arch.encode()))
    ids = _ids(3, 12, 4, 7)
    for quantize, floor in ((False, 0.9999), (True, 0.99)):
        want = transformers_embeddings(src, ids, quantize)
        for ttype in ("f16", "tq2_0", "tq1_0", "i2_s"):
            out = convert_checkpoint(
                src, tmp_path / f"{ttype}.gguf", ternary_type=ttype, overwrite=True
            )
            for device in DEVICES:
                model = bitnet_core.load(out, device, quantize_activations=quantize, progress=False)
                got = model.embed(ids)
                cos = np.sum(got * want, axis=1)
                assert cos.min() >= floor, (arch, quantize, ttype, device, cos)
