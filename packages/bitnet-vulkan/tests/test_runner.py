"""``VulkanRunner``: the fused forward pass and recorded decode steps, on whole models.

Greedy tokens equal the CPU reference engine's (float32 and float16 caches),
a decode step is one submission, the recorded step is recorded again when the
KV cache's buffers change (capacity crossing) and stays correct, batches and
the switches (``BITNET_VULKAN_FUSED=0``, a device without subgroup arithmetic)
take the documented paths.
"""

from __future__ import annotations

import numpy as np
import pytest

from bitnet_core.config import BitNetConfig
from bitnet_core.errors import StrictModeError
from bitnet_core.model.api import Model
from bitnet_core.model.random import random_weights
from bitnet_core.sdk.runner import GenericRunner
from bitnet_vulkan.provider import VulkanProvider
from bitnet_vulkan.runner import VulkanRunner
from bitnet_vulkan.runtime.context import ENV_SUBGROUP

PROMPT = [5, 300, 17, 17, 0, 42, 299, 8, 150, 3, 77]


def config(act: str = "silu", **kw) -> BitNetConfig:
    base = dict(
        vocab_size=301,
        hidden_size=96,
        num_layers=3,
        num_heads=6,
        num_kv_heads=2,
        intermediate_size=200,
        context_length=256,
        ffn_activation=act,
        rope_style="neox" if act == "silu" else "norm",
    )
    base.update(kw)
    return BitNetConfig(**base)


@pytest.fixture(scope="module", params=["silu", "relu2"])
def weights(request):
    return random_weights(config(request.param), seed=3)


def rel_l2(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(a))


def test_fused_backend_is_used(vk, weights):
    dev = Model.from_weights(weights, device="vulkan")
    assert isinstance(dev.runner, VulkanRunner) and dev.runner.fused
    dev.logits(PROMPT)
    ran = set(dev.provider.trace.kernel_names())
    assert {"norm_quant", "rope_store", "attention_split"} <= ran


def test_logits_and_greedy_tokens_across_capacity_crossings(vk, weights):
    """80 tokens from an 11-token prompt: the cache grows 64 -> 128 rows (2 attention splits)."""
    ref = Model.from_weights(weights, device="cpu-reference")
    dev = Model.from_weights(weights, device="vulkan")
    a, b = ref.logits(PROMPT), dev.logits(PROMPT)
    assert rel_l2(a, b) < 1e-3 and (a.argmax(-1) == b.argmax(-1)).all()
    backend = dev.runner
    before = dict(backend.stream.stats)
    got = dev.generate_ids(PROMPT, max_tokens=80, temperature=0)
    assert got == ref.generate_ids(PROMPT, max_tokens=80, temperature=0)
    # one recorded decode step per cache layout: 64 rows, then 128 rows (new buffers)
    layouts = {key[0][-3] for key in backend._programs if len(key) == 1}
    assert {(64, 2, 16), (128, 2, 16)} <= layouts
    replays = backend.stream.stats["replays"] - before["replays"]
    assert replays >= len(got)  # the prefill program and every decode step


def test_recorded_step_rerecorded_after_descriptor_reset(vk, weights):
    dev = Model.from_weights(weights, device="vulkan")
    ref = Model.from_weights(weights, device="cpu-reference")
    want = ref.generate_ids(PROMPT, max_tokens=6, temperature=0)
    assert dev.generate_ids(PROMPT, max_tokens=6, temperature=0) == want
    stream = dev.runner.stream
    stream._reset_descriptors()  # what dropping another model's weights does
    recorded = stream.stats["recorded"]
    assert dev.generate_ids(PROMPT, max_tokens=6, temperature=0) == want
    assert stream.stats["recorded"] > recorded


def test_decode_step_is_one_submission(vk, weights):
    dev = Model.from_weights(weights, device="vulkan")
    backend, trace = dev.runner, dev.provider.trace
    with backend.new_cache() as seq:
        tok = int(backend.forward(PROMPT, seq).argmax())
        for _ in range(2):  # the first step records its program
            tok = int(backend.forward([tok], seq).argmax())
        kernels = sum(trace.kernels.values())
        before = trace.submissions
        for _ in range(5):
            tok = int(backend.forward([tok], seq).argmax())
        assert trace.submissions - before == 5
        assert sum(trace.kernels.values()) == kernels  # replayed: nothing recorded again


@pytest.mark.parametrize("kv_type", ["float16"])
def test_float16_cache_greedy_tokens(vk, weights, kv_type):
    """Against ``cpu-reference`` with the same cache dtype, as tight as the float32 test.

    (The float16 cache moves these logits ~2% from a float32 one, so a cache
    read or written as the wrong dtype shows.) The reference, not the native
    CPU engine: the host's ISA stays out of a GPU test.
    """
    from bitnet_core.sdk.kv_cache import KVCacheConfig

    kv = KVCacheConfig(dtype=kv_type)
    ref = Model.from_weights(weights, device="cpu-reference", kv_cache=kv)
    dev = Model.from_weights(weights, device="vulkan", kv_cache=kv)
    assert str(dev.runner.kv.dtype) == kv_type
    a, b = ref.logits(PROMPT), dev.logits(PROMPT)
    assert rel_l2(a, b) < 1e-3 and (a.argmax(-1) == b.argmax(-1)).all()
    got = dev.generate_ids(PROMPT, max_tokens=40, temperature=0)
    assert got == ref.generate_ids(PROMPT, max_tokens=40, temperature=0)


def test_batch_rows_equal_single_sequences(vk, weights):
    dev = Model.from_weights(weights, device="vulkan")
    backend = dev.runner
    prompts = [PROMPT, [7, 8, 9], [1]]
    want = []
    for p in prompts:
        with backend.new_cache() as seq:
            want.append(backend.forward(p, seq))
    seqs = [backend.new_cache() for _ in prompts]
    try:
        got = backend.forward_batch(list(zip(prompts, seqs, strict=True)))
    finally:
        for s in seqs:
            s.close()
    np.testing.assert_allclose(got, np.stack(want), rtol=1e-5, atol=1e-5)


def test_switch_off_keeps_the_generic_engine(vk, weights, monkeypatch):
    monkeypatch.setenv("BITNET_VULKAN_FUSED", "0")
    dev = Model.from_weights(weights, device="vulkan")
    assert type(dev.runner) is GenericRunner


def test_no_subgroups_is_a_visible_fallback(weights, monkeypatch):
    monkeypatch.setenv(ENV_SUBGROUP, "0")
    p = VulkanProvider()
    if not p.probe(explicit=True).available:
        pytest.skip("no Vulkan device")
    try:
        backend = VulkanRunner(p, weights)
        assert not backend.fused
        assert any("fused forward pass unavailable" in r for r in p.trace.fallbacks)
        ref = Model.from_weights(weights, device="cpu-reference")
        with backend.new_cache() as seq:
            np.testing.assert_allclose(
                backend.forward(PROMPT, seq), ref.logits(PROMPT)[-1], rtol=3e-2, atol=3e-2
            )
        seqs = [backend.new_cache(), backend.new_cache()]
        try:  # the generic engine's batched step (one forward for both)
            got = backend.forward_batch([(PROMPT, seqs[0]), ([4, 5], seqs[1])])
        finally:
            for s in seqs:
                s.close()
        np.testing.assert_allclose(got[0], ref.logits(PROMPT)[-1], rtol=3e-2, atol=3e-2)
        np.testing.assert_allclose(got[1], ref.logits([4, 5])[-1], rtol=3e-2, atol=3e-2)
        monkeypatch.setenv("BITNET_STRICT_MODE", "1")
        with pytest.raises(StrictModeError):
            VulkanRunner(p, weights)
    finally:
        p.close()


def test_interleaved_sequences_each_replay_their_own_step(vk, weights):
    """Two sequences decoding in turns (a server's pattern): a recorded step per cache."""
    ref = Model.from_weights(weights, device="cpu-reference")
    dev = Model.from_weights(weights, device="vulkan")
    backend = dev.runner
    prompts = [PROMPT, [9, 8, 7, 6]]
    want = [ref.generate_ids(p, max_tokens=8, temperature=0) for p in prompts]
    seqs = [backend.new_cache() for _ in prompts]
    try:
        toks = [[int(backend.forward(p, s).argmax())] for p, s in zip(prompts, seqs, strict=True)]
        for _ in range(7):
            for got, seq in zip(toks, seqs, strict=True):
                got.append(int(backend.forward([got[-1]], seq).argmax()))
        programs = {key[0][:2] for key in backend._programs}  # the caches' buffers
    finally:
        for s in seqs:
            s.close()
    assert toks == want
    assert len(programs) >= 2


def _decode(backend, steps: int) -> np.ndarray:
    """The logits of a prompt and ``steps`` greedy decode tokens (past a capacity crossing)."""
    out = []
    with backend.new_cache() as seq:
        logits = backend.forward(PROMPT, seq)
        for _ in range(steps):
            logits = backend.forward([int(logits.argmax())], seq)
            out.append(logits.copy())
    return np.stack(out)


@pytest.mark.parametrize("kv_type", ["float32", "float16"])
def test_four_dispatch_layer_logits_equal_the_ten(vk, weights, kv_type, monkeypatch):
    """One token's layer in four dispatches (``qkv_attend``, ``norm_gemv_*``), or the ten
    with ``BITNET_VULKAN_LAYER=0`` (the batched steps' shaders): the same logits bit for bit,
    over 1 to 16 attention splits of 5 keys (some empty) and a capacity crossing."""
    from bitnet_core.sdk.kv_cache import KVCacheConfig

    runs, dispatches = [], []
    for layer in ("1", "0"):
        monkeypatch.setenv("BITNET_VULKAN_LAYER", layer)
        dev = Model.from_weights(weights, device="vulkan", kv_cache=KVCacheConfig(dtype=kv_type))
        backend = dev.runner
        assert (backend._layer_plan is not None) == (layer == "1")
        backend.keys_per_split = 5
        runs.append(_decode(backend, 75))
        steps = [prog.dispatches for key, (prog, _) in backend._programs.items() if len(key) == 1]
        dispatches.append(set(steps))
    np.testing.assert_array_equal(runs[0], runs[1])
    layers = weights.config.num_layers
    assert dispatches == [{1 + 4 * layers + 2}, {1 + 10 * layers + 2}]
