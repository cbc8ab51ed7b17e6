"""WebGPU-specific op behaviour the conformance kit does not cover."""

from __future__ import annotations

import numpy as np
import pytest

from bitnet_core.hal.weights import TernaryWeight
from bitnet_core.providers.reference import ReferenceProvider

REF = ReferenceProvider()


@pytest.mark.parametrize(("t", "k", "n"), [(1, 1, 1), (3, 16, 7), (5, 255, 33)])
def test_host_quantized_activations_uploaded(provider, t, k, n):
    """int8 activations quantized on the host and uploaded feed matmul_i2s like device ones."""
    rng = np.random.default_rng(k * 31 + n)
    x = rng.standard_normal((t, k)).astype(np.float32)
    w = TernaryWeight.from_codes(rng.integers(-1, 2, (n, k)), rng.uniform(0.5, 2, n))
    rxq, rxs = REF.quantize_act(x)
    dq = provider.to_device(rxq)
    np.testing.assert_array_equal(provider.to_host(dq), rxq)
    got = provider.to_host(provider.matmul_i2s(dq, rxs, provider.load_ternary(w)))
    ry = REF.matmul_i2s(rxq, rxs, REF.load_ternary(w))
    np.testing.assert_allclose(got, ry, rtol=1e-5, atol=1e-5 * np.abs(ry).max())


def test_one_submission_per_read(provider):
    """Ops are recorded and submitted together when the host reads a result."""
    dev = provider.dev
    x = provider.to_device(np.ones((2, 64), np.float32))
    before = dev.submissions
    y = x
    for _ in range(10):
        y = provider.add(y, x)
    out = provider.to_host(y)
    assert dev.submissions - before == 1
    np.testing.assert_array_equal(out, np.full((2, 64), 11, np.float32))
