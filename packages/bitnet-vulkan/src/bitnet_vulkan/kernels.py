"""The kernels of the ``vulkan`` backend: the SPIR-V the build compiled from ``shaders/``,
and its compute pipelines, built once per (shader, specialization constants) and cached.

Every shader takes its arrays as storage buffers at bindings 0..n-1 of set 0
and its sizes as push constants (at most 128 bytes, the guaranteed minimum).
Specialization constants are 32-bit values with ids 0, 1, ... in order
(workgroup sizes first, then per-shader switches).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from bitnet_core.errors import ProviderError

from .runtime import vkapi

PUSH_CONSTANT_BYTES = 128


def spirv_modules() -> dict[str, bytes]:
    """The SPIR-V compiled into this wheel; ``ProviderError`` saying why when there is none."""
    try:
        from . import _spirv
    except ImportError:
        raise ProviderError(
            "bitnet_vulkan._spirv is missing: the package was not built by its CMake build "
            "(install it with pip/uv so the shaders get compiled)"
        ) from None
    if _spirv.SKIPPED or not _spirv.MODULES:
        raise ProviderError(
            "this bitnet-vulkan was built without SPIR-V shaders (BITNET_VULKAN_SKIP_SHADERS); "
            "reinstall it where glslangValidator and spirv-val are on PATH"
        )
    return _spirv.MODULES


@dataclass(eq=False)
class Pipeline:
    handle: Any
    layout: Any
    set_layout: Any
    bindings: int
    key: int = 0  # identifies it in recorded steps
    name: str = ""  # the shader variant (per-dispatch timestamps are reported by it)


class PipelineCache:
    """Shader modules, descriptor-set layouts, pipeline layouts and pipelines of one device."""

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        self.vk = ctx.vk
        self.spirv = spirv_modules()
        self._modules: dict[str, Any] = {}
        self._layouts: dict[int, tuple[Any, Any]] = {}
        self._pipelines: dict[tuple, Pipeline] = {}

    def get(self, shader: str, bindings: int, spec: tuple[int, ...] = ()) -> Pipeline:
        key = (shader, bindings, spec)
        found = self._pipelines.get(key)
        if found is None:
            found = self._pipelines[key] = self._build(shader, bindings, spec)
        return found

    def _module(self, shader: str) -> Any:
        if shader not in self._modules:
            vk, ffi = self.vk, self.vk.ffi
            code = self.spirv.get(shader)
            if code is None:
                raise ProviderError(f"no SPIR-V module {shader!r} in this build")
            buf = ffi.new("char[]", code)
            info = ffi.new(
                "VkShaderModuleCreateInfo*",
                {
                    "sType": vk.VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                    "codeSize": len(code),
                    "pCode": ffi.cast("uint32_t*", buf),
                },
            )
            out = ffi.new("VkShaderModule*")
            vkapi.check(
                f"vkCreateShaderModule({shader})",
                vk.lib.vkCreateShaderModule(self.ctx.device, info, ffi.NULL, out),
            )
            self._modules[shader] = out[0]
        return self._modules[shader]

    def _layout(self, bindings: int) -> tuple[Any, Any]:
        if bindings not in self._layouts:
            vk, ffi, lib = self.vk, self.vk.ffi, self.vk.lib
            entries = ffi.new("VkDescriptorSetLayoutBinding[]", bindings)
            for i in range(bindings):
                entries[i].binding = i
                entries[i].descriptorType = vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER
                entries[i].descriptorCount = 1
                entries[i].stageFlags = vk.VK_SHADER_STAGE_COMPUTE_BIT
            set_info = ffi.new(
                "VkDescriptorSetLayoutCreateInfo*",
                {
                    "sType": vk.VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
                    "bindingCount": bindings,
                    "pBindings": entries,
                },
            )
            set_layout = ffi.new("VkDescriptorSetLayout*")
            vkapi.check(
                "vkCreateDescriptorSetLayout",
                lib.vkCreateDescriptorSetLayout(self.ctx.device, set_info, ffi.NULL, set_layout),
            )
            push = ffi.new(
                "VkPushConstantRange*",
                {
                    "stageFlags": vk.VK_SHADER_STAGE_COMPUTE_BIT,
                    "offset": 0,
                    "size": PUSH_CONSTANT_BYTES,
                },
            )
            layout_info = ffi.new(
                "VkPipelineLayoutCreateInfo*",
                {
                    "sType": vk.VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                    "setLayoutCount": 1,
                    "pSetLayouts": set_layout,
                    "pushConstantRangeCount": 1,
                    "pPushConstantRanges": push,
                },
            )
            layout = ffi.new("VkPipelineLayout*")
            vkapi.check(
                "vkCreatePipelineLayout",
                lib.vkCreatePipelineLayout(self.ctx.device, layout_info, ffi.NULL, layout),
            )
            self._layouts[bindings] = (set_layout[0], layout[0])
        return self._layouts[bindings]

    def _build(self, shader: str, bindings: int, spec: tuple[int, ...]) -> Pipeline:
        vk, ffi, lib = self.vk, self.vk.ffi, self.vk.lib
        set_layout, layout = self._layout(bindings)
        spec_info = ffi.NULL
        keep = []
        if spec:
            entries = ffi.new("VkSpecializationMapEntry[]", len(spec))
            for i in range(len(spec)):
                entries[i].constantID = i
                entries[i].offset = 4 * i
                entries[i].size = 4
            data = ffi.new("char[]", struct.pack(f"<{len(spec)}I", *spec))
            spec_info = ffi.new(
                "VkSpecializationInfo*",
                {
                    "mapEntryCount": len(spec),
                    "pMapEntries": entries,
                    "dataSize": 4 * len(spec),
                    "pData": data,
                },
            )
            keep += [entries, data]
        entry = ffi.new("char[]", b"main")
        info = ffi.new(
            "VkComputePipelineCreateInfo*",
            {
                "sType": vk.VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
                "stage": {
                    "sType": vk.VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                    "stage": vk.VK_SHADER_STAGE_COMPUTE_BIT,
                    "module": self._module(shader),
                    "pName": entry,
                    "pSpecializationInfo": spec_info,
                },
                "layout": layout,
            },
        )
        out = ffi.new("VkPipeline*")
        vkapi.check(
            f"vkCreateComputePipelines({shader}, spec={spec})",
            lib.vkCreateComputePipelines(self.ctx.device, ffi.NULL, 1, info, ffi.NULL, out),
        )
        return Pipeline(out[0], layout, set_layout, bindings, len(self._pipelines) + 1, shader)

    def close(self) -> None:
        ffi, lib, dev = self.vk.ffi, self.vk.lib, self.ctx.device
        if dev is None:
            return
        for p in self._pipelines.values():
            lib.vkDestroyPipeline(dev, p.handle, ffi.NULL)
        for set_layout, layout in self._layouts.values():
            lib.vkDestroyPipelineLayout(dev, layout, ffi.NULL)
            lib.vkDestroyDescriptorSetLayout(dev, set_layout, ffi.NULL)
        for m in self._modules.values():
            lib.vkDestroyShaderModule(dev, m, ffi.NULL)
        self._pipelines.clear()
        self._layouts.clear()
        self._modules.clear()
