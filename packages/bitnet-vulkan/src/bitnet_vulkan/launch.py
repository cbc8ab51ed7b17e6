"""Workgroup planning of the Vulkan backend's op launches (device-specific sizes and counts).

``VulkanLaunch`` is the part of ``VulkanProvider`` that turns an op's sizes
into a shader variant, workgroup counts and specialization constants, for
GPUs (warp-sized rows) and CPU devices (lavapipe: a few large workgroups).
It needs ``self.context``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .runtime.devices import DeviceInfo

MATMUL_GPU = (32, 4)
MATMUL_CPU = (8, 16)
#: workgroup size of the subgroup-reduced matmuls (one subgroup a row)
MATMUL_SG_GPU, MATMUL_SG_CPU = 128, 64
#: workgroup size of norm_quant.comp (one workgroup a row, 32 values an invocation in
#: registers: rows up to 8192 on GPUs), at most the device's limit (norm_wg)
NORM_WG_GPU, NORM_WG_CPU = 256, 64
SG_TOKENS_PER_PASS = 4  # TOKENS_PER_PASS in matmul_i2s.comp (subgroup variants)
#: CPU devices (lavapipe) pay per workgroup: a few large ones, each looping, run faster.
CPU_DEVICE_GROUPS = int(os.environ.get("BITNET_VULKAN_CPU_GROUPS", "64"))


def pow2_at_least(n: int, lo: int, hi: int) -> int:
    return max(lo, min(hi, 1 << max(int(n) - 1, 0).bit_length()))


def norm_wg(info: DeviceInfo) -> int:
    """norm_quant.comp's workgroup size on the device ``info`` describes."""
    wg = NORM_WG_CPU if info.is_cpu else NORM_WG_GPU
    return min(wg, int(info.limits.get("max_workgroup_invocations", wg)))


class VulkanLaunch:
    """Workgroup planning of ``VulkanProvider`` (see the module docstring)."""

    def _row_launch(self, shader: str, rows: int, cols: int):
        """(variant, workgroups, specialization) of a one-row-at-a-time shader (rmsnorm, quantize)."""
        ctx = self.context
        if ctx.use_subgroup:
            wg = MATMUL_SG_CPU if ctx.info.is_cpu else MATMUL_SG_GPU
            per_group = max(1, wg // max(ctx.info.subgroup_size, 1))
            return shader + "_sg", (self._groups(rows, per_group), 1, 1), (wg,)
        return shader, (self._groups(rows, 1), 1, 1), (pow2_at_least(cols, 32, 256),)

    def _groups(self, n: int, per_group: int) -> int:
        """Workgroups for ``n`` items (the shaders loop over the rest): few on CPU devices."""
        info = self.context.info
        cap = CPU_DEVICE_GROUPS if info.is_cpu else info.limits["max_workgroup_count_x"]
        return max(1, min(-(-n // per_group), cap))

    @property
    def _matmul_cfg(self) -> tuple[int, int]:
        return MATMUL_CPU if self.context.info.is_cpu else MATMUL_GPU

    def _plain_groups(self, rows: int, tokens: int) -> tuple[int, int, int]:
        """Workgroups of a shared-memory matmul (``_matmul_cfg`` rows each)."""
        ctx = self.context
        lim = ctx.info.limits
        cap = CPU_DEVICE_GROUPS if ctx.info.is_cpu else lim["max_workgroup_count_x"]
        return (
            max(1, min(-(-rows // self._matmul_cfg[1]), cap)),
            max(1, min(tokens, lim["max_workgroup_count_y"])),
            1,
        )

    def _matmul_launch(self, shader: str, rows: int, tokens: int, extra: tuple[int, ...] = ()):
        """(shader variant, workgroups, specialization constants) of a matmul over ``rows``."""
        ctx = self.context
        lim = ctx.info.limits
        cap = CPU_DEVICE_GROUPS if ctx.info.is_cpu else lim["max_workgroup_count_x"]
        if ctx.use_subgroup:
            wg = MATMUL_SG_CPU if ctx.info.is_cpu else MATMUL_SG_GPU
            per_group = max(1, wg // max(ctx.info.subgroup_size, 1))
            spec: tuple[int, ...] = (wg, 1, *extra)
            shader += "_sg"
        else:
            per_group = self._matmul_cfg[1]
            spec = (*self._matmul_cfg, *extra)
        token_groups = tokens
        if shader == "matmul_i2s_sg" or shader == "matmul_i2s_dot_sg":
            token_groups = -(-tokens // SG_TOKENS_PER_PASS)
        groups = (
            max(1, min(-(-rows // per_group), cap)),
            max(1, min(token_groups, lim["max_workgroup_count_y"])),
            1,
        )
        return shader, groups, spec
