"""Recording work for the device: one submission a step, replayed when the step repeats.

Ops do not submit: each appends its dispatch (or copy, or fill) to the list
of the open step, and the list runs as one ``vkQueueSubmit`` when the host
reads something back (``download``) or calls ``flush``. At that point the
list is compared with the steps recorded before (up to ``RECORDED_STEPS``
of them): a step identical in pipelines, descriptor sets, push constants and
sizes resubmits the command buffer recorded for it, with no re-recording
(``stats["replays"]``); otherwise a command buffer is recorded from the list,
each command followed by a global compute/transfer memory barrier. Values
that change every decode step (token ids, rope tables, the cache position)
live in small buffers the host rewrites, not in push constants, so decode
steps repeat exactly once the buffer pool has settled.

Descriptor sets are cached per (layout, buffers), and buffers come from a
pool of size classes, so a steady decode loop allocates nothing.

A ``Program`` is a step recorded into a command buffer of its own, which the
owner (``backend.VulkanRunner``'s decode step) resubmits as it is, with no
per-op work on the host. It stays valid while ``generation`` is unchanged:
resetting the descriptor pool (a destroyed buffer, a full set cache) frees
the sets it binds.

Why reusing a pooled buffer inside one step is safe: every command is
followed by a barrier that orders all earlier device work before all later
work. Host writes are not ordered by barriers, so a buffer the host writes
into must not be used by the open step (``Buffer.last_epoch``).
"""

from __future__ import annotations

import contextlib
import struct
from collections import OrderedDict
from typing import Any

import numpy as np

from bitnet_core.errors import ProviderError
from bitnet_core.sdk.pool import size_class

from .kernels import Pipeline
from .runtime import vkapi
from .runtime.context import Buffer, VulkanContext
from .timestamps import DispatchTimer, timestamps_wanted

DESCRIPTOR_SETS = 4096
MAX_BINDINGS = 8
STAGING_FLUSH_BYTES = 256 << 20
RECORDED_STEPS = 4
WHOLE_SIZE = 0xFFFFFFFFFFFFFFFF


class Program:
    """A recorded command buffer run as it is by ``CommandStream.run_program``."""

    __slots__ = ("ptr", "submit", "generation", "dispatches")

    def __init__(self, ptr: Any, submit: Any, generation: int, dispatches: int) -> None:
        self.ptr = ptr
        self.submit = submit
        self.generation = generation
        self.dispatches = dispatches  # kernels a run of it launches


class CommandStream:
    """The open command buffer of one context, its descriptor sets and buffer pools."""

    def __init__(self, ctx: VulkanContext, trace: Any = None) -> None:
        self.ctx = ctx
        self.trace = trace  # the provider's LaunchTrace (sdk.trace): counts submissions
        self.generation = 0  # bumped when the descriptor pool is reset (Program validity)
        vk, ffi, lib = ctx.vk, ctx.vk.ffi, ctx.vk.lib
        self.vk, self.ffi, self.lib = vk, ffi, lib
        dev = ctx.device
        pool_info = ffi.new(
            "VkCommandPoolCreateInfo*",
            {
                "sType": vk.VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                "flags": vk.VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                "queueFamilyIndex": ctx.info.compute_family,
            },
        )
        out = ffi.new("VkCommandPool*")
        vkapi.check("vkCreateCommandPool", lib.vkCreateCommandPool(dev, pool_info, ffi.NULL, out))
        self.command_pool = out[0]
        # recorded steps: key -> (command buffer pointer, submit info), least recently used first
        self._recorded: OrderedDict[tuple, tuple[Any, Any]] = OrderedDict()
        self._spare: list[tuple[Any, Any]] = []
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
        self._begin = ffi.new(
            "VkCommandBufferBeginInfo*",
            {
                "sType": vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
            },
        )
        self._push = ffi.new("char[]", 128)
        self._cmds: list[tuple[tuple, Any]] = []  # (key, how to record it) of the open step
        self.epoch = 0
        # pooled buffers by (host-visible staging?, size class), in allocation order
        self._arena: dict[tuple[bool, int], list[Buffer]] = {}
        self._staging_in_use: list[Buffer] = []
        self._staging_bytes = 0
        self._doomed: list[Buffer] = []
        #: per-command GPU times (``BITNET_VULKAN_TIMESTAMPS=1``; see timestamps.py), else None
        self.timer = DispatchTimer(ctx) if timestamps_wanted(ctx) else None
        self.stats = {
            "submits": 0,
            "replays": 0,
            "recorded": 0,
            "dispatches": 0,
            "copies": 0,
            "descriptor_sets": 0,
        }

    @property
    def recording(self) -> bool:
        """Whether the open step holds commands that have not run yet."""
        return bool(self._cmds)

    # --- buffers ----------------------------------------------------------------
    def acquire(self, nbytes: int, host_write: bool = False) -> Buffer:
        """A device buffer of at least ``nbytes`` from the pool (``host_write``: not in use).

        The first free buffer of the size class in allocation order, not the most
        recently released one: the same sequence of acquires and releases then gets
        the same buffers every decode step, so the step repeats and is replayed.
        """
        size = size_class(nbytes)
        limit = self.ctx.info.limits["max_storage_buffer_range"]
        if size > limit >= nbytes:
            size = max(int(nbytes), 16)
        return self._take((False, size), host_write)

    def _take(self, cls: tuple[bool, int], host_write: bool) -> Buffer:
        arena = self._arena.setdefault(cls, [])
        for b in arena:
            if b.free and (not host_write or b.last_epoch < self.epoch):
                b.free = False
                return b
        buf = self.ctx.allocate(cls[1], host=cls[0], pooled=True)
        arena.append(buf)
        return buf

    def allocate_exact(self, nbytes: int) -> Buffer:
        """A buffer of its own (weights, tables): destroyed, not pooled, when released."""
        return self.ctx.allocate(nbytes, host=False, pooled=False)

    def release(self, buf: Buffer) -> None:
        """Give a buffer back: pooled ones to their free list, others destroyed once idle."""
        if not buf.alive or self.ctx.device is None:
            return
        if buf.pooled:
            buf.free = True
        elif self.recording:
            # destroying it means resetting the descriptor pool, which the open recording uses
            self._doomed.append(buf)
        else:
            self._destroy([buf])

    def _destroy(self, bufs: list[Buffer]) -> None:
        for b in bufs:
            self.ctx.destroy(b)
        # cached descriptor sets and recorded steps may name them: start afresh
        self._forget_recorded()
        self._reset_descriptors()

    def _reset_descriptors(self) -> None:
        if self._sets and self.ctx.device is not None:
            self._forget_recorded()
            self._sets.clear()
            self.generation += 1
            vkapi.check(
                "vkResetDescriptorPool",
                self.lib.vkResetDescriptorPool(self.ctx.device, self.descriptor_pool, 0),
            )

    def _staging(self, nbytes: int) -> Buffer:
        buf = self._take((True, size_class(nbytes)), host_write=False)
        self._staging_in_use.append(buf)
        self._staging_bytes += buf.size
        return buf

    # --- recording ----------------------------------------------------------------
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
        found = (out, int(ffi.cast("uintptr_t", out[0])))
        self._sets[key] = found
        self.stats["descriptor_sets"] += 1
        return found

    def dispatch(
        self,
        pipeline: Pipeline,
        buffers: list[Buffer],
        push: bytes,
        groups: tuple[int, int, int],
    ) -> None:
        """Add one dispatch of ``pipeline`` over ``buffers`` (bindings 0..n-1) to the open step."""
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
        dset, dset_key = self._descriptor_set(pipeline, buffers)
        self._cmds.append((("d", pipeline.key, dset_key, push, x, y, z), (pipeline, dset)))
        for b in buffers:
            b.last_epoch = self.epoch
        self.stats["dispatches"] += 1

    def copy(
        self, src: Buffer, dst: Buffer, nbytes: int, src_offset: int = 0, dst_offset: int = 0
    ) -> None:
        """Add a buffer-to-buffer copy to the open step."""
        if nbytes <= 0:
            return
        key = ("c", src.key, dst.key, nbytes, src_offset, dst_offset)
        self._cmds.append((key, (src, dst)))
        src.last_epoch = dst.last_epoch = self.epoch
        self.stats["copies"] += 1

    def fill_zero(self, buf: Buffer, nbytes: int) -> None:
        """Add zeroing the first ``nbytes`` (rounded up to words) of ``buf`` to the open step."""
        if nbytes <= 0:
            return
        self._cmds.append((("f", buf.key, -(-nbytes // 4) * 4), buf))
        buf.last_epoch = self.epoch

    def _record(self, cmd: Any) -> None:
        """Record the open step into ``cmd``, a barrier after every command."""
        vk, ffi, lib = self.vk, self.ffi, self.lib
        vkapi.check("vkBeginCommandBuffer", lib.vkBeginCommandBuffer(cmd, self._begin))
        compute = vk.VK_PIPELINE_BIND_POINT_COMPUTE
        stage = vk.VK_SHADER_STAGE_COMPUTE_BIT
        bound = None
        timer = self.timer
        timed = timer.begin(cmd, len(self._cmds)) if timer is not None else 0
        names: list[str] = []
        for index, (key, what) in enumerate(self._cmds):
            kind = key[0]
            if kind == "d":
                pipeline, dset = what
                names.append(pipeline.name)
                push, x, y, z = key[3], key[4], key[5], key[6]
                if bound is not pipeline:
                    lib.vkCmdBindPipeline(cmd, compute, pipeline.handle)
                    bound = pipeline
                lib.vkCmdBindDescriptorSets(cmd, compute, pipeline.layout, 0, 1, dset, 0, ffi.NULL)
                if push:
                    ffi.memmove(self._push, push, len(push))
                    lib.vkCmdPushConstants(cmd, pipeline.layout, stage, 0, len(push), self._push)
                lib.vkCmdDispatch(cmd, x, y, z)
            elif kind == "c":
                src, dst = what
                region = ffi.new(
                    "VkBufferCopy*", {"srcOffset": key[4], "dstOffset": key[5], "size": key[3]}
                )
                lib.vkCmdCopyBuffer(cmd, src.handle, dst.handle, 1, region)
                names.append("copy")
            else:
                lib.vkCmdFillBuffer(cmd, what.handle, 0, key[2], 0)
                names.append("fill")
            lib.vkCmdPipelineBarrier(
                cmd, self._stages, self._stages, 0, 1, self._barrier, 0, ffi.NULL, 0, ffi.NULL
            )
            if index < timed:
                timer.after(cmd, index)
        if timer is not None:
            timer.recorded(cmd, names[:timed])
        lib.vkCmdPipelineBarrier(
            cmd,
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
        vkapi.check("vkEndCommandBuffer", lib.vkEndCommandBuffer(cmd))

    def _command_buffer(self) -> tuple[Any, Any]:
        """A command buffer to record into (a spare one, the least recently used, or a new one)."""
        vk, ffi, lib = self.vk, self.ffi, self.lib
        if self._spare:
            ptr, submit = self._spare.pop()
        elif len(self._recorded) >= RECORDED_STEPS:
            _, (ptr, submit) = self._recorded.popitem(last=False)
        else:
            alloc = ffi.new(
                "VkCommandBufferAllocateInfo*",
                {
                    "sType": vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                    "commandPool": self.command_pool,
                    "level": vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                    "commandBufferCount": 1,
                },
            )
            ptr = ffi.new("VkCommandBuffer*")
            vkapi.check(
                "vkAllocateCommandBuffers",
                lib.vkAllocateCommandBuffers(self.ctx.device, alloc, ptr),
            )
            submit = ffi.new(
                "VkSubmitInfo*",
                {
                    "sType": vk.VK_STRUCTURE_TYPE_SUBMIT_INFO,
                    "commandBufferCount": 1,
                    "pCommandBuffers": ptr,
                },
            )
            return ptr, submit
        vkapi.check("vkResetCommandBuffer", lib.vkResetCommandBuffer(ptr[0], 0))
        return ptr, submit

    def _forget_recorded(self) -> None:
        """Recorded steps name descriptor sets and buffers: drop them when those go."""
        self._spare.extend(self._recorded.values())
        self._recorded.clear()

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
        """Run the open step (replaying its command buffer if it ran before), wait, recycle."""
        if not self._cmds:
            return
        key = tuple(k for k, _ in self._cmds)
        found = self._recorded.get(key)
        if found is not None:
            self._recorded.move_to_end(key)
            self.stats["replays"] += 1
        else:
            found = self._recorded[key] = self._record_open_step()
        self._cmds.clear()
        self._submit_and_wait(found[1], _dispatches(key))
        for buf in self._staging_in_use:
            buf.free = True
        self._staging_in_use.clear()
        self._staging_bytes = 0
        if self._doomed:
            doomed, self._doomed = self._doomed, []
            self._destroy(doomed)

    def _record_open_step(self) -> Any:
        """A command buffer (and its submit info) holding the open step, whose ops are
        then cleared; on a failure the buffer goes back to the spares."""
        found = self._command_buffer()
        try:
            self._record(found[0][0])
        except BaseException:
            self._spare.append(found)
            self._cmds.clear()
            raise
        self._cmds.clear()
        self.stats["recorded"] += 1
        return found

    def _submit_and_wait(self, submit: Any, dispatches: int) -> None:
        lib, dev = self.lib, self.ctx.device
        vkapi.check(
            "vkQueueSubmit", lib.vkQueueSubmit(self.ctx.queue, 1, submit, self.fence_ptr[0])
        )
        if self.trace is not None:
            self.trace.submit()
            self.trace.launched(dispatches)
        vkapi.check(
            "vkWaitForFences",
            lib.vkWaitForFences(dev, 1, self.fence_ptr, 1, 0xFFFFFFFFFFFFFFFF),
        )
        vkapi.check("vkResetFences", lib.vkResetFences(dev, 1, self.fence_ptr))
        if self.timer is not None:
            self.timer.collect(submit)
        self.epoch += 1
        self.stats["submits"] += 1

    # --- programs: steps recorded once and resubmitted by their owner -----------------
    def record_program(self) -> Program:
        """Record the open step into a command buffer of its own (until ``free_program``)."""
        dispatches = _dispatches(tuple(k for k, _ in self._cmds))
        found = self._record_open_step()
        return Program(found[0], found[1], self.generation, dispatches)

    def run_program(self, program: Program) -> None:
        """Submit ``program`` (after whatever ops are still open) and wait for it."""
        if program.generation != self.generation:
            raise ProviderError("a recorded program outlived its descriptor sets")
        if self._cmds:
            self.flush()
        self._submit_and_wait(program.submit, program.dispatches)
        self.stats["replays"] += 1

    def free_program(self, program: Program) -> None:
        """Give a program's command buffer back for reuse."""
        if self.ctx.device is not None:
            self._spare.append((program.ptr, program.submit))

    def close(self) -> None:
        ffi, lib, dev = self.ffi, self.lib, self.ctx.device
        if dev is None:
            return
        if self.recording:
            with contextlib.suppress(ProviderError):
                self.flush()
        self._forget_recorded()
        for bufs in self._arena.values():
            for b in bufs:
                self.ctx.destroy(b)
        self._arena.clear()
        for b in self._doomed:
            self.ctx.destroy(b)
        self._doomed.clear()
        if self.timer is not None:
            self.timer.close()
        lib.vkDestroyDescriptorPool(dev, self.descriptor_pool, ffi.NULL)
        lib.vkDestroyFence(dev, self.fence_ptr[0], ffi.NULL)
        lib.vkDestroyCommandPool(dev, self.command_pool, ffi.NULL)


def _dispatches(keys: tuple[Any, ...]) -> int:
    """The compute dispatches among a step's op keys (copies and fills are not kernels)."""
    return sum(1 for k in keys if k[0] == "d")


def pack_push(fmt: str, *values: Any) -> bytes:
    """Push-constant bytes (little endian, 4-byte fields)."""
    return struct.pack("<" + fmt, *values)
