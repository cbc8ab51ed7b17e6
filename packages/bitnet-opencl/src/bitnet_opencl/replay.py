"""A prebuilt sequence of kernel launches, replayed with little or no Python per kernel.

A ``Launch`` is a kernel object of its own with every argument set once, and
its sizes. ``StepRecording`` holds the launches of one decode step and runs
them with one of two engines:

- ``cl_khr_command_buffer`` (PoCL offers it): the launches are recorded once
  into a command buffer and a step is one ``clEnqueueCommandBufferKHR``. PyOpenCL
  does not wrap the extension: its functions come from
  ``clGetExtensionFunctionAddressForPlatform`` through ctypes, on PyOpenCL's raw
  handles (``.int_ptr``).
- otherwise (or with ``BITNET_OPENCL_COMMAND_BUFFER=0``): one tight loop of
  ctypes ``clEnqueueNDRangeKernel`` calls on prebuilt size arrays.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import glob
import os
from dataclasses import dataclass
from typing import Any

from bitnet_core.errors import ProviderError
from bitnet_core.hal.switches import env_enabled

COMMAND_BUFFER_EXT = "cl_khr_command_buffer"
ENV_COMMAND_BUFFER = "BITNET_OPENCL_COMMAND_BUFFER"

_vp = ctypes.c_void_p
_size3 = ctypes.c_size_t * 3


@functools.cache
def opencl_library() -> ctypes.CDLL:
    """The OpenCL ICD loader PyOpenCL is linked against (else the system's)."""
    import pyopencl

    here = os.path.dirname(pyopencl.__file__)
    for pattern in (".libs/libOpenCL*.so*", "../pyopencl.libs/libOpenCL*.so*"):
        found = sorted(glob.glob(os.path.join(here, pattern)))
        if found:
            return ctypes.CDLL(found[0])
    name = ctypes.util.find_library("OpenCL")
    if name is None:
        raise ProviderError("opencl: no OpenCL library for the replayed step")
    return ctypes.CDLL(name)


@functools.cache
def _enqueue_ndrange() -> Any:
    fn = opencl_library().clEnqueueNDRangeKernel
    fn.restype = ctypes.c_int32
    fn.argtypes = [_vp, _vp, ctypes.c_uint32, _vp, _vp, _vp, ctypes.c_uint32, _vp, _vp]
    return fn


def _check(err: int, what: str) -> None:
    if err != 0:
        raise ProviderError(f"opencl: {what} failed (CL error {err})")


@dataclass(eq=False)
class Launch:
    """One kernel launch: its kernel object, arguments and sizes."""

    name: str
    kernel: Any  # pyopencl.Kernel (kept alive: the handle the replay uses is its)
    args: tuple[Any, ...]
    dims: int
    global_size: Any  # ctypes size_t[3]
    local_size: Any  # ctypes size_t[3] or None

    @classmethod
    def make(
        cls,
        kernel: Any,
        name: str,
        args: tuple[Any, ...],
        gsize: tuple[int, ...],
        lsize: tuple[int, ...] | None,
    ) -> Launch:
        return cls(
            name,
            kernel,
            args,
            len(gsize),
            _size3(*gsize, *(1,) * (3 - len(gsize))),
            None if lsize is None else _size3(*lsize, *(1,) * (3 - len(lsize))),
        )


class CommandBufferApi:
    """The ``cl_khr_command_buffer`` entry points of one platform (provisional 0.9 API)."""

    def __init__(self, platform: Any) -> None:
        lib = opencl_library()
        get = lib.clGetExtensionFunctionAddressForPlatform
        get.restype = _vp
        get.argtypes = [_vp, ctypes.c_char_p]

        def fn(name: str, argtypes: list[Any], restype: Any = ctypes.c_int32) -> Any:
            addr = get(_vp(platform.int_ptr), name.encode())
            if not addr:
                raise ProviderError(f"opencl: the platform has no {name}")
            return ctypes.CFUNCTYPE(restype, *argtypes)(addr)

        u32, p = ctypes.c_uint32, ctypes.POINTER
        self.create = fn(
            "clCreateCommandBufferKHR", [u32, p(_vp), _vp, p(ctypes.c_int32)], restype=_vp
        )
        self.finalize = fn("clFinalizeCommandBufferKHR", [_vp])
        self.release = fn("clReleaseCommandBufferKHR", [_vp])
        self.ndrange = fn(
            "clCommandNDRangeKernelKHR",
            [_vp, _vp, _vp, _vp, u32, _vp, _vp, _vp, u32, _vp, p(ctypes.c_uint32), _vp],
        )
        self.enqueue = fn("clEnqueueCommandBufferKHR", [u32, p(_vp), _vp, u32, _vp, _vp])


class CommandBuffer:
    """The launches recorded once into a ``cl_khr_command_buffer``, each after the previous.

    Each launch keeps a kernel object of its own: PoCL 3.1 reads a recorded
    command's arguments from its kernel object when the buffer runs, not when
    it was recorded (launches sharing a kernel object compute garbage there)."""

    def __init__(self, api: CommandBufferApi, queue: Any, launches: list[Launch]) -> None:
        self._api = api
        self._queue = queue  # kept alive while the command buffer is
        self._queues = (_vp * 1)(queue.int_ptr)
        err = ctypes.c_int32(0)
        self._handle = api.create(1, self._queues, None, ctypes.byref(err))
        _check(err.value, "clCreateCommandBufferKHR")
        try:
            prev = ctypes.c_uint32(0)
            for i, ln in enumerate(launches):
                point = ctypes.c_uint32(0)
                _check(
                    api.ndrange(
                        self._handle, None, None, _vp(ln.kernel.int_ptr), ln.dims, None,
                        ln.global_size, ln.local_size, 1 if i else 0,
                        ctypes.byref(prev) if i else None, ctypes.byref(point), None,
                    ),
                    f"clCommandNDRangeKernelKHR ({ln.name})",
                )  # fmt: skip
                prev = point
            _check(api.finalize(self._handle), "clFinalizeCommandBufferKHR")
        except BaseException:
            self.close()
            raise

    def run(self) -> None:
        _check(
            self._api.enqueue(1, self._queues, self._handle, 0, None, None),
            "clEnqueueCommandBufferKHR",
        )

    def close(self) -> None:
        handle, self._handle = self._handle, None
        if handle:
            self._api.release(handle)

    def __del__(self) -> None:
        try:  # noqa: SIM105
            self.close()
        except Exception:  # the context is going away anyway
            pass


def command_buffers_wanted(extensions: Any) -> bool:
    """The device offers ``cl_khr_command_buffer`` and ``BITNET_OPENCL_COMMAND_BUFFER`` allows it."""
    return COMMAND_BUFFER_EXT in extensions and env_enabled(ENV_COMMAND_BUFFER)


class StepRecording:
    """The launches of one step, replayed from a command buffer or from one ctypes loop.

    Every launch has a kernel object of its own; its arguments are set once, here."""

    def __init__(
        self, queue: Any, launches: list[Launch], api: CommandBufferApi | None, keep: Any = None
    ) -> None:
        """``keep``: what the launches' arguments point into (kept alive with them)."""
        if len({id(ln.kernel) for ln in launches}) != len(launches):
            raise ValueError("a recorded step needs a kernel object per launch")
        for ln in launches:
            ln.kernel.set_args(*ln.args)
        self.launches = launches
        self.keep = keep
        self._queue = queue
        self._q = _vp(queue.int_ptr)
        self._calls = [
            (_vp(ln.kernel.int_ptr), ln.dims, ln.global_size, ln.local_size) for ln in launches
        ]
        self.command_buffer = CommandBuffer(api, queue, launches) if api is not None else None

    @property
    def submissions(self) -> int:
        """Queue submissions a replay makes."""
        return 1 if self.command_buffer is not None else len(self.launches)

    def run(self) -> None:
        if self.command_buffer is not None:
            self.command_buffer.run()
            return
        enqueue, q = _enqueue_ndrange(), self._q
        for kernel, dims, gsize, lsize in self._calls:
            err = enqueue(q, kernel, dims, None, gsize, lsize, 0, None, None)
            if err:
                _check(err, "clEnqueueNDRangeKernel")

    def close(self) -> None:
        if self.command_buffer is not None:
            self.command_buffer.close()
