"""The webgpu provider under test, on whatever adapter this machine has (lavapipe in CI)."""

from __future__ import annotations

import pytest

from bitnet_core.hal import REGISTRY


@pytest.fixture(scope="session")
def provider():
    rec = REGISTRY.get("webgpu")
    if rec is None:
        pytest.skip("bitnet-webgpu is not registered (not installed?)")
    avail = rec.probe(explicit=True)
    if not avail.available:
        pytest.skip(f"no WebGPU adapter: {avail.reason}")
    return rec.provider
