"""GPU time of every recorded command, from Vulkan timestamp queries.

With ``BITNET_VULKAN_TIMESTAMPS=1`` (and a compute queue that has timestamps)
the command stream writes a timestamp before a step's first command and one
after each command's barrier; once a submission's fence has signalled it
reads them back and adds each command's time to ``times`` under its shader
variant's name (``copy`` and ``fill`` for transfers). Every command is
followed by a full barrier, so a difference is that command's own time on
the device (its barrier included). Off by default: the queries cost a little
on every step. ``tools/bench/step_profile.py --device vulkan --kernels`` prints
them for a decode step.
"""

from __future__ import annotations

import os
from typing import Any

from .runtime import vkapi

ENV_TIMESTAMPS = "BITNET_VULKAN_TIMESTAMPS"
#: timestamps in the pool: a step's commands past SLOTS - 1 go unmeasured
SLOTS = 4096


def timestamps_wanted(ctx: Any) -> bool:
    """Whether the switch is on and the device's compute queue writes timestamps."""
    return os.environ.get(ENV_TIMESTAMPS, "0") == "1" and ctx.info.timestamp_period > 0


class DispatchTimer:
    """A timestamp query pool and the times it measured, by command name."""

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        vk, ffi, lib = ctx.vk, ctx.vk.ffi, ctx.vk.lib
        self.vk, self.ffi, self.lib = vk, ffi, lib
        info = ffi.new(
            "VkQueryPoolCreateInfo*",
            {
                "sType": vk.VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
                "queryType": vk.VK_QUERY_TYPE_TIMESTAMP,
                "queryCount": SLOTS,
            },
        )
        out = ffi.new("VkQueryPool*")
        vkapi.check("vkCreateQueryPool", lib.vkCreateQueryPool(ctx.device, info, ffi.NULL, out))
        self.pool = out[0]
        self.seconds_per_tick = ctx.info.timestamp_period * 1e-9
        self._data = ffi.new("uint64_t[]", SLOTS)
        self._labels: dict[int, list[str]] = {}  # command buffer -> names of its timed commands
        #: name -> [commands run, seconds on the device], summed over every submission
        self.times: dict[str, list[float]] = {}

    def _key(self, cmd: Any) -> int:
        return int(self.ffi.cast("uintptr_t", cmd))

    def begin(self, cmd: Any, commands: int) -> int:
        """Start timing a recording of ``commands`` commands; how many of them get a timestamp."""
        timed = min(commands, SLOTS - 1)
        self.lib.vkCmdResetQueryPool(cmd, self.pool, 0, timed + 1)
        self.lib.vkCmdWriteTimestamp(cmd, self.vk.VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, self.pool, 0)
        return timed

    def after(self, cmd: Any, index: int) -> None:
        """The timestamp after command ``index`` (and its barrier)."""
        stage = self.vk.VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT
        self.lib.vkCmdWriteTimestamp(cmd, stage, self.pool, index + 1)

    def recorded(self, cmd: Any, names: list[str]) -> None:
        self._labels[self._key(cmd)] = names

    def collect(self, submit: Any) -> None:
        """Add the times of the submission just completed (its fence has signalled)."""
        names = self._labels.get(self._key(submit.pCommandBuffers[0]))
        if not names:
            return
        n = len(names) + 1
        flags = self.vk.VK_QUERY_RESULT_64_BIT | self.vk.VK_QUERY_RESULT_WAIT_BIT
        vkapi.check(
            "vkGetQueryPoolResults",
            self.lib.vkGetQueryPoolResults(
                self.ctx.device, self.pool, 0, n, 8 * n, self._data, 8, flags
            ),
        )
        for i, name in enumerate(names):
            ticks = int(self._data[i + 1]) - int(self._data[i])
            entry = self.times.setdefault(name, [0, 0.0])
            entry[0] += 1
            entry[1] += max(ticks, 0) * self.seconds_per_tick

    def close(self) -> None:
        if self.ctx.device is not None:
            self.lib.vkDestroyQueryPool(self.ctx.device, self.pool, self.ffi.NULL)
