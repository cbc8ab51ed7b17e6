"""One device's OpenCL state: context, in-order queue, built program, kernels, pool."""

from __future__ import annotations

import os
import threading
from typing import Any

from bitnet_core.errors import BitnetError, ConfigError, ProviderError
from bitnet_core.hal.switches import env_int

from ..buffers import DEFAULT_POOL_LIMIT, BufferPool
from ..kernels import Features, build_program, detect_features
from .devices import DeviceInfo, import_pyopencl

ENV_POOL_MB = "BITNET_OPENCL_POOL_MB"
ENV_GEMV = "BITNET_OPENCL_GEMV"


def _pool_limit() -> int:
    return env_int(ENV_POOL_MB, DEFAULT_POOL_LIMIT >> 20) << 20


def pow2_floor(n: int) -> int:
    return 1 << (max(1, int(n)).bit_length() - 1)


class Runtime:
    """Everything bound to the chosen device; created once per provider, on first use."""

    @classmethod
    def open(cls, info: DeviceInfo) -> Runtime:
        """The runtime of ``info``; ``ProviderError`` naming the device when set-up fails."""
        cl = import_pyopencl()
        try:
            return cls(cl, info)
        except BitnetError:
            raise
        except Exception as exc:
            raise ProviderError(
                f"opencl: setting up {info.describe()} failed: {type(exc).__name__}: {exc}"
            ) from exc

    def __init__(self, cl: Any, info: DeviceInfo, features: Features | None = None) -> None:
        """``features`` replaces the detected ones (tests of other kernel variants)."""
        self.cl = cl
        self.info = info
        self.device = cl.get_platforms()[info.platform_index].get_devices()[info.device_index]
        self.context = cl.Context([self.device])
        self.queue = cl.CommandQueue(self.context, self.device)
        wanted = features if features is not None else detect_features(cl, self.device, info)
        self.program, self.features, self.build_notes = build_program(cl, self.context, wanted)
        self.pool = BufferPool(cl, self.context, _pool_limit())
        self.max_work_group = int(self.device.max_work_group_size)
        self._kernels: dict[str, Any] = {}
        self._kernel_max: dict[str, int] = {}
        self._groups: dict[tuple, Any] = {}
        self._lock = threading.Lock()
        self.launch_lock = threading.Lock()

    def kernel(self, name: str) -> Any:
        k = self._kernels.get(name)
        if k is None:
            with self._lock:
                k = self._kernels.get(name)
                if k is None:
                    k = self.cl.Kernel(self.program, name)
                    self._kernels[name] = k
        return k

    def kernel_max_work_group(self, name: str) -> int:
        if name not in self._kernel_max:
            wg = self.kernel(name).get_work_group_info(
                self.cl.kernel_work_group_info.WORK_GROUP_SIZE, self.device
            )
            self._kernel_max[name] = int(wg)
        return self._kernel_max[name]

    def reduce_group(self, name: str, want: int, need: int | None = None) -> int:
        """A power-of-two work-group size for a reducing kernel: <= want, the kernel's
        limit, and (when ``need`` is given) no larger than the next power of two of it."""
        key = (name, want, None if need is None else min(int(need), want))
        size = self._groups.get(key)
        if size is None:
            size = min(want, self.kernel_max_work_group(name), self.max_work_group)
            if need is not None:
                size = min(size, 1 << max(0, int(need) - 1).bit_length())
            size = self._groups[key] = pow2_floor(size)
        return size

    def row_plan(self, name: str, units: int) -> tuple[int, int]:
        """``(lanes, work-group size)`` for a row-parallel kernel whose rows hold
        ``units`` vector steps: on a CPU device one item a row (no exchange, many
        rows a group); on a GPU up to 16 lanes a row and up to 128 items a group.
        ``BITNET_OPENCL_GEMV=LANES:WG`` overrides (tuning)."""
        override = os.environ.get(ENV_GEMV, "").strip()
        key = (name, min(int(units), 16), override)
        plan = self._groups.get(key)
        if plan is None:
            plan = self._groups[key] = self._row_plan(name, units, override)
        return plan

    def _row_plan(self, name: str, units: int, override: str) -> tuple[int, int]:
        limit = min(self.kernel_max_work_group(name), self.max_work_group)
        if override:
            try:
                lanes, wg = (int(v) for v in override.split(":"))
            except ValueError:
                raise ConfigError(f"{ENV_GEMV}={override!r} is not LANES:WG") from None
            if lanes < 1 or wg < lanes or wg % lanes or wg > limit:
                raise ConfigError(
                    f"{ENV_GEMV}={override!r}: need 1 <= LANES, LANES | WG <= {limit}"
                )
            return lanes, wg
        if self.info.kind == "cpu":
            return 1, pow2_floor(min(16, limit))
        lanes = pow2_floor(min(16, max(1, units), limit))
        return lanes, max(lanes, pow2_floor(min(128, limit)))

    def finish(self) -> None:
        self.queue.finish()
