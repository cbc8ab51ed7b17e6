"""Small BitNet embedding-model files (qwen3/gemma3 graphs) without torch: our conversion
(``write_ours``) and a file as bitnet.cpp's embedding converter writes it
(``write_bitnet_cpp_file``: its keys and names, its I2_S packing), from the same latent
float weights (``latent``)."""

from __future__ import annotations

import gguf
import numpy as np

from bitnet_core.config import BitNetConfig
from bitnet_core.formats.absmean import ternarize_rows
from bitnet_core.gguf import write_gguf
from bitnet_core.hal.weights import TernaryWeight
from bitnet_core.model.random import byte_tokenizer_metadata, random_weights


def config_of(arch: str, **kw) -> BitNetConfig:
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


def latent(cfg: BitNetConfig, seed: int) -> dict[str, np.ndarray]:
    """GGUF name -> float32: latent BitLinear weights (normal), float16-exact rest."""
    rng = np.random.default_rng(seed)
    ref = random_weights(cfg, seed=seed)
    out: dict[str, np.ndarray] = {}
    for name, w in ref.ternary.items():
        out[name] = rng.normal(0, 1 / np.sqrt(w.cols), (w.rows, w.cols)).astype(np.float32)
    for name, a in ref.dense.items():
        out[name] = np.asarray(a, dtype=np.float16).astype(np.float32)
    return out


def bitnet_cpp_i2_s(w: np.ndarray) -> np.ndarray:
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


def write_bitnet_cpp_file(path, cfg: BitNetConfig, latent: dict[str, np.ndarray]) -> None:
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
            raw = bitnet_cpp_i2_s(a)
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


def write_ours(
    path, cfg: BitNetConfig, latent: dict[str, np.ndarray], tokenizer: dict | None = None
) -> None:
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
        tokenizer_metadata=tokenizer or byte_tokenizer_metadata(cfg.vocab_size),
    )
