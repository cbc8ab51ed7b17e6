"""Physical-device choice: discrete first, CPU devices only when asked, BITNET_VULKAN_DEVICE."""

from __future__ import annotations

import pytest

from bitnet_core.errors import ConfigError
from bitnet_vulkan.runtime.devices import DeviceInfo, choose


def dev(index: int, type_: str, compute: int | None = 0) -> DeviceInfo:
    return DeviceInfo(index, f"dev{index}", type_, (1, 3, 0), compute)


LAVAPIPE = dev(0, "cpu")
IGPU = dev(1, "integrated-gpu")
DGPU = dev(2, "discrete-gpu")


def test_discrete_first_regardless_of_order():
    assert choose([LAVAPIPE, IGPU, DGPU], explicit=False, env="") is DGPU
    assert choose([DGPU, IGPU], explicit=False, env="") is DGPU
    assert choose([LAVAPIPE, IGPU], explicit=False, env="") is IGPU


def test_cpu_device_only_when_explicit():
    with pytest.raises(LookupError, match="only a CPU Vulkan device"):
        choose([LAVAPIPE], explicit=False, env="")
    assert choose([LAVAPIPE], explicit=True, env="") is LAVAPIPE
    assert choose([LAVAPIPE, IGPU], explicit=True, env="") is IGPU  # asking does not prefer the CPU


def test_env_index_picks_any_device():
    assert choose([LAVAPIPE, DGPU], explicit=False, env="0") is LAVAPIPE
    with pytest.raises(LookupError, match="there are 2 Vulkan devices"):
        choose([LAVAPIPE, DGPU], explicit=False, env="5")
    with pytest.raises(ConfigError):
        choose([LAVAPIPE], explicit=False, env="gpu0")


def test_devices_without_compute_queue_are_skipped():
    no_compute = dev(3, "discrete-gpu", compute=None)
    assert choose([no_compute, IGPU], explicit=False, env="") is IGPU
    with pytest.raises(LookupError, match="no Vulkan device has a compute queue"):
        choose([no_compute], explicit=True, env="")
    with pytest.raises(LookupError, match="no compute queue"):
        choose([no_compute], explicit=True, env="3")
    with pytest.raises(LookupError, match="no Vulkan physical device"):
        choose([], explicit=True, env="")
