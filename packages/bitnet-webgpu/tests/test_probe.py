"""Probe, adapter choice and limits of the webgpu provider."""

from __future__ import annotations

import numpy as np
import pytest

from bitnet_core.errors import ProviderError
from bitnet_core.hal import select
from bitnet_webgpu.provider import WebGPUProvider, pack_webgpu_ternary


def test_probe_never_raises_and_cpu_adapter_needs_explicit(provider):
    p = WebGPUProvider()
    auto, explicit = p.probe(), p.probe(explicit=True)
    assert explicit.available
    if explicit.details["cpu_adapter"]:
        assert not auto.available
        assert "CPU WebGPU adapter" in auto.reason


def test_bad_adapter_index_is_reason(monkeypatch):
    monkeypatch.setenv("BITNET_WEBGPU_ADAPTER", "99")
    avail = WebGPUProvider().probe(explicit=True)
    assert not avail.available
    assert "BITNET_WEBGPU_ADAPTER" in avail.reason


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
    word = int(pack_webgpu_ternary(codes)[0, 0])
    assert (word >> 28) & 3 == 2
    assert bin(word).count("1") == 16  # the other 15 codes are 1 (value 0)


def test_no_dot4_fallback_matches(monkeypatch):
    """The plain-integer matmul path (no dot4I8Packed) gives the same answer."""
    from bitnet_core.hal.weights import TernaryWeight
    from bitnet_core.providers.reference import ReferenceProvider

    monkeypatch.setenv("BITNET_WEBGPU_NO_DOT4", "1")
    p = WebGPUProvider()
    if not p.probe(explicit=True).available:
        pytest.skip("no WebGPU adapter")
    assert not p.dev.dot4
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 77)).astype(np.float32)
    w = TernaryWeight.from_codes(rng.integers(-1, 2, (9, 77)), 1.3)
    ref = ReferenceProvider()
    np.testing.assert_allclose(
        p.to_host(p.linear(p.to_device(x), p.load_ternary(w))),
        ref.linear(x, ref.load_ternary(w)),
        rtol=1e-5,
    )
