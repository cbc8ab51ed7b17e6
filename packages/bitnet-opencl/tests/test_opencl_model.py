"""Whole-model agreement with the CPU reference engine on a small generated model."""

from __future__ import annotations

import numpy as np
import pytest

from bitnet_core.config import BitNetConfig
from bitnet_core.model import Model, random_weights


def small_config(activation: str) -> BitNetConfig:
    # odd sizes: head_dim 20, hidden 120, FFN 200 (none a multiple of 64), GQA 6/2
    return BitNetConfig(
        vocab_size=300,
        hidden_size=120,
        num_layers=2,
        num_heads=6,
        num_kv_heads=2,
        intermediate_size=200,
        context_length=64,
        ffn_activation=activation,
    )


@pytest.fixture(scope="module", params=["silu", "relu2"])
def models(request, ocl):
    weights = random_weights(small_config(request.param), seed=7)
    return (
        Model.from_weights(weights, device="cpu-reference"),
        Model.from_weights(weights, device="opencl"),
    )


def _close(got: np.ndarray, want: np.ndarray) -> None:
    # int8 activation codes may flip where float rounding differs: a small,
    # bounded drift relative to the logits' range, never a different shape
    scale = float(np.abs(want).max())
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-3 * scale)


def test_provider_is_opencl(models):
    _, ocl_model = models
    assert ocl_model.provider.name == "opencl"
    assert "selected=opencl" in str(ocl_model.selection)


def test_prefill_logits(models):
    ref_model, ocl_model = models
    prompt = np.array([1, 5, 299, 42, 42, 7, 100, 3, 250, 11, 12, 13])  # 12 > GEMV_MAX_TOKENS
    _close(ocl_model.logits(prompt), ref_model.logits(prompt))


def test_decode_steps(models):
    ref_model, ocl_model = models
    rb, ob = ref_model.backend, ocl_model.backend
    with rb.new_cache() as rs, ob.new_cache() as os_:
        _close(ob.forward([4, 8, 15], os_), rb.forward([4, 8, 15], rs))
        for tok in (16, 23, 42, 0, 299):
            _close(ob.forward([tok], os_), rb.forward([tok], rs))


def test_greedy_tokens(models):
    ref_model, ocl_model = models
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    want = ref_model.generate_ids(prompt, max_tokens=12, temperature=0.0)
    got = ocl_model.generate_ids(prompt, max_tokens=12, temperature=0.0)
    assert got == want
