"""Physical devices: what each one offers, and which one the provider uses.

Choice: ``BITNET_VULKAN_DEVICE=<index>`` picks a device by its index in
``vkEnumeratePhysicalDevices`` order; otherwise discrete GPUs first, then
integrated, then virtual GPUs; CPU devices (Mesa's lavapipe, SwiftShader)
only when asked explicitly (``probe(explicit=True)``, i.e. ``--device vulkan``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from bitnet_core.errors import ConfigError
from bitnet_core.sdk.runtime import device_variable

from . import vkapi

# VkPhysicalDeviceType values
TYPE_NAMES = {0: "other", 1: "integrated-gpu", 2: "discrete-gpu", 3: "virtual-gpu", 4: "cpu"}
RANK = {"discrete-gpu": 0, "integrated-gpu": 1, "virtual-gpu": 2, "other": 3, "cpu": 4}
ENV_DEVICE = device_variable("vulkan")


@dataclass
class DeviceInfo:
    """One physical device as the provider sees it."""

    index: int
    name: str
    type: str
    api_version: tuple[int, int, int]
    compute_family: int | None
    int_dot: bool = False  # shaderIntegerDotProduct can be enabled
    int_dot_accelerated: bool = False  # the driver says packed 4x8 signed dot is fast
    unified_memory: bool = False  # device-local memory is host-visible (CPU / UMA)
    subgroup_size: int = 0
    subgroup_arithmetic: bool = False  # subgroupAdd & co. in compute shaders
    limits: dict[str, int] = field(default_factory=dict)
    #: nanoseconds a timestamp tick on the compute queue; 0.0 where it has no timestamps
    timestamp_period: float = 0.0
    handle: Any = field(default=None, repr=False)

    @property
    def is_cpu(self) -> bool:
        return self.type == "cpu"

    def describe(self) -> str:
        major, minor, patch = self.api_version
        return f"{self.name} ({self.type}, Vulkan {major}.{minor}.{patch})"

    def details(self) -> dict[str, Any]:
        """What a probe reports of this device."""
        return {
            "device_index": self.index,
            "device_type": self.type,
            "unified_memory": self.unified_memory,
        }


def choose(devices: list[DeviceInfo], explicit: bool, env: str | None = None) -> DeviceInfo:
    """The device to use, or ``LookupError`` with the reason none fits."""
    env = os.environ.get(ENV_DEVICE, "") if env is None else env
    if env.strip():
        try:
            index = int(env)
        except ValueError:
            raise ConfigError(f"{ENV_DEVICE}={env!r} is not a device index") from None
        match = [d for d in devices if d.index == index]
        if not match:
            raise LookupError(f"{ENV_DEVICE}={index}: there are {len(devices)} Vulkan devices")
        if match[0].compute_family is None:
            raise LookupError(f"{ENV_DEVICE}={index}: {match[0].describe()} has no compute queue")
        return match[0]
    usable = [d for d in devices if d.compute_family is not None]
    if not usable:
        if not devices:
            raise LookupError("no Vulkan physical device (is a driver / ICD installed?)")
        raise LookupError("no Vulkan device has a compute queue")
    ranked = sorted(usable, key=lambda d: (RANK.get(d.type, 3), d.index))
    best = ranked[0]
    if best.is_cpu and not explicit:
        raise LookupError(
            f"only a CPU Vulkan device ({best.describe()}); ask for it with --device vulkan "
            f"or {ENV_DEVICE}={best.index}"
        )
    return best


def _api(v: int) -> tuple[int, int, int]:
    return (v >> 22) & 0x7F, (v >> 12) & 0x3FF, v & 0xFFF


def query(instance: Any) -> list[DeviceInfo]:
    """Every physical device of ``instance`` with what the provider needs to know."""
    vk = vkapi.load()
    ffi, lib = vk.ffi, vk.lib
    out = []
    for index, pd in enumerate(vkapi.call("vkEnumeratePhysicalDevices", instance)):
        props = ffi.new("VkPhysicalDeviceProperties*")
        lib.vkGetPhysicalDeviceProperties(pd, props)
        p = props[0]
        name = ffi.string(p.deviceName).decode("utf-8", "replace")
        api = _api(p.apiVersion)
        families = vkapi.call("vkGetPhysicalDeviceQueueFamilyProperties", pd)
        compute = [i for i, f in enumerate(families) if f.queueFlags & vk.VK_QUEUE_COMPUTE_BIT]
        # a compute-only family first (async compute), else the first with compute
        dedicated = [i for i in compute if not families[i].queueFlags & vk.VK_QUEUE_GRAPHICS_BIT]
        family = (dedicated or compute or [None])[0]
        stamps = family is not None and families[family].timestampValidBits > 0
        mem = ffi.new("VkPhysicalDeviceMemoryProperties*")
        lib.vkGetPhysicalDeviceMemoryProperties(pd, mem)
        local = [
            mem[0].memoryTypes[i].propertyFlags
            for i in range(mem[0].memoryTypeCount)
            if mem[0].memoryTypes[i].propertyFlags & vk.VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT
        ]
        dtype = TYPE_NAMES.get(p.deviceType, "other")
        unified = dtype in ("cpu", "integrated-gpu") or (
            bool(local) and all(f & vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT for f in local)
        )
        int_dot, accelerated = _integer_dot(vk, pd, api)
        sg_size, sg_arith = _subgroups(vk, pd, api)
        lim = p.limits
        limits = {
            "max_storage_buffer_range": int(lim.maxStorageBufferRange),
            "max_push_constants_size": int(lim.maxPushConstantsSize),
            "max_workgroup_invocations": int(lim.maxComputeWorkGroupInvocations),
            "max_workgroup_count_x": int(lim.maxComputeWorkGroupCount[0]),
            "max_workgroup_count_y": int(lim.maxComputeWorkGroupCount[1]),
            "max_shared_memory": int(lim.maxComputeSharedMemorySize),
            "max_storage_buffers_per_stage": int(lim.maxPerStageDescriptorStorageBuffers),
            "min_storage_buffer_offset_alignment": int(lim.minStorageBufferOffsetAlignment),
        }
        out.append(
            DeviceInfo(
                index,
                name,
                dtype,
                api,
                family,
                int_dot,
                accelerated,
                unified,
                subgroup_size=sg_size,
                subgroup_arithmetic=sg_arith,
                limits=limits,
                timestamp_period=float(lim.timestampPeriod) if stamps else 0.0,
                handle=pd,
            )
        )
    return out


def _chained(vk: Any, pd: Any, kind: str, struct: str, stype: str) -> Any:
    """A ``VkPhysicalDevice<struct>*`` filled by ``vkGetPhysicalDevice<kind>2`` through the
    pNext chain of a ``VkPhysicalDevice<kind>2`` (``stype``: its ``VK_STRUCTURE_TYPE_`` tail)."""
    ffi = vk.ffi
    inner = ffi.new(
        f"VkPhysicalDevice{struct}*",
        {"sType": getattr(vk, f"VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_{stype}")},
    )
    outer_type = getattr(vk, f"VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_{kind.upper()}_2")
    outer = ffi.new(f"VkPhysicalDevice{kind}2*", {"sType": outer_type, "pNext": inner})
    getattr(vk.lib, f"vkGetPhysicalDevice{kind}2")(pd, outer)
    return inner  # the owning pointer (its fields read through it)


def _subgroups(vk: Any, pd: Any, api: tuple[int, int, int]) -> tuple[int, bool]:
    """(subgroup size, arithmetic subgroup operations available in compute shaders)."""
    if api < (1, 1, 0):
        return 0, False
    s = _chained(vk, pd, "Properties", "SubgroupProperties", "SUBGROUP_PROPERTIES")
    arith = bool(
        s.supportedStages & vk.VK_SHADER_STAGE_COMPUTE_BIT
        and s.supportedOperations & vk.VK_SUBGROUP_FEATURE_ARITHMETIC_BIT
        and s.supportedOperations & vk.VK_SUBGROUP_FEATURE_BASIC_BIT
    )
    return int(s.subgroupSize), arith


def _integer_dot(vk: Any, pd: Any, api: tuple[int, int, int]) -> tuple[bool, bool]:
    """(shaderIntegerDotProduct available, packed signed 4x8 dot accelerated)."""
    ffi = vk.ffi
    exts = {
        e.extensionName
        if isinstance(e.extensionName, str)
        else ffi.string(e.extensionName).decode()
        for e in vkapi.call("vkEnumerateDeviceExtensionProperties", pd, None)
    }
    if api < (1, 3, 0) and "VK_KHR_shader_integer_dot_product" not in exts:
        return False, False
    if api < (1, 1, 0):
        return False, False
    feat = _chained(
        vk, pd, "Features", "ShaderIntegerDotProductFeatures", "SHADER_INTEGER_DOT_PRODUCT_FEATURES"
    )
    prop = _chained(
        vk, pd, "Properties", "ShaderIntegerDotProductProperties",
        "SHADER_INTEGER_DOT_PRODUCT_PROPERTIES",
    )  # fmt: skip
    ok = bool(feat.shaderIntegerDotProduct)
    fast = bool(
        prop.integerDotProduct4x8BitPackedSignedAccelerated
        or prop.integerDotProduct4x8BitPackedMixedSignednessAccelerated
    )
    return ok, ok and fast
