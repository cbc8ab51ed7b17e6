"""The receipt check of the test kit: a run's receipt says what ran, and on what device.

One test in a backend package::

    from bitnet_core.testing.receipt import check_run_receipt

    def test_receipt_lists_what_ran_and_names_the_explicit_device():
        check_run_receipt("vulkan", emulated=lambda avail: avail.details["device_type"] == "cpu")

It runs a small model on the device chosen explicitly and checks that the
receipt validates in strict mode, lists only kernels that ran (no memory op,
no op a silu model never runs), names the device, and says ``device_kind``
``cpu`` for a CPU the API emulates (``emulated`` reads that from the probe).
"""

from __future__ import annotations

from collections.abc import Callable

from ..hal import REGISTRY
from ..hal.provider import Availability
from ..model import Model, random_weights
from ..model.receipt import validate
from .strict import strict_config

#: ops a silu model's decode never runs, and memory ops: a receipt that lists every op
#: the provider class has names them
NEVER_RAN = frozenset(
    {"matmul_ternary_float", "relu2", "relu2_mul", "to_device", "to_host", "empty"}
)


def check_run_receipt(name: str, emulated: Callable[[Availability], bool]) -> dict:
    """Check the receipt of a short greedy run on provider ``name``; return it."""
    import pytest  # the kit runs under pytest; importing bitnet_core.testing does not need it

    avail = REGISTRY.get(name).probe(explicit=True)
    if not avail.available:
        pytest.skip(f"no {name} device: {avail.reason}")
    model = Model.from_weights(random_weights(strict_config("silu"), seed=3), device=name)
    model.generate_ids([1, 2, 3], max_tokens=3, temperature=0)
    receipt = model.receipt()
    validate(receipt, strict=True)
    prov = receipt["provider"]
    assert prov["name"] == name and prov["kernels"]
    assert not NEVER_RAN & set(prov["kernels"]), prov["kernels"]
    assert set(prov["kernels"]) <= set(model.provider.trace.kernels)
    assert prov["device"] == avail.device != ""  # chosen explicitly, still named
    want_kind = "cpu" if emulated(avail) else "gpu"
    assert prov["device_kind"] == avail.device_kind == want_kind
    return receipt
