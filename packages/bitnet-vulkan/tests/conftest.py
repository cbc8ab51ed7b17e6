"""Fixtures: a Vulkan provider on whatever device is here (lavapipe in CI), both matmul paths."""

from __future__ import annotations

import os

import pytest

from bitnet_core.providers.reference import ReferenceProvider
from bitnet_vulkan.context import ENV_INT_DOT
from bitnet_vulkan.provider import VulkanProvider

# lavapipe's WSI code complains on stderr without it; harmless, but noisy
os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")


def _make(int_dot: str | None) -> VulkanProvider:
    old = os.environ.get(ENV_INT_DOT)
    if int_dot is None:
        os.environ.pop(ENV_INT_DOT, None)
    else:
        os.environ[ENV_INT_DOT] = int_dot
    try:
        p = VulkanProvider()
        avail = p.probe(explicit=True)
        if not avail.available:
            pytest.skip(f"no Vulkan device: {avail.reason}")
        return p
    finally:
        if old is None:
            os.environ.pop(ENV_INT_DOT, None)
        else:
            os.environ[ENV_INT_DOT] = old


@pytest.fixture(scope="session")
def vk() -> VulkanProvider:
    """The provider as configured by default (integer dot products where accelerated)."""
    p = _make(None)
    yield p
    p.close()


@pytest.fixture(scope="session", params=["plain", "int-dot"])
def vk_matmul(request) -> VulkanProvider:
    """Providers forced onto each matmul_i2s path (the device must support integer dot)."""
    if request.param == "plain":
        p = _make("0")
    else:
        probe = _make(None)
        info = probe.device_info
        probe.close()
        if not info.int_dot:
            pytest.skip(f"{info.name} has no shaderIntegerDotProduct")
        p = _make("1")
    yield p
    p.close()


@pytest.fixture(scope="session")
def ref() -> ReferenceProvider:
    return ReferenceProvider()
