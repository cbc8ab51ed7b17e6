"""The discrete-GPU memory path (device-only buffers, staging copies), forced on this device.

On lavapipe every buffer is host-visible, so the path NVIDIA/AMD GPUs take
(``context.unified`` false) would go untested; ``BITNET_VULKAN_FORCE_STAGING=1``
makes the provider allocate as on a discrete GPU.
"""

from __future__ import annotations

import numpy as np
import pytest

from bitnet_core.config import BitNetConfig
from bitnet_core.model.random import random_weights
from bitnet_core.providers.reference import ReferenceProvider
from bitnet_core.sdk.runner import GenericRunner
from bitnet_vulkan.provider import VulkanProvider
from bitnet_vulkan.runtime.context import ENV_FORCE_STAGING

RNG = np.random.default_rng(11)


@pytest.fixture(scope="module")
def staged():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(ENV_FORCE_STAGING, "1")
        p = VulkanProvider()
        if not p.probe(explicit=True).available:
            pytest.skip("no Vulkan device")
        assert not p.context.unified
    yield p
    p.close()


def test_transfers_go_through_staging(staged):
    for a in [
        RNG.standard_normal((3, 7)).astype(np.float32),
        RNG.integers(-128, 127, (5, 33)).astype(np.int8),
        RNG.standard_normal((600, 700)).astype(np.float32),  # > 1 MiB: a buffer of its own
    ]:
        d = staged.to_device(a)
        assert d.buffer.mapped is None
        assert np.array_equal(staged.to_host(d), a)
    assert not staged.to_host(staged.empty((4, 5))).any()


@pytest.mark.parametrize("quantize", [False, True])
def test_model_logits_on_the_staging_path(staged, quantize):
    cfg = BitNetConfig(
        vocab_size=200,
        hidden_size=64,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        intermediate_size=96,
        context_length=32,
    )
    w = random_weights(cfg, seed=5)
    ids = [3, 1, 4, 1, 5, 9, 2, 6]
    want = GenericRunner(ReferenceProvider(), w, quantize_activations=quantize).logits(ids)
    got = GenericRunner(staged, w, quantize_activations=quantize).logits(ids)
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < (1e-4 if not quantize else 3e-2)
    assert (got.argmax(-1) == want.argmax(-1)).mean() >= 0.9
