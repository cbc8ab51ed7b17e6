"""The runtime role of the CUDA backend: CuPy, the device probe, the kernel module.

``CudaRuntime`` is the part of ``CudaProvider`` that reaches the device:
importing CuPy (``sdk.runtime.import_runtime``), the probe (a reason at each
step that fails), loading the kernel module and looking kernels up.

The probe loads the kernel module (the fatbin, else NVRTC) and looks up every
kernel, so a device whose kernels do not build or load is unavailable at step
``"kernels"`` and ``auto`` never picks it. ``BITNET_CUDA_DEVICE=N`` chooses
the device (``sdk.runtime.device_choice``; default 0, CuPy's current device);
it is made current wherever the provider loads CuPy and in ``CudaRunner``'s
forward passes. Every kernel launched through ``_k`` is recorded in
``self.trace`` (a kernel and a submission).
"""

from __future__ import annotations

from typing import Any

from bitnet_core.errors import ConfigError, ProviderError
from bitnet_core.hal.provider import Availability
from bitnet_core.hal.switches import env_enabled
from bitnet_core.sdk.runtime import (
    RuntimeUnavailable,
    device_choice,
    device_variable,
    import_runtime,
    never_raises,
)

from .kernels import load_module

CUPY_HINT = "pip install 'bitnet-cuda[cuda12]', or [cuda13] for a CUDA 13 driver"


def import_cupy() -> Any:
    """The cupy module; ``RuntimeUnavailable`` (step import/loader) when it cannot load."""
    return import_runtime("cupy", CUPY_HINT, "CuPy")


def device_index(count: int) -> int:
    """The device ``BITNET_CUDA_DEVICE`` chooses among ``count`` (0 when unset)."""
    value = device_choice("cuda")
    if not value:
        return 0
    name = device_variable("cuda")
    try:
        index = int(value)
    except ValueError:
        raise ConfigError(f"{name} must be a device index, got {value!r}") from None
    if not 0 <= index < count:
        raise RuntimeUnavailable(
            f"{name}={index}: no such CUDA device ({count} found: 0..{count - 1})"
        )
    return index


class _Traced:
    """A kernel whose every launch is recorded in the provider's trace."""

    __slots__ = ("fn", "name", "trace")

    def __init__(self, fn: Any, name: str, trace: Any) -> None:
        self.fn, self.name, self.trace = fn, name, trace

    def __call__(self, grid: Any, block: Any, args: Any) -> None:
        self.trace.kernel(self.name)
        self.trace.submit()
        self.trace.launched()
        self.fn(grid, block, args)


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
        index = device_index(count)
        try:
            props = cp.cuda.runtime.getDeviceProperties(index)
            name = (
                props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
            )
            cc = (int(props["major"]), int(props["minor"]))
            with cp.cuda.Device(index):
                free, total = cp.cuda.runtime.memGetInfo()
        except Exception as exc:
            return Availability.no(f"CUDA device query failed: {exc}")
        if cc < (6, 1):
            return Availability.no(
                f"{name}: compute capability {cc[0]}.{cc[1]} lacks dp4a (needs 6.1)"
            )
        try:
            _ = self.cp  # the kernel module: built or loaded, every kernel looked up
        except ProviderError as exc:
            return Availability.no(f"{name}: {exc}", step="kernels")
        return Availability.yes(
            f"{name} (sm_{cc[0]}{cc[1]})",
            device_kind="gpu",
            devices=count,
            device_index=index,
            compute_capability=f"{cc[0]}.{cc[1]}",
            memory_total=int(total),
            memory_free=int(free),
            cupy=cp.__version__,
            kernels=self.kernel_source,
        )

    @property
    def cp(self) -> Any:
        """CuPy with the chosen device current and the kernel module loaded (once)."""
        if self._cp is None:
            cp = self._cupy_module()
            self.device_id = device_index(cp.cuda.runtime.getDeviceCount())
            try:
                with cp.cuda.Device(self.device_id):
                    self._mod, self.kernel_source = load_module(cp)
            except Exception as exc:
                raise ProviderError(f"CUDA kernels failed to load: {exc}") from exc
            cp.cuda.Device(self.device_id).use()
            self._cp = cp
        return self._cp

    def _k(self, name: str) -> Any:
        fn = self._kernels.get(name)
        if fn is None:
            _ = self.cp
            fn = self._kernels[name] = _Traced(self._mod.get_function(name), name, self.trace)
        return fn

    @property
    def tensor_cores(self) -> bool:
        """Int8 mma.sync (compute capability 8.0+), unless ``BITNET_CUDA_MMA=0``."""
        if self._tensor_cores is None:
            cp = self.cp
            props = cp.cuda.runtime.getDeviceProperties(self.device_id)
            cc = (int(props["major"]), int(props["minor"]))
            self._tensor_cores = cc >= (8, 0) and env_enabled("BITNET_CUDA_MMA")
        return self._tensor_cores
