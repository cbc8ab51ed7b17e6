"""KV caches in float16 (the native CPU providers' default, as llama.cpp's) and float32.

float16 storage is round-to-nearest-even of the float32 K/V, the same on the
op-by-op path (numpy's cast) and in the fused C++ forward (F16C or the scalar
conversion); the logits it gives stay close to the float32 cache's on a
trained model. The lazy (grow-in-place) host cache never copies on growth.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from native_cpu import available_providers

from bitnet_core.errors import ConfigError
from bitnet_core.model import KVCache, KVCacheConfig, demo_model_path, load
from bitnet_core.providers.reference import ReferenceProvider
from bitnet_core.sdk.kv_cache import resolve_kv_dtype

HELD_OUT = Path(__file__).parent / "data" / "shakespeare_heldout.txt"


@pytest.mark.parametrize("prov", available_providers(), ids=lambda p: p.name)
def test_native_to_f16_rounds_like_numpy(prov):
    """The kernel's float16 conversion (used by the fused kv store) equals numpy's astype."""
    rng = np.random.default_rng(0)
    specials = np.array(
        [0.0, -0.0, 1.0, 65504.0, 65519.99, 65520.0, -65520.0, 1e6, np.inf, -np.inf,
         2.0**-14, 2.0**-24, 2.0**-25, 3 * 2.0**-26, 2.0**-26, 1e-9, 1.00048828125,
         1.000732421875, 0.1, -7.3e-6, 5.96e-8],
        np.float32,
    )  # fmt: skip
    x = np.concatenate(
        [specials, rng.standard_normal(997).astype(np.float32) * 10.0 ** rng.integers(-8, 5, 997)]
    ).astype(np.float32)
    got = prov.kernels.to_f16(x)
    assert got.dtype == np.uint16
    with np.errstate(over="ignore"):  # 65520 and up become inf, as intended
        want = x.astype(np.float16).view(np.uint16)
    np.testing.assert_array_equal(got, want)


def test_kv_dtype_config_and_resolution():
    assert KVCacheConfig(dtype="f16").dtype == "float16"
    assert KVCacheConfig(dtype=np.float32).dtype == "float32"
    with pytest.raises(ConfigError, match="float32 .f32. or float16"):
        KVCacheConfig(dtype="q8_0")
    ref = ReferenceProvider()
    assert resolve_kv_dtype(ref, None) == np.float32  # the spec's default
    assert resolve_kv_dtype(ref, KVCacheConfig(dtype="f16")) == np.float16

    class Float32Only:
        name = "gpu-x"

    assert resolve_kv_dtype(Float32Only(), None) == np.float32
    with pytest.raises(ConfigError, match="gpu-x keeps its KV cache in float32"):
        resolve_kv_dtype(Float32Only(), KVCacheConfig(dtype="f16"))
    for prov in available_providers():
        assert resolve_kv_dtype(prov, None) == np.float16


def test_lazy_cache_grows_in_place():
    made = []

    def allocate(shape):
        made.append(shape)
        return np.zeros(shape, np.float16)

    cache = KVCache(
        num_layers=2, kv_heads=1, head_dim=4, context_length=1000,
        config=KVCacheConfig(block_size=16), allocate=allocate,
        copy=lambda dst, src: pytest.fail("a lazy cache must not copy"), dtype=np.float16, lazy=True,
    )  # fmt: skip
    seq = cache.new_sequence(max_tokens=300)
    seq.reserve(10)
    assert made == [(304, 1, 4)] * 4  # K and V of 2 layers, at the sequence's max length
    k0 = seq.k[0]
    k0[:10] = 1.0
    seq.advance(10)
    for n in (17, 100, 299):
        seq.reserve(n)
        assert seq.k[0] is k0 and seq.capacity >= n and seq.capacity % 16 == 0
    assert len(made) == 4
    assert cache.used_bytes == seq.blocks * 16 * cache.bytes_per_token
    assert cache.bytes_per_token == 2 * 2 * 1 * 4 * 2  # float16


def test_demo_model_float16_cache_close_to_float32():
    """On the trained demo model float16 K/V move the logits by well under 1 %."""
    path = demo_model_path()
    provs = available_providers()
    if path is None or not provs:
        pytest.skip("no demo model or no native CPU provider")
    name = provs[0].name
    m32 = load(path, name, kv_cache=KVCacheConfig(dtype="f32"), progress=False)
    m16 = load(path, name, progress=False)
    assert m16.runner.kv.dtype == np.float16
    ids = m32.tokenizer.encode(HELD_OUT.read_text())[:200]
    a, b = m32.runner.logits(ids), m16.runner.logits(ids)
    rel = np.abs(a - b).max(axis=1) / np.abs(a).max(axis=1)
    assert rel.max() < 0.01, rel.max()
    assert (a.argmax(axis=1) == b.argmax(axis=1)).mean() >= 0.97
