"""The Vulkan objects one provider owns: instance, device, compute queue, memory types, buffers.

``VulkanContext.create(explicit)`` goes through the probe's steps (instance,
physical device, logical device with one compute queue) and raises
``ProviderError`` naming the failing call. Buffers are allocated here:
device-local memory, mapped for the host where the device's local memory is
host-visible (CPU and UMA devices); otherwise host transfers go through a
staging buffer (``stream.CommandStream``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from bitnet_core.errors import ProviderError

from . import devices, vkapi

ENV_INT_DOT = "BITNET_VULKAN_INT_DOT"
ENV_SUBGROUP = "BITNET_VULKAN_SUBGROUP"
#: Testing knob: treat the device as discrete (device-only buffers, staging copies) even where
#: its memory is host-visible, so the discrete-GPU transfer path runs on lavapipe too.
ENV_FORCE_STAGING = "BITNET_VULKAN_FORCE_STAGING"


@dataclass(eq=False)
class Buffer:
    """One ``VkBuffer`` with its own memory; ``mapped`` is a uint8 view where host-visible."""

    handle: Any
    memory: Any
    size: int
    mapped: np.ndarray | None
    pooled: bool
    last_epoch: int = -1  # the stream epoch that last recorded a use of it
    alive: bool = True
    key: int = 0  # the handle as an integer (identifies it in recorded steps)
    free: bool = False  # pooled and given back


class VulkanContext:
    """Instance, chosen device, one compute queue, and buffer allocation."""

    def __init__(self) -> None:
        self.vk = vkapi.load()
        self.instance: Any = None
        self.device: Any = None
        self.info: devices.DeviceInfo | None = None
        self.queue: Any = None
        self.use_int_dot = False
        self.use_subgroup = False
        self.force_staging = os.environ.get(ENV_FORCE_STAGING, "").strip() in ("1", "true", "on")

    @classmethod
    def create(cls, explicit: bool = False) -> VulkanContext:
        ctx = cls()
        try:
            ctx._create_instance()
            ctx.info = devices.choose(devices.query(ctx.instance), explicit)
            ctx._create_device()
        except LookupError as exc:
            ctx.close()
            raise ProviderError(str(exc)) from None
        except BaseException:
            ctx.close()
            raise
        return ctx

    # --- creation -----------------------------------------------------------------
    def _create_instance(self) -> None:
        vk = self.vk
        app = vk.VkApplicationInfo(
            pApplicationName="bitnet",
            applicationVersion=1,
            pEngineName="bitnet-vulkan",
            engineVersion=1,
            apiVersion=vk.VK_MAKE_VERSION(1, 1, 0),
        )
        self.instance = vkapi.call(
            "vkCreateInstance", vk.VkInstanceCreateInfo(pApplicationInfo=app), None
        )

    def _create_device(self) -> None:
        vk, ffi = self.vk, self.vk.ffi
        info = self.info
        assert info is not None
        self.use_int_dot = _want_int_dot(info)
        self.use_subgroup = _want_subgroup(info)
        priorities = ffi.new("float[1]", [1.0])
        queue_info = ffi.new(
            "VkDeviceQueueCreateInfo*",
            {
                "sType": vk.VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                "queueFamilyIndex": info.compute_family,
                "queueCount": 1,
                "pQueuePriorities": priorities,
            },
        )
        keep: list[Any] = []
        next_ptr = ffi.NULL
        ext_names: list[Any] = []
        if self.use_int_dot:
            feat = ffi.new(
                "VkPhysicalDeviceShaderIntegerDotProductFeatures*",
                {
                    "sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES,
                    "shaderIntegerDotProduct": 1,
                },
            )
            keep.append(feat)
            next_ptr = feat
            if info.api_version < (1, 3, 0):
                ext_names.append(ffi.new("char[]", b"VK_KHR_shader_integer_dot_product"))
        ext_array = ffi.new("char*[]", ext_names) if ext_names else ffi.NULL
        create = ffi.new(
            "VkDeviceCreateInfo*",
            {
                "sType": vk.VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                "pNext": next_ptr,
                "queueCreateInfoCount": 1,
                "pQueueCreateInfos": queue_info,
                "enabledExtensionCount": len(ext_names),
                "ppEnabledExtensionNames": ext_array,
            },
        )
        out = ffi.new("VkDevice*")
        vkapi.check("vkCreateDevice", vk.lib.vkCreateDevice(info.handle, create, ffi.NULL, out))
        self.device = out[0]
        q = ffi.new("VkQueue*")
        vk.lib.vkGetDeviceQueue(self.device, info.compute_family, 0, q)
        self.queue = q[0]
        mem = ffi.new("VkPhysicalDeviceMemoryProperties*")
        vk.lib.vkGetPhysicalDeviceMemoryProperties(info.handle, mem)
        self._memory_types = [
            int(mem[0].memoryTypes[i].propertyFlags) for i in range(mem[0].memoryTypeCount)
        ]

    # --- memory -------------------------------------------------------------------
    def _memory_type(self, bits: int, host: bool) -> int:
        vk = self.vk
        local = vk.VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT
        visible = vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT
        cached = vk.VK_MEMORY_PROPERTY_HOST_CACHED_BIT
        if host:
            wishes = [visible | cached, visible]
        else:
            wishes = [local | visible | cached, local | visible, local] if self.unified else [local]
        for want in wishes:
            for i, flags in enumerate(self._memory_types):
                if bits & (1 << i) and flags & want == want:
                    return i
        raise ProviderError(f"no Vulkan memory type fits (host={host}, type bits {bits:#x})")

    @property
    def unified(self) -> bool:
        return bool(self.info and self.info.unified_memory) and not self.force_staging

    def allocate(self, size: int, host: bool = False, pooled: bool = True) -> Buffer:
        """A storage buffer of ``size`` bytes (``host``: host-visible staging memory)."""
        vk, ffi, lib = self.vk, self.vk.ffi, self.vk.lib
        size = max(-(-int(size) // 16) * 16, 16)  # whole uint words for the shaders
        limit = self.info.limits["max_storage_buffer_range"] if self.info else 0
        if not host and limit and size > limit:
            raise ProviderError(
                f"a {size}-byte array exceeds this device's maxStorageBufferRange ({limit} bytes)"
            )
        usage = (
            vk.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT
            | vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT
            | vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT
        )
        info = ffi.new(
            "VkBufferCreateInfo*",
            {
                "sType": vk.VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                "size": size,
                "usage": usage,
                "sharingMode": vk.VK_SHARING_MODE_EXCLUSIVE,
            },
        )
        out = ffi.new("VkBuffer*")
        vkapi.check("vkCreateBuffer", lib.vkCreateBuffer(self.device, info, ffi.NULL, out))
        handle = out[0]
        req = ffi.new("VkMemoryRequirements*")
        lib.vkGetBufferMemoryRequirements(self.device, handle, req)
        type_index = self._memory_type(int(req[0].memoryTypeBits), host)
        alloc = ffi.new(
            "VkMemoryAllocateInfo*",
            {
                "sType": vk.VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                "allocationSize": req[0].size,
                "memoryTypeIndex": type_index,
            },
        )
        mem = ffi.new("VkDeviceMemory*")
        result = lib.vkAllocateMemory(self.device, alloc, ffi.NULL, mem)
        if result != 0:
            lib.vkDestroyBuffer(self.device, handle, ffi.NULL)
            vkapi.check(f"vkAllocateMemory({size} bytes)", result)
        vkapi.check("vkBindBufferMemory", lib.vkBindBufferMemory(self.device, handle, mem[0], 0))
        mapped = None
        if host or self.unified:
            ptr = ffi.new("void**")
            vkapi.check("vkMapMemory", lib.vkMapMemory(self.device, mem[0], 0, size, 0, ptr))
            mapped = np.frombuffer(ffi.buffer(ptr[0], size), dtype=np.uint8)
        return Buffer(handle, mem[0], size, mapped, pooled, key=int(ffi.cast("uintptr_t", handle)))

    def destroy(self, buf: Buffer) -> None:
        if not buf.alive or self.device is None:
            return
        ffi, lib = self.vk.ffi, self.vk.lib
        buf.alive = False
        buf.mapped = None
        lib.vkDestroyBuffer(self.device, buf.handle, ffi.NULL)
        lib.vkFreeMemory(self.device, buf.memory, ffi.NULL)

    def close(self) -> None:
        ffi, lib = self.vk.ffi, self.vk.lib
        if self.device is not None:
            lib.vkDeviceWaitIdle(self.device)
            lib.vkDestroyDevice(self.device, ffi.NULL)
            self.device = None
        if self.instance is not None:
            lib.vkDestroyInstance(self.instance, ffi.NULL)
            self.instance = None


def _switch(name: str, supported: bool, missing: str, default: bool) -> bool:
    """``name`` = 1/0 forces a feature on (``ProviderError``: ``missing``, where the
    device lacks it) or off; unset, ``default``."""
    env = os.environ.get(name, "").strip().lower()
    if env in ("1", "true", "yes", "on"):
        if not supported:
            raise ProviderError(f"{name}=1 but {missing}")
        return True
    if env in ("0", "false", "no", "off"):
        return False
    return default


def _want_int_dot(info: devices.DeviceInfo) -> bool:
    """Integer dot products: ``BITNET_VULKAN_INT_DOT`` = 1/0 forces, else where accelerated."""
    missing = f"{info.name} does not support shaderIntegerDotProduct"
    return _switch(ENV_INT_DOT, info.int_dot, missing, info.int_dot_accelerated)


def _want_subgroup(info: devices.DeviceInfo) -> bool:
    """Subgroup-reduced matmuls: ``BITNET_VULKAN_SUBGROUP`` = 1/0 forces, else where supported."""
    missing = f"{info.name} has no subgroup arithmetic in compute shaders"
    default = info.subgroup_arithmetic and info.subgroup_size >= 4
    return _switch(ENV_SUBGROUP, info.subgroup_arithmetic, missing, default)
