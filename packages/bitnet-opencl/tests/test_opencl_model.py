"""Whole-model agreement with the CPU reference engine on a small generated model."""

from __future__ import annotations

import pytest

from bitnet_core.model import Model, random_weights
from bitnet_core.testing.strict import (
    parity_suite,
    strict_config,
)


@pytest.fixture(scope="module", params=["silu", "relu2"])
def models(request, ocl):
    weights = random_weights(strict_config(request.param), seed=7)
    return (
        Model.from_weights(weights, device="cpu-reference"),
        Model.from_weights(weights, device="opencl"),
    )


def test_provider_is_opencl(models):
    _, ocl_model = models
    assert ocl_model.provider.name == "opencl"
    assert "selected=opencl" in str(ocl_model.selection)


# prefill of 12 tokens (> GEMV_MAX_TOKENS: the tiled GEMM), decode steps, greedy tokens
TestStrictParity = parity_suite([12])
