"""Recording work for the device: one command buffer per step, submitted when results are needed.

Ops do not submit: each one records its dispatch (or copy) into the open
command buffer, followed by a global compute/transfer memory barrier, so a
whole decode step (every layer) becomes one ``vkQueueSubmit`` that runs when
the host reads something back (``download``) or calls ``flush``. Descriptor
sets are cached per (layout, buffers), and buffers come from a pool of size
classes, so a steady decode loop re-records with no allocation.

Why reusing a pooled buffer inside one recording is safe: every command is
followed by a barrier that orders all earlier device work before all later
work. Host writes are not ordered by barriers, so a buffer the host writes
into must not be used by the open recording (``Buffer.last_epoch``).
"""

from __future__ import annotations

import contextlib
import struct
from typing import Any

import numpy as np

from bitnet_core.errors import ProviderError

from . import vkapi
from .context import Buffer, VulkanContext
from .pipelines import Pipeline

DESCRIPTOR_SETS = 4096
MAX_BINDINGS = 8
STAGING_FLUSH_BYTES = 256 << 20
WHOLE_SIZE = 0xFFFFFFFFFFFFFFFF


def size_class(n: int) -> int:
    """Round up to at most 1/8 above ``n`` (bounded waste, few distinct sizes)."""
    n = max(int(n), 256)
    step = 1 << max(n.bit_length() - 4, 0)
    return (n + step - 1) // step * step


class CommandStream:
    """The open command buffer of one context, its descriptor sets and buffer pools."""

    def __init__(self, ctx: VulkanContext) -> None:
        self.ctx = ctx
        vk, ffi, lib = ctx.vk, ctx.vk.ffi, ctx.vk.lib
        self.vk, self.ffi, self.lib = vk, ffi, lib
        dev = ctx.device
        pool_info = ffi.new(
            "VkCommandPoolCreateInfo*",
            {
                "sType": vk.VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                "flags": vk.VK_COMMAND_POOL_CREATE_TRANSIENT_BIT,
                "queueFamilyIndex": ctx.info.compute_family,
            },
        )
        out = ffi.new("VkCommandPool*")
        vkapi.check("vkCreateCommandPool", lib.vkCreateCommandPool(dev, pool_info, ffi.NULL, out))
        self.command_pool = out[0]
        alloc = ffi.new(
            "VkCommandBufferAllocateInfo*",
            {
                "sType": vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                "commandPool": self.command_pool,
                "level": vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                "commandBufferCount": 1,
            },
        )
        self.cmd_ptr = ffi.new("VkCommandBuffer*")
        vkapi.check(
            "vkAllocateCommandBuffers", lib.vkAllocateCommandBuffers(dev, alloc, self.cmd_ptr)
        )
        self.cmd = self.cmd_ptr[0]
        fence_info = ffi.new(
            "VkFenceCreateInfo*", {"sType": vk.VK_STRUCTURE_TYPE_FENCE_CREATE_INFO}
        )
        self.fence_ptr = ffi.new("VkFence*")
        vkapi.check("vkCreateFence", lib.vkCreateFence(dev, fence_info, ffi.NULL, self.fence_ptr))
        sizes = ffi.new(
            "VkDescriptorPoolSize*",
            {
                "type": vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                "descriptorCount": DESCRIPTOR_SETS * MAX_BINDINGS,
            },
        )
        dp_info = ffi.new(
            "VkDescriptorPoolCreateInfo*",
            {
                "sType": vk.VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                "maxSets": DESCRIPTOR_SETS,
                "poolSizeCount": 1,
                "pPoolSizes": sizes,
            },
        )
        dp = ffi.new("VkDescriptorPool*")
        vkapi.check(
            "vkCreateDescriptorPool", lib.vkCreateDescriptorPool(dev, dp_info, ffi.NULL, dp)
        )
        self.descriptor_pool = dp[0]
        self._sets: dict[tuple, Any] = {}
        self._barrier = ffi.new(
            "VkMemoryBarrier*",
            {
                "sType": vk.VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                "srcAccessMask": vk.VK_ACCESS_SHADER_WRITE_BIT | vk.VK_ACCESS_TRANSFER_WRITE_BIT,
                "dstAccessMask": vk.VK_ACCESS_SHADER_READ_BIT
                | vk.VK_ACCESS_SHADER_WRITE_BIT
                | vk.VK_ACCESS_TRANSFER_READ_BIT
                | vk.VK_ACCESS_TRANSFER_WRITE_BIT,
            },
        )
        self._host_barrier = ffi.new(
            "VkMemoryBarrier*",
            {
                "sType": vk.VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                "srcAccessMask": vk.VK_ACCESS_SHADER_WRITE_BIT | vk.VK_ACCESS_TRANSFER_WRITE_BIT,
                "dstAccessMask": vk.VK_ACCESS_HOST_READ_BIT,
            },
        )
        self._stages = vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | vk.VK_PIPELINE_STAGE_TRANSFER_BIT
        self._submit = ffi.new(
            "VkSubmitInfo*",
            {
                "sType": vk.VK_STRUCTURE_TYPE_SUBMIT_INFO,
                "commandBufferCount": 1,
                "pCommandBuffers": self.cmd_ptr,
            },
        )
        self._begin = ffi.new(
            "VkCommandBufferBeginInfo*",
            {
                "sType": vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                "flags": vk.VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT,
            },
        )
        self._push = ffi.new("char[]", 128)
        self.recording = False
        self.epoch = 0
        self._free: dict[tuple[bool, int], list[Buffer]] = {}
        self._staging_in_use: list[Buffer] = []
        self._staging_bytes = 0
        self._doomed: list[Buffer] = []
        self.stats = {"submits": 0, "dispatches": 0, "copies": 0, "descriptor_sets": 0}

    # --- buffers ----------------------------------------------------------------
    def acquire(self, nbytes: int, host_write: bool = False) -> Buffer:
        """A device buffer of at least ``nbytes`` from the pool (``host_write``: not in use)."""
        size = size_class(nbytes)
        limit = self.ctx.info.limits["max_storage_buffer_range"]
        if size > limit >= nbytes:
            size = max(int(nbytes), 16)
        free = self._free.get((False, size))
        if free:
            if not host_write:
                return free.pop()
            for i in range(len(free) - 1, -1, -1):
                if free[i].last_epoch < self.epoch:
                    return free.pop(i)
        return self.ctx.allocate(size, host=False, pooled=True)

    def allocate_exact(self, nbytes: int) -> Buffer:
        """A buffer of its own (weights, tables): destroyed, not pooled, when released."""
        return self.ctx.allocate(nbytes, host=False, pooled=False)

    def release(self, buf: Buffer) -> None:
        """Give a buffer back: pooled ones to their free list, others destroyed once idle."""
        if not buf.alive:
            return
        if buf.pooled:
            self._free.setdefault((False, buf.size), []).append(buf)
        elif self.recording and buf.last_epoch == self.epoch:
            self._doomed.append(buf)
        else:
            self._destroy([buf])

    def _destroy(self, bufs: list[Buffer]) -> None:
        for b in bufs:
            self.ctx.destroy(b)
        # cached descriptor sets may name the destroyed buffers: start the cache afresh
        self._reset_descriptors()

    def _reset_descriptors(self) -> None:
        if self._sets:
            self._sets.clear()
            vkapi.check(
                "vkResetDescriptorPool",
                self.lib.vkResetDescriptorPool(self.ctx.device, self.descriptor_pool, 0),
            )

    def _staging(self, nbytes: int) -> Buffer:
        size = size_class(nbytes)
        free = self._free.get((True, size))
        buf = free.pop() if free else self.ctx.allocate(size, host=True, pooled=True)
        self._staging_in_use.append(buf)
        self._staging_bytes += size
        return buf

    # --- recording ----------------------------------------------------------------
    def _open(self) -> None:
        if not self.recording:
            vkapi.check(
                "vkBeginCommandBuffer", self.lib.vkBeginCommandBuffer(self.cmd, self._begin)
            )
            self.recording = True

    def _descriptor_set(self, pipeline: Pipeline, buffers: list[Buffer]) -> Any:
        key = (pipeline.bindings, pipeline.set_layout, *(b.handle for b in buffers))
        found = self._sets.get(key)
        if found is not None:
            return found
        if len(self._sets) >= DESCRIPTOR_SETS:
            if self.recording:
                self.flush()
            self._reset_descriptors()
        vk, ffi, lib = self.vk, self.ffi, self.lib
        layouts = ffi.new("VkDescriptorSetLayout*", pipeline.set_layout)
        info = ffi.new(
            "VkDescriptorSetAllocateInfo*",
            {
                "sType": vk.VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                "descriptorPool": self.descriptor_pool,
                "descriptorSetCount": 1,
                "pSetLayouts": layouts,
            },
        )
        out = ffi.new("VkDescriptorSet*")
        vkapi.check(
            "vkAllocateDescriptorSets", lib.vkAllocateDescriptorSets(self.ctx.device, info, out)
        )
        n = len(buffers)
        infos = ffi.new("VkDescriptorBufferInfo[]", n)
        writes = ffi.new("VkWriteDescriptorSet[]", n)
        for i, b in enumerate(buffers):
            infos[i].buffer = b.handle
            infos[i].offset = 0
            infos[i].range = WHOLE_SIZE
            w = writes[i]
            w.sType = vk.VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET
            w.dstSet = out[0]
            w.dstBinding = i
            w.descriptorCount = 1
            w.descriptorType = vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER
            w.pBufferInfo = infos + i
        lib.vkUpdateDescriptorSets(self.ctx.device, n, writes, 0, ffi.NULL)
        self._sets[key] = out
        self.stats["descriptor_sets"] += 1
        return out

    def dispatch(
        self,
        pipeline: Pipeline,
        buffers: list[Buffer],
        push: bytes,
        groups: tuple[int, int, int],
    ) -> None:
        """Record one dispatch of ``pipeline`` over ``buffers`` (bindings 0..n-1) and a barrier."""
        if len(buffers) != pipeline.bindings:
            raise ProviderError(f"pipeline takes {pipeline.bindings} buffers, got {len(buffers)}")
        limits = self.ctx.info.limits
        x, y, z = groups
        if (
            x < 1
            or y < 1
            or x > limits["max_workgroup_count_x"]
            or y > limits["max_workgroup_count_y"]
        ):
            raise ProviderError(f"workgroup count {groups} outside the device's limits")
        dset = self._descriptor_set(pipeline, buffers)
        self._open()
        vk, ffi, lib, cmd = self.vk, self.ffi, self.lib, self.cmd
        lib.vkCmdBindPipeline(cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, pipeline.handle)
        lib.vkCmdBindDescriptorSets(
            cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, pipeline.layout, 0, 1, dset, 0, ffi.NULL
        )
        if push:
            ffi.memmove(self._push, push, len(push))
            lib.vkCmdPushConstants(
                cmd, pipeline.layout, vk.VK_SHADER_STAGE_COMPUTE_BIT, 0, len(push), self._push
            )
        lib.vkCmdDispatch(cmd, x, y, z)
        self._record_barrier()
        for b in buffers:
            b.last_epoch = self.epoch
        self.stats["dispatches"] += 1

    def _record_barrier(self) -> None:
        self.lib.vkCmdPipelineBarrier(
            self.cmd,
            self._stages,
            self._stages,
            0,
            1,
            self._barrier,
            0,
            self.ffi.NULL,
            0,
            self.ffi.NULL,
        )

    def copy(
        self, src: Buffer, dst: Buffer, nbytes: int, src_offset: int = 0, dst_offset: int = 0
    ) -> None:
        """Record a buffer-to-buffer copy and a barrier."""
        if nbytes <= 0:
            return
        self._open()
        region = self.ffi.new(
            "VkBufferCopy*", {"srcOffset": src_offset, "dstOffset": dst_offset, "size": nbytes}
        )
        self.lib.vkCmdCopyBuffer(self.cmd, src.handle, dst.handle, 1, region)
        self._record_barrier()
        src.last_epoch = dst.last_epoch = self.epoch
        self.stats["copies"] += 1

    def upload(self, buf: Buffer, data: np.ndarray, offset: int = 0) -> None:
        """Write host bytes into ``buf`` (directly where mapped, else through staging)."""
        raw = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        if raw.size == 0:
            return
        if buf.mapped is not None:
            if self.recording and buf.last_epoch == self.epoch:
                self.flush()  # the open recording still uses it
            buf.mapped[offset : offset + raw.size] = raw
            return
        staging = self._staging(raw.size)
        staging.mapped[: raw.size] = raw
        self.copy(staging, buf, raw.size, 0, offset)
        if self._staging_bytes > STAGING_FLUSH_BYTES:
            self.flush()

    def download(self, buf: Buffer, nbytes: int) -> np.ndarray:
        """The first ``nbytes`` of ``buf`` as a new uint8 array (runs the open recording)."""
        if buf.mapped is not None:
            if self.recording:
                self.flush()
            return buf.mapped[:nbytes].copy()
        staging = self._staging(nbytes)
        self.copy(buf, staging, nbytes)
        self.flush()
        return staging.mapped[:nbytes].copy()

    def flush(self) -> None:
        """Submit the open recording, wait for it, and recycle what it held."""
        if not self.recording:
            return
        ffi, lib, dev = self.ffi, self.lib, self.ctx.device
        vk = self.vk
        lib.vkCmdPipelineBarrier(
            self.cmd,
            self._stages,
            vk.VK_PIPELINE_STAGE_HOST_BIT,
            0,
            1,
            self._host_barrier,
            0,
            ffi.NULL,
            0,
            ffi.NULL,
        )
        self.recording = False
        vkapi.check("vkEndCommandBuffer", lib.vkEndCommandBuffer(self.cmd))
        vkapi.check(
            "vkQueueSubmit", lib.vkQueueSubmit(self.ctx.queue, 1, self._submit, self.fence_ptr[0])
        )
        vkapi.check(
            "vkWaitForFences",
            lib.vkWaitForFences(dev, 1, self.fence_ptr, 1, 0xFFFFFFFFFFFFFFFF),
        )
        vkapi.check("vkResetFences", lib.vkResetFences(dev, 1, self.fence_ptr))
        vkapi.check("vkResetCommandPool", lib.vkResetCommandPool(dev, self.command_pool, 0))
        self.epoch += 1
        self.stats["submits"] += 1
        for s in self._staging_in_use:
            self._free.setdefault((True, s.size), []).append(s)
        self._staging_in_use.clear()
        self._staging_bytes = 0
        if self._doomed:
            doomed, self._doomed = self._doomed, []
            self._destroy(doomed)

    def close(self) -> None:
        ffi, lib, dev = self.ffi, self.lib, self.ctx.device
        if dev is None:
            return
        if self.recording:
            with contextlib.suppress(ProviderError):
                self.flush()
        for bufs in self._free.values():
            for b in bufs:
                self.ctx.destroy(b)
        self._free.clear()
        for b in self._doomed:
            self.ctx.destroy(b)
        self._doomed.clear()
        lib.vkDestroyDescriptorPool(dev, self.descriptor_pool, ffi.NULL)
        lib.vkDestroyFence(dev, self.fence_ptr[0], ffi.NULL)
        lib.vkDestroyCommandPool(dev, self.command_pool, ffi.NULL)


def pack_push(fmt: str, *values: Any) -> bytes:
    """Push-constant bytes (little endian, 4-byte fields)."""
    return struct.pack("<" + fmt, *values)
