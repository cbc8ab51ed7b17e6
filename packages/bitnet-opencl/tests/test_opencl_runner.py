"""The fused, recorded decode step (``OpenCLRunner``): greedy tokens equal the CPU's,
re-recorded when the KV cache grows, and the submissions a step makes, through the
command buffer and through the ctypes loop (``BITNET_OPENCL_COMMAND_BUFFER=0``)."""

from __future__ import annotations

import numpy as np
import pytest

from bitnet_core.errors import StrictModeError
from bitnet_core.model import Model, random_weights
from bitnet_core.sdk.kv_cache import KVCacheConfig
from bitnet_core.sdk.runner import GenericRunner
from bitnet_core.testing.strict import assert_logits_close, strict_config
from bitnet_opencl import runner as runner_module
from bitnet_opencl.runner import OpenCLRunner

BLOCK = 16  # KV blocks of 16 tokens: a 40-token generation crosses capacities 16, 32, 64


@pytest.fixture(scope="module")
def weights():
    return random_weights(strict_config("silu", context=128), seed=11)


@pytest.fixture(scope="module")
def cpu(weights):
    return Model.from_weights(weights, device="cpu-reference")


def _opencl(weights, **kv) -> Model:
    return Model.from_weights(
        weights, device="opencl", kv_cache=KVCacheConfig(block_size=BLOCK, **kv)
    )


def _greedy(backend, prompt, steps):
    """Greedy tokens and every step's logits, through ``backend.forward``."""
    with backend.new_cache() as seq:
        logits = backend.forward(prompt, seq)
        out, all_logits = [], [logits]
        for _ in range(steps):
            out.append(int(np.argmax(logits)))
            logits = backend.forward([out[-1]], seq)
            all_logits.append(logits)
    return out, all_logits


@pytest.mark.parametrize("keys_per_split", [128, 7])
@pytest.mark.parametrize("kv", ["float32", "float16"])
def test_greedy_tokens_equal_the_cpu_across_capacity_crossings(
    weights, mode, kv, keys_per_split, monkeypatch
):
    """Greedy tokens and every step's logits as the CPU reference's with the same cache
    dtype; with 7 keys a split the attention runs over 2, 4 and 9 splits (some empty)."""
    monkeypatch.setattr(runner_module, "KEYS_PER_SPLIT", keys_per_split)
    cpu = Model.from_weights(weights, device="cpu-reference", kv_cache=KVCacheConfig(dtype=kv))
    model = _opencl(weights, dtype=kv)
    backend = model.runner
    assert isinstance(backend, OpenCLRunner) and backend.fused
    trace = model.provider.trace
    attend = "qkv_attend_f16" if kv == "float16" else "qkv_attend"
    recorded = trace.kernels[attend]
    got, got_logits = _greedy(backend, [4, 8, 15, 16, 23], 40)
    want, want_logits = _greedy(cpu.runner, [4, 8, 15, 16, 23], 40)
    assert got == want
    for g, w in zip(got_logits, want_logits, strict=True):
        assert_logits_close(g, w)
    # one recording per capacity the decode steps ran at: 16, 32, 64 tokens
    layers = weights.config.num_layers
    assert trace.kernels[attend] - recorded == 3 * layers
    # each crossing released the layout before (its kernel objects serve the next)
    assert len(backend._recordings) == 1


@pytest.mark.parametrize("layer,per_layer", [("1", 4), ("0", 10)])
def test_a_decode_step_is_three_submissions_with_a_command_buffer(
    weights, mode, layer, per_layer, monkeypatch
):
    """One token's layer: four launches (layer.cl), or fused.cl's ten with
    BITNET_OPENCL_LAYER=0 (the batched steps' kernels; the same logits bit for bit)."""
    monkeypatch.setenv("BITNET_OPENCL_LAYER", layer)
    model = _opencl(weights)
    backend, trace = model.runner, model.provider.trace
    with backend.new_cache() as seq:
        logits = backend.forward([1, 2, 3], seq)
        backend.forward([int(np.argmax(logits))], seq)  # recorded here
        before = trace.submissions
        backend.forward([5], seq)
        per_step = trace.submissions - before
    (rec,) = backend._recordings.values()
    layers = weights.config.num_layers
    assert len(rec.launches) == per_layer * layers + 3  # embed, the layers, norm, head
    if mode == "command-buffer":
        assert rec.command_buffer is not None
        assert per_step == 3  # token write, replay, logits read
    else:
        assert rec.command_buffer is None
        assert per_step == 2 + len(rec.launches)


def test_the_loop_is_a_visible_fallback_and_refused_in_strict_mode(weights, monkeypatch):
    monkeypatch.setenv("BITNET_OPENCL_COMMAND_BUFFER", "0")
    model = _opencl(weights)
    assert any("clEnqueueNDRangeKernel" in r for r in model.provider.trace.fallbacks)
    monkeypatch.setenv("BITNET_STRICT_MODE", "1")
    with pytest.raises(StrictModeError):
        _opencl(weights)


def test_sequences_interleaved_and_a_batch_step_stay_correct(weights, cpu, mode):
    """Two sequences (two recordings) decoded in turn, then one batched step."""
    model = _opencl(weights)
    b, r = model.runner, cpu.runner
    with b.new_cache() as s1, b.new_cache() as s2, r.new_cache() as r1, r.new_cache() as r2:
        assert_logits_close(b.forward([1, 2], s1), r.forward([1, 2], r1))
        assert_logits_close(b.forward([7, 8, 9], s2), r.forward([7, 8, 9], r2))
        for tok in (3, 4, 5):
            assert_logits_close(b.forward([tok], s1), r.forward([tok], r1))
            assert_logits_close(b.forward([tok + 1], s2), r.forward([tok + 1], r2))
        got = b.forward_batch([([6], s1), ([7], s2)])
        want = r.forward_batch([([6], r1), ([7], r2)])
        assert_logits_close(got, want)
        assert_logits_close(b.forward([8], s1), r.forward([8], r1))


def test_fused_switch_off_keeps_the_generic_engine(weights, monkeypatch):
    monkeypatch.setenv("BITNET_OPENCL_FUSED", "0")
    backend = _opencl(weights).runner
    assert type(backend) is GenericRunner


@pytest.mark.parametrize("kv", ["float32", "float16"])
def test_the_four_launch_layer_equals_the_ten_bit_for_bit(weights, kv, monkeypatch):
    """Every step's logits through layer.cl equal fused.cl's chain bit for bit (7 keys a
    split: 1 to 4 splits, some empty, across the cache's growth)."""
    monkeypatch.setattr(runner_module, "KEYS_PER_SPLIT", 7)
    runs = []
    for layer in ("1", "0"):
        monkeypatch.setenv("BITNET_OPENCL_LAYER", layer)
        _, logits = _greedy(_opencl(weights, dtype=kv).runner, [4, 8, 15, 16, 23], 30)
        runs.append(np.stack(logits))
    np.testing.assert_array_equal(runs[0], runs[1])
