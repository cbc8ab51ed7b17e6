"""Partial providers: ops a device lacks run on the host, explicitly, and are reported."""

from __future__ import annotations

import numpy as np
import pytest

from bitnet_core.hal.placement import PlacedProvider, missing_required, place
from bitnet_core.hal.provider import Availability
from bitnet_core.providers.reference import ReferenceProvider
from bitnet_core.sdk.provider import DeviceProvider
from bitnet_core.testing import run

REF = ReferenceProvider()


class Box:
    """A device array the host cannot read without ``to_host`` (so every copy is real)."""

    def __init__(self, a: np.ndarray) -> None:
        self.a = a

    shape = property(lambda self: self.a.shape)
    dtype = property(lambda self: self.a.dtype)
    ndim = property(lambda self: self.a.ndim)
    size = property(lambda self: self.a.size)


class MatmulOnly(DeviceProvider):
    """The memory ops and matmul_i2s: a backend's first step."""

    name = family = "matmul-only"
    device_kind = "cpu"
    priority = 900

    def probe(self, explicit: bool = False) -> Availability:
        return Availability.yes("boxes")

    def to_device(self, array):
        return array if isinstance(array, Box) else Box(np.array(array))

    def to_host(self, array):
        return array.a.copy() if isinstance(array, Box) else np.asarray(array)

    def empty(self, shape, dtype=np.float32):
        return Box(np.zeros(shape, dtype))

    def reshape(self, array, shape):
        return Box(array.a.reshape(shape))

    def load_ternary(self, weight):
        return REF.load_ternary(weight)

    def kv_store(self, cache, x, start):
        cache.a[start : start + x.shape[0]] = x.a

    def matmul_i2s(self, xq, xscale, weight):
        return Box(REF.matmul_i2s(xq.a, xscale.a, weight))


def test_a_partial_provider_is_completed_on_the_host_and_passes_the_kit():
    placed = place(MatmulOnly(), REF)
    assert isinstance(placed, PlacedProvider)
    assert "matmul_i2s" in placed.kernel_names() and "matmul_i2s" not in placed.host_ops
    assert {"attention", "rmsnorm", "quantize_act"} <= set(placed.host_ops)
    assert placed.composed_ops == ("linear",)  # quantize_act on the host, matmul_i2s here
    report = run(placed, large=False)
    assert not report.failed, [r.id for r in report.failed][:5]
    assert placed.host_calls["attention"] > 0


def test_device_ops_get_device_arrays_and_host_ops_host_arrays():
    placed = place(MatmulOnly(), REF)
    x = placed.to_device(np.ones((2, 8), np.float32))
    xq, xs = placed.quantize_act(x)  # on the host: downloaded, run, uploaded
    assert isinstance(xq, Box) and isinstance(xs, Box)
    from bitnet_core.hal.weights import TernaryWeight

    w = placed.load_ternary(TernaryWeight.from_codes(np.ones((3, 8), np.int8), 1.0))
    y = placed.matmul_i2s(xq, xs, w)  # on the device: its own weight form
    assert isinstance(y, Box)
    calls = dict(placed.host_calls)
    y2 = placed.linear(x, w)  # its parts, each where it runs: the product on the device
    assert isinstance(y2, Box) and "linear" not in placed.host_calls
    assert placed.host_calls["quantize_act"] == calls["quantize_act"] + 1
    np.testing.assert_allclose(placed.to_host(y2), placed.to_host(y))


def test_a_complete_provider_is_not_wrapped_and_memory_ops_are_required():
    assert place(REF, REF) is REF

    class NoKvStore(MatmulOnly):
        kv_store = None

    assert missing_required(NoKvStore()) == ["kv_store"]
    assert missing_required(MatmulOnly()) == []


def test_registry_records_a_provider_without_memory_ops_as_broken(tmp_path, monkeypatch):
    from bitnet_core.hal import REGISTRY, list_providers

    (tmp_path / "bitnet_test_partial.py").write_text(
        "from bitnet_core.hal.provider import Availability\n"
        "from bitnet_core.sdk.provider import DeviceProvider\n"
        "class P(DeviceProvider):\n"
        "    name = family = 'nomem'; device_kind = 'gpu'; priority = 5\n"
        "    def probe(self, explicit=False):\n"
        "        return Availability.yes('x')\n"
        "    def matmul_i2s(self, xq, xs, w):\n"
        "        return None\n"
    )
    info = tmp_path / "bitnet_test_partial-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: bitnet-test-partial\nVersion: 1.0\n"
    )
    (info / "entry_points.txt").write_text("[bitnet.providers]\nnomem = bitnet_test_partial:P\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    REGISTRY.refresh()
    try:
        rec = {r.name: r for r in list_providers()}["nomem"]
        assert not rec.availability.available and "lacks the memory ops" in rec.availability.reason
    finally:
        REGISTRY.refresh()


@pytest.mark.parametrize("op", ["attention", "silu_mul"])
def test_host_ops_are_counted(op):
    placed = place(MatmulOnly(), REF)
    assert op in placed.host_ops and placed.host_calls.get(op, 0) == 0


def test_a_placed_provider_copies_without_recursion():
    import copy

    placed = place(MatmulOnly(), REF)
    twin = copy.copy(placed)
    assert twin.host_ops == placed.host_ops and twin.name == "matmul-only"


def test_a_model_on_a_partial_provider_runs_its_matmuls_and_the_receipt_says_so():
    """The engine calls ``linear``: composed, its matmul runs on the device (before, the
    whole ``linear`` ran on the host and the device's ``matmul_i2s`` never ran)."""
    from bitnet_core.model import Model, random_weights
    from bitnet_core.sdk.runner import GenericRunner
    from bitnet_core.testing.strict import strict_config

    weights = random_weights(strict_config("silu"), seed=2)
    device = MatmulOnly()
    placed = place(device, REF)
    placed.add(placed.to_device(np.ones(2, np.float32)), placed.to_device(np.ones(2, np.float32)))
    model = Model(GenericRunner(placed, weights))
    want = Model(GenericRunner(ReferenceProvider(), weights))
    prompt = [1, 2, 3]
    assert model.generate_ids(prompt, max_tokens=4, temperature=0) == want.generate_ids(
        prompt, max_tokens=4, temperature=0
    )
    prov = model.receipt()["provider"]
    assert prov["kernels"] == ["kv_store", "matmul_i2s"]  # what ran on the device
    assert device.trace.kernels["matmul_i2s"] > 0
    assert "linear" not in prov["host_calls"] and "linear" not in prov["host_ops"]
    assert {"attention", "rmsnorm", "quantize_act"} <= set(prov["host_calls"])
    assert prov["host_calls"]["add"] == placed.host_calls["add"] - 1  # not the call before it
