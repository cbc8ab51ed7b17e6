"""Probe, adapter choice and limits of the webgpu provider."""

from __future__ import annotations

import numpy as np
import pytest

from bitnet_core.errors import ProviderError
from bitnet_core.hal import select
from bitnet_core.sdk.packing import pack_lanes
from bitnet_webgpu.provider import WebGPUProvider


def test_probe_never_raises_and_cpu_adapter_needs_explicit(provider):
    p = WebGPUProvider()
    auto, explicit = p.probe(), p.probe(explicit=True)
    assert explicit.available
    if explicit.details["cpu_adapter"]:
        assert not auto.available
        assert "CPU WebGPU adapter" in auto.reason


def test_bad_adapter_index_is_reason(monkeypatch):
    monkeypatch.setenv("BITNET_WEBGPU_DEVICE", "99")
    avail = WebGPUProvider().probe(explicit=True)
    assert not avail.available
    assert "BITNET_WEBGPU_DEVICE" in avail.reason


def test_selected_by_name(provider):
    sel = select("webgpu")
    assert sel.record.name == "webgpu"
    assert "selected=webgpu" in str(sel.summary)


def test_tensor_over_binding_limit_is_refused(provider):
    with pytest.raises(ProviderError, match="max-storage-buffer-binding-size"):
        provider.dev.check_size(provider.dev.max_binding + 1, "token_embd.weight")


def test_pack_layout():
    codes = np.zeros((1, 16), np.int8)
    codes[0, 4 * 2 + 3] = 1  # column 11: j=2, i=3 -> bits 8*3 + 2*2 = 28
    word = int(pack_lanes(codes, 16)[0, 0])
    assert (word >> 28) & 3 == 2
    assert bin(word).count("1") == 16  # the other 15 codes are 1 (value 0)


@pytest.mark.parametrize(
    ("env", "value"),
    [
        ("BITNET_WEBGPU_NO_DOT4", "1"),
        ("BITNET_WEBGPU_LAYOUT", "groups"),
        ("BITNET_WEBGPU_LAYOUT", "rows"),
    ],
)
def test_kernel_variants_match(monkeypatch, env, value):
    """Every shader variant (no dot4I8Packed; workgroup-per-row or row-per-invocation
    matmuls) gives the reference's answer, whichever one this adapter picks by default."""
    from bitnet_core.hal.weights import TernaryWeight
    from bitnet_core.providers.reference import ReferenceProvider

    monkeypatch.setenv(env, value)
    p = WebGPUProvider()
    if not p.probe(explicit=True).available:
        pytest.skip("no WebGPU adapter")
    if env == "BITNET_WEBGPU_NO_DOT4":
        assert not p.dev.dot4
    else:
        assert p.dev.rows_layout == (value == "rows")
    rng = np.random.default_rng(5)
    ref = ReferenceProvider()
    for t, k, n in [(1, 77, 9), (6, 300, 130)]:
        x = rng.standard_normal((t, k)).astype(np.float32)
        w = TernaryWeight.from_codes(rng.integers(-1, 2, (n, k)), 1.3)
        table = rng.standard_normal((n, k)).astype(np.float16)
        np.testing.assert_allclose(
            p.to_host(p.linear(p.to_device(x), p.load_ternary(w))),
            ref.linear(x, ref.load_ternary(w)),
            rtol=1e-5,
            atol=1e-5,
        )
        np.testing.assert_allclose(
            p.to_host(p.matmul_dense(p.to_device(x), p.to_device(table))),
            ref.matmul_dense(x, table),
            rtol=1e-4,
            atol=1e-4,
        )


@pytest.mark.parametrize("name", ["BITNET_WEBGPU_DEVICE", "BITNET_WEBGPU_ADAPTER"])
def test_device_variable_and_its_deprecated_old_name(monkeypatch, caplog, name):
    from bitnet_core.errors import DeviceUnavailableError
    from bitnet_webgpu.runtime import choose_adapter

    monkeypatch.delenv("BITNET_WEBGPU_DEVICE", raising=False)
    monkeypatch.delenv("BITNET_WEBGPU_ADAPTER", raising=False)
    monkeypatch.setenv(name, "99")
    with pytest.raises(DeviceUnavailableError, match="BITNET_WEBGPU_DEVICE='99'"):
        choose_adapter(explicit=True)
    assert ("deprecated" in caplog.text) == (name == "BITNET_WEBGPU_ADAPTER")
