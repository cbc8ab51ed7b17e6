"""What the kit cannot know about this backend: its registration and its C++ kernels."""

from __future__ import annotations

import numpy as np
import pytest

from bitnet_core.errors import ShapeError
from bitnet_core.hal import REGISTRY, TernaryWeight, select


def test_registered_and_selectable():
    REGISTRY.refresh()
    record = REGISTRY.get("template")
    assert record is not None, "entry point bitnet.providers:template is not installed"
    assert record.probe(explicit=True).available, record.probe(explicit=True).reason
    assert select("template").record.name == "template"


def test_kernels_are_native():
    from bitnet_template import _kernels

    assert _kernels.__file__.endswith((".so", ".pyd"))


def test_ops_it_lacks_run_on_the_host_and_the_receipt_says_so():
    from bitnet_core.config import BitNetConfig
    from bitnet_core.model import Model, random_weights

    record = REGISTRY.get("template")
    assert record.provider.kernel_names() == [
        "to_device", "to_host", "empty", "load_ternary", "reshape", "matmul_i2s", "kv_store"
    ]  # fmt: skip
    assert "attention" in record.provider.host_ops and "matmul_i2s" not in record.provider.host_ops
    config = BitNetConfig(
        vocab_size=64, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
        intermediate_size=48, context_length=32,
    )  # fmt: skip
    model = Model.from_weights(random_weights(config, seed=1), "template")
    want = Model.from_weights(random_weights(config, seed=1), "cpu-reference")
    assert model.generate_ids([1, 2, 3], max_tokens=6, temperature=0) == want.generate_ids(
        [1, 2, 3], max_tokens=6, temperature=0
    )
    receipt = model.receipt()["provider"]
    assert "matmul_i2s" in receipt["kernels"] and "attention" not in receipt["kernels"]
    assert {"attention", "rmsnorm", "quantize_act"} <= set(receipt["host_ops"])
    assert receipt["host_calls"]["attention"] > 0


def test_matmul_i2s_rejects_a_wrong_weight():
    provider = REGISTRY.get("template").provider
    weight = provider.load_ternary(TernaryWeight.from_codes(np.ones((3, 6), np.int8), 1.0))
    with pytest.raises(ShapeError):
        provider.matmul_i2s(np.ones((2, 5), np.int8), np.ones(2, np.float32), weight)
