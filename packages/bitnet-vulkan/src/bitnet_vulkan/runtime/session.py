"""``VulkanRuntime``: the provider's part of the runtime role.

The probe, the device context with its pipelines (``kernels``) and command
stream (``stream``) made on first use, a shader dispatched by name, ``close``.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from bitnet_core.errors import ProviderError
from bitnet_core.hal.provider import Availability
from bitnet_core.sdk.runtime import never_raises

from .._version import __version__
from ..kernels import PipelineCache, spirv_modules
from ..stream import CommandStream
from . import vkapi
from .context import VulkanContext
from .devices import ENV_DEVICE


class VulkanRuntime:
    """The provider's device: found by ``probe``, its context made on first use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ctx: VulkanContext | None = None
        self._explicit = True  # constructed directly: the caller asked for this provider

    @never_raises
    def probe(self, explicit: bool = False) -> Availability:
        """Shaders built, loader loads, instance, a device with a compute queue."""
        try:
            spirv_modules()
        except ProviderError as exc:
            return Availability.no(str(exc), step="kernels")
        vkapi.load()
        with self._lock:
            if self._ctx is None:
                self._ctx = self._create(explicit, self.trace)  # type: ignore[attr-defined]
                self._explicit = explicit
            ctx = self._ctx
        info = ctx.info
        if not explicit and info.is_cpu and not os.environ.get(ENV_DEVICE):
            return Availability.no(
                f"only a CPU Vulkan device ({info.describe()}); ask for it with "
                f"--device vulkan or {ENV_DEVICE}={info.index}",
            )
        return Availability.yes(
            info.describe(),
            device_kind="cpu" if info.is_cpu else "gpu",
            **info.details(),
            integer_dot_product=ctx.use_int_dot,
            bitnet_vulkan=__version__,
        )

    @staticmethod
    def _create(explicit: bool, trace: Any = None) -> VulkanContext:
        ctx = VulkanContext.create(explicit)
        try:
            ctx.pipelines = PipelineCache(ctx)  # type: ignore[attr-defined]
            ctx.stream = CommandStream(ctx, trace)  # type: ignore[attr-defined]
        except BaseException:
            ctx.close()
            raise
        return ctx

    @property
    def context(self) -> VulkanContext:
        """The device context (created on first use; explicit, as direct use asks for it)."""
        if self._ctx is None:
            with self._lock:
                if self._ctx is None:
                    self._ctx = self._create(self._explicit, self.trace)  # type: ignore[attr-defined]
        return self._ctx

    @property
    def stream(self) -> CommandStream:
        return self.context.stream  # type: ignore[attr-defined]

    @property
    def device_info(self):
        return self.context.info

    def synchronize(self) -> None:
        """Run everything recorded so far and wait for it."""
        self.stream.flush()

    def close(self) -> None:
        """Release the device (arrays still alive become unusable)."""
        with self._lock:
            ctx, self._ctx = self._ctx, None
            if ctx is not None:
                ctx.stream.close()
                ctx.pipelines.close()
                ctx.close()

    def _run(
        self,
        shader: str,
        buffers: list[Any],
        push: bytes,
        groups: tuple[int, int, int],
        spec: tuple[int, ...] = (),
    ) -> None:
        """Record a dispatch of ``shader`` over ``buffers`` (device arrays or buffers)."""
        pipe = self.context.pipelines.get(shader, len(buffers), spec)
        self.stream.dispatch(pipe, [b.buffer for b in buffers], push, groups)
        self.trace.kernel(shader)  # type: ignore[attr-defined]
