"""The receipt of a run on opencl (PoCL's CPU device in CI): what ran, and on what device."""

from __future__ import annotations

import pytest

from bitnet_core.hal import REGISTRY
from bitnet_core.model import Model, random_weights
from bitnet_core.model.receipt import validate
from bitnet_core.testing.strict import strict_config

#: ops a silu model's decode never runs, and memory ops: a receipt that lists every op
#: the provider class has (the old receipts) names them
NEVER_RAN = {"matmul_ternary_float", "relu2", "relu2_mul", "to_device", "to_host", "empty"}


def test_receipt_lists_what_ran_and_names_the_explicit_device() -> None:
    avail = REGISTRY.get("opencl").probe(explicit=True)
    if not avail.available:
        pytest.skip(f"no opencl device: {avail.reason}")
    model = Model.from_weights(random_weights(strict_config("silu"), seed=3), device="opencl")
    model.generate_ids([1, 2, 3], max_tokens=3, temperature=0)
    receipt = model.receipt()
    validate(receipt, strict=True)
    prov = receipt["provider"]
    assert prov["name"] == "opencl" and prov["kernels"]
    assert not NEVER_RAN & set(prov["kernels"]), prov["kernels"]
    assert set(prov["kernels"]) <= set(model.provider.trace.kernels)
    assert prov["device"] == avail.device != ""  # chosen explicitly, still named
    # a CPU that the API emulates (the CI's device) is device_kind "cpu", a GPU "gpu"
    is_cpu = avail.details["kind"] == "cpu"
    assert prov["device_kind"] == avail.device_kind == ("cpu" if is_cpu else "gpu")
