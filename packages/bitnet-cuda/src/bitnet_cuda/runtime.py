"""The runtime role of the CUDA backend: CuPy, the device probe, the kernel module.

``CudaRuntime`` is the part of ``CudaProvider`` that reaches the device:
importing CuPy (``sdk.runtime.import_runtime``), the probe (a reason at each
step that fails), loading the kernel module and looking kernels up.
"""

from __future__ import annotations

from typing import Any

from bitnet_core.errors import ProviderError
from bitnet_core.hal.provider import Availability
from bitnet_core.hal.switches import env_enabled
from bitnet_core.sdk.runtime import import_runtime, never_raises

from .module import load_module

CUPY_HINT = "pip install 'bitnet-cuda[cuda12]', or [cuda13] for a CUDA 13 driver"


def import_cupy() -> Any:
    """The cupy module; ``RuntimeUnavailable`` (step import/loader) when it cannot load."""
    return import_runtime("cupy", CUPY_HINT, "CuPy")


class CudaRuntime:
    """CuPy, the probe and the kernels of ``CudaProvider`` (see the module docstring)."""

    def _cupy_module(self) -> Any:
        """CuPy (the tests' CPU emulator of the device overrides this)."""
        return import_cupy()

    @never_raises
    def probe(self, explicit: bool = False) -> Availability:
        cp = self._cupy_module()
        try:
            count = cp.cuda.runtime.getDeviceCount()
        except Exception as exc:
            return Availability.no(f"CUDA driver/runtime not usable: {exc}")
        if count < 1:
            return Availability.no("no CUDA device found")
        try:
            props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
            name = (
                props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
            )
            cc = (int(props["major"]), int(props["minor"]))
            free, total = cp.cuda.runtime.memGetInfo()
        except Exception as exc:
            return Availability.no(f"CUDA device query failed: {exc}")
        if cc < (6, 1):
            return Availability.no(
                f"{name}: compute capability {cc[0]}.{cc[1]} lacks dp4a (needs 6.1)"
            )
        return Availability.yes(
            f"{name} (sm_{cc[0]}{cc[1]})",
            devices=count,
            compute_capability=f"{cc[0]}.{cc[1]}",
            memory_total=int(total),
            memory_free=int(free),
            cupy=cp.__version__,
        )

    @property
    def cp(self) -> Any:
        if self._cp is None:
            self._cp = self._cupy_module()
            try:
                self._mod, self.kernel_source = load_module(self._cp)
            except Exception as exc:
                raise ProviderError(f"CUDA kernels failed to load: {exc}") from exc
        return self._cp

    def _k(self, name: str) -> Any:
        fn = self._kernels.get(name)
        if fn is None:
            _ = self.cp
            fn = self._kernels[name] = self._mod.get_function(name)
        return fn

    @property
    def tensor_cores(self) -> bool:
        """Int8 mma.sync (compute capability 8.0+), unless ``BITNET_CUDA_MMA=0``."""
        if self._tensor_cores is None:
            cp = self.cp
            props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
            cc = (int(props["major"]), int(props["minor"]))
            self._tensor_cores = cc >= (8, 0) and env_enabled("BITNET_CUDA_MMA")
        return self._tensor_cores
