"""Fixtures: a Vulkan provider on whatever device is here (lavapipe in CI), both matmul paths."""

from __future__ import annotations

import os

import pytest

from bitnet_core.providers.reference import ReferenceProvider
from bitnet_vulkan.provider import VulkanProvider
from bitnet_vulkan.runtime.context import ENV_INT_DOT, ENV_SUBGROUP

# lavapipe's WSI code complains on stderr without it; harmless, but noisy
os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")


def _make(env: dict[str, str]) -> VulkanProvider:
    """A provider created with ``env`` set (the switches are read when the device is created)."""
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        p = VulkanProvider()
        avail = p.probe(explicit=True)
        if not avail.available:
            pytest.skip(f"no Vulkan device: {avail.reason}")
        return p
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="session")
def vk() -> VulkanProvider:
    """The provider as configured by default (integer dot products where accelerated)."""
    p = _make({})
    yield p
    p.close()


MATMUL_PATHS = {
    "plain": {ENV_INT_DOT: "0", ENV_SUBGROUP: "0"},
    "int-dot": {ENV_INT_DOT: "1", ENV_SUBGROUP: "0"},
    "plain-subgroup": {ENV_INT_DOT: "0", ENV_SUBGROUP: "1"},
    "int-dot-subgroup": {ENV_INT_DOT: "1", ENV_SUBGROUP: "1"},
}


@pytest.fixture(scope="session", params=sorted(MATMUL_PATHS))
def vk_matmul(request) -> VulkanProvider:
    """Providers forced onto each matmul path (skipped where the device lacks the feature)."""
    probe = _make({})
    info = probe.device_info
    probe.close()
    env = MATMUL_PATHS[request.param]
    if env[ENV_INT_DOT] == "1" and not info.int_dot:
        pytest.skip(f"{info.name} has no shaderIntegerDotProduct")
    if env[ENV_SUBGROUP] == "1" and not info.subgroup_arithmetic:
        pytest.skip(f"{info.name} has no subgroup arithmetic")
    p = _make(env)
    forced = env[ENV_INT_DOT] == "1"
    # the path asked for is the path taken: the context, and the probe that says so
    assert p.context.use_int_dot == forced, f"{ENV_INT_DOT}={env[ENV_INT_DOT]} not honoured"
    assert p.probe(explicit=True).details["integer_dot_product"] == forced
    yield p
    p.close()


@pytest.fixture(scope="session")
def ref() -> ReferenceProvider:
    return ReferenceProvider()
