"""Whole-model agreement with the CPU reference engine on a small generated model."""

from __future__ import annotations

import numpy as np
import pytest

from bitnet_core.model import Model, random_weights
from bitnet_core.testing.strict import (
    assert_logits_close,
    check_decode_steps,
    check_greedy_equal,
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


def test_prefill_logits(models):
    ref_model, ocl_model = models
    prompt = np.array([1, 5, 299, 42, 42, 7, 100, 3, 250, 11, 12, 13])  # 12 > GEMV_MAX_TOKENS
    assert_logits_close(ocl_model.logits(prompt), ref_model.logits(prompt))


def test_decode_steps(models):
    ref_model, ocl_model = models
    check_decode_steps(ref_model.backend, ocl_model.backend)


def test_greedy_tokens(models):
    check_greedy_equal(*models)
