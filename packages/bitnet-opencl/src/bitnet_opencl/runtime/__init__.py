"""The runtime role of the ``opencl`` backend: PyOpenCL, the device choice, the device's state.

``devices``: discovery, ranking and ``BITNET_OPENCL_DEVICE``; ``context``: one
device's context, queue, built program, kernels and pool (``Runtime``);
``OpenCLRuntime`` here: the provider's part of it (the probe, the runtime made
on first use, a kernel launched by name).
"""

from __future__ import annotations

import threading

from bitnet_core.errors import DeviceUnavailableError
from bitnet_core.hal.provider import Availability
from bitnet_core.sdk.runtime import never_raises

from .context import Runtime
from .devices import ENV_DEVICE, DeviceInfo, choose_device, discover, import_pyopencl

__all__ = [
    "ENV_DEVICE",
    "DeviceInfo",
    "OpenCLRuntime",
    "Runtime",
    "choose_device",
    "discover",
    "import_pyopencl",
]


class OpenCLRuntime:
    """The provider's device: chosen by ``probe``, opened by ``runtime`` on first use."""

    def __init__(self, device: str | None = None) -> None:
        """``device``: ``"P:D"`` overriding ``BITNET_OPENCL_DEVICE`` (tests, benchmarks)."""
        self._request = device
        self._choices: dict[bool, DeviceInfo] = {}
        self._rt: Runtime | None = None
        self._lock = threading.Lock()

    @never_raises
    def probe(self, explicit: bool = False) -> Availability:
        found = discover()
        if not found.devices:
            return Availability.no(found.reason, found.step)
        info, reason = choose_device(explicit, request=self._request, discovery=found)
        if info is None:
            return Availability.no(reason, "device")
        self._choices[explicit] = info
        return Availability.yes(
            info.describe(), "cpu" if info.kind == "cpu" else "gpu", **info.details()
        )

    @property
    def runtime(self) -> Runtime:
        """The device state, created on first use from the last successful probe."""
        rt = self._rt
        if rt is not None:
            return rt
        with self._lock:
            if self._rt is None:
                info = self._choices.get(True) or self._choices.get(False)
                if info is None:
                    avail = self.probe(explicit=True)
                    if not avail.available:
                        raise DeviceUnavailableError(f"opencl: {avail.reason}")
                    info = self._choices[True]
                self._rt = Runtime.open(info)
            return self._rt

    @property
    def device_info(self) -> DeviceInfo:
        return self.runtime.info

    def synchronize(self) -> None:
        """Wait for every queued command (benchmarks)."""
        self.runtime.finish()

    def _run(self, name: str, gsize: tuple[int, ...], lsize: tuple[int, ...] | None, *args):
        """Enqueue kernel ``name`` over ``gsize`` (work-groups of ``lsize``) and record it."""
        rt = self.runtime
        with rt.launch_lock:  # a kernel object's arguments are shared state
            rt.kernel(name)(rt.queue, gsize, lsize, *args)
        self.trace.kernel(name)  # type: ignore[attr-defined]
        self.trace.submit()  # type: ignore[attr-defined]
        self.trace.launched()  # type: ignore[attr-defined]
