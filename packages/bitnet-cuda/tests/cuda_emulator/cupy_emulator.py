"""A CPU stand-in for the part of CuPy the ``cuda`` provider uses (tests only).

No CI machine has an NVIDIA GPU, so without this the CUDA kernels and the
provider's host code would first run on a user's machine. ``EmulatedCuPy``
keeps "device" arrays as numpy arrays (numpy's array API is CuPy's) and runs
``RawModule`` kernels by compiling ``bitnet_kernels.cu`` as C++ with
``cuda_emu.h`` (each CUDA thread a fiber, warps and blocks synchronized as on
the GPU) into a shared library called through ctypes. ``RawModule(path=...)``
(the nvcc fatbin) is refused, as on a GPU without code for it, so the
provider takes its NVRTC path with the same source. The probe sees one
"device" of compute capability 9.0.

Streams and CUDA graphs are emulated too: inside ``with stream:`` after
``stream.begin_capture()``, kernel launches are recorded instead of run, and
``end_capture()`` returns a graph whose ``launch()`` runs them again with the
arguments they were given (arrays by address, scalars by value), as on the
GPU. Anything else that would touch the device during a capture (an
allocation, a host copy, a CuPy elementwise op on a device array) raises,
so a captured step that leans on work done outside the graph fails here.
There are two emulated devices (``BITNET_CUDA_DEVICE`` chooses); the
current one is kept per thread, as CuPy's.

Everything above the kernels is the real provider; what is emulated is the
device. Speed means nothing here.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
CXX = os.environ.get("BITNET_NATIVE_CXX", "g++")
#: a kernel of the source: its name (after __launch_bounds__ where it has them)
KERNEL_RE = re.compile(
    r'extern\s+"C"\s+__global__\s+void\s+(?:__launch_bounds__\(\w+\)\s+)?(\w+)\s*\('
)


def missing() -> str | None:
    """Why the emulator cannot build here, or None."""
    if sys.platform != "linux":
        return f"the CUDA emulator needs Linux (ucontext fibers), not {sys.platform}"
    if not shutil.which(CXX):
        return f"{CXX} not found (the CUDA emulator compiles the kernels as C++)"
    return None


class DeviceArray(np.ndarray):
    """A "device" array: numpy's, plus CuPy's ``set``/``get`` host copies."""

    def set(self, arr: np.ndarray, stream: Any = None) -> None:
        _not_capturing("ndarray.set")
        arr = np.asarray(arr)
        if arr.shape != self.shape or arr.dtype != self.dtype:
            raise ValueError(f"set: {arr.dtype}{arr.shape} into {self.dtype}{self.shape}")
        np.copyto(self, arr)

    def get(self, stream: Any = None) -> np.ndarray:
        _not_capturing("ndarray.get")
        return np.array(self, copy=True)

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        _not_capturing(f"numpy.{ufunc.__name__}")
        inputs = tuple(np.asarray(a) if isinstance(a, DeviceArray) else a for a in inputs)
        if "out" in kwargs:
            kwargs["out"] = tuple(np.asarray(a) for a in kwargs["out"])
        out = getattr(ufunc, method)(*inputs, **kwargs)
        return _device(out) if isinstance(out, np.ndarray) else out

    def __setitem__(self, key: Any, value: Any) -> None:
        _not_capturing("ndarray.__setitem__")
        super().__setitem__(key, value)


def _device(a: np.ndarray) -> DeviceArray:
    return a.view(DeviceArray)


class _Stream:
    """``cupy.cuda.Stream``: the current stream inside ``with``; can capture a graph."""

    _current = threading.local()

    def __init__(self, non_blocking: bool = False) -> None:
        self.non_blocking = non_blocking
        self._capture: list[tuple[Any, ...]] | None = None
        self._outer: list[_Stream | None] = []

    def __enter__(self) -> _Stream:
        self._outer.append(getattr(self._current, "stream", None))
        self._current.stream = self
        return self

    def __exit__(self, *exc: object) -> None:
        self._current.stream = self._outer.pop()

    def begin_capture(self) -> None:
        if self._capture is not None:
            raise RuntimeError("begin_capture: the stream is already capturing")
        self._capture = []

    def is_capturing(self) -> bool:
        return self._capture is not None

    def end_capture(self) -> _Graph:
        if self._capture is None:
            raise RuntimeError("end_capture: the stream is not capturing")
        graph, self._capture = _Graph(self._capture), None
        return graph

    def synchronize(self) -> None:
        _not_capturing("Stream.synchronize")


def _current_stream() -> _Stream | None:
    return getattr(_Stream._current, "stream", None)


def _not_capturing(what: str) -> None:
    s = _current_stream()
    if s is not None and s.is_capturing():
        raise RuntimeError(
            f"{what} during a CUDA graph capture (only kernel launches are captured)"
        )


class _Graph:
    """``cupy.cuda.graph.Graph``: the launches of one capture, run again by ``launch``."""

    def __init__(self, launches: list[tuple[Any, ...]]) -> None:
        self.launches = launches

    def launch(self, stream: Any = None) -> None:
        _not_capturing("Graph.launch")
        for kernel, grid, block, args in self.launches:
            kernel.run(grid, block, args)


class _Event:
    """``cupy.cuda.Event``: the host's clock when recorded (every launch here is synchronous)."""

    def __init__(self) -> None:
        self.time: float | None = None

    def record(self, stream: Any = None) -> None:
        _not_capturing("Event.record")
        self.time = time.perf_counter()

    def synchronize(self) -> None:
        pass


def _elapsed_ms(start: _Event, end: _Event) -> float:
    """``cupy.cuda.get_elapsed_time``: milliseconds between two recorded events."""
    if start.time is None or end.time is None:
        raise RuntimeError("cudaErrorInvalidResourceHandle: an event was never recorded")
    return (end.time - start.time) * 1e3


class _Kernel:
    def __init__(self, lib: ctypes.CDLL, name: str) -> None:
        self.name = name
        self._fn = getattr(lib, f"emu_launch_{name}")
        self._fn.restype = ctypes.c_char_p
        self._fn.argtypes = [
            ctypes.POINTER(ctypes.c_uint),
            ctypes.POINTER(ctypes.c_uint),
            ctypes.POINTER(ctypes.c_void_p),
        ]

    def __call__(
        self, grid: tuple[int, ...], block: tuple[int, ...], args: tuple[Any, ...]
    ) -> None:
        stream = _current_stream()
        if stream is not None and stream._capture is not None:
            stream._capture.append((self, tuple(grid), tuple(block), tuple(args)))
        else:
            self.run(grid, block, args)

    def run(self, grid: tuple[int, ...], block: tuple[int, ...], args: tuple[Any, ...]) -> None:
        keep = []
        ptrs = (ctypes.c_void_p * len(args))()
        for i, a in enumerate(args):
            if isinstance(a, np.ndarray):
                if not a.flags.c_contiguous:
                    raise ValueError(f"{self.name}: argument {i} is not C-contiguous")
                v: Any = ctypes.c_void_p(a.ctypes.data)
            elif isinstance(a, np.int32):
                v = ctypes.c_int32(int(a))
            elif isinstance(a, np.float32):
                v = ctypes.c_float(float(a))
            else:
                raise TypeError(f"{self.name}: argument {i} of type {type(a).__name__}")
            keep.append(v)
            ptrs[i] = ctypes.cast(ctypes.pointer(v), ctypes.c_void_p)
        g = (ctypes.c_uint * 3)(*(tuple(grid) + (1, 1, 1))[:3])
        b = (ctypes.c_uint * 3)(*(tuple(block) + (1, 1, 1))[:3])
        err = self._fn(g, b, ptrs)
        if err:
            raise RuntimeError(f"{self.name}: {err.decode()}")


class _RawModule:
    _lock = threading.Lock()
    _built: dict[str, ctypes.CDLL] = {}

    def __init__(self, code: str | None = None, path: str | None = None, **_: Any) -> None:
        if code is None:
            raise RuntimeError(f"the CUDA emulator cannot run compiled GPU code ({path})")
        self.names = KERNEL_RE.findall(code)
        self._lib = self._build(code, self.names)

    @classmethod
    def _build(cls, code: str, names: list[str]) -> ctypes.CDLL:
        # the kernels, the emulator and the wrappers this file writes: any change rebuilds
        parts = (code, (HERE / "cuda_emu.h").read_text(), Path(__file__).read_text())
        key = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]
        with cls._lock:
            if key in cls._built:
                return cls._built[key]
            out = Path(tempfile.gettempdir()) / f"bitnet-cuda-emu-{os.getuid()}-{key}"
            out.mkdir(exist_ok=True)
            so = out / "kernels.so"
            if not so.exists():
                (out / "kernels.cu").write_text(code)
                wrappers = "".join(
                    f'extern "C" const char *emu_launch_{n}(const unsigned *g, const unsigned *b, '
                    f"void **a) {{ try {{ bitnet_emu::launch({n}, g, b, a); }} "
                    f"catch (const std::exception &e) {{ static std::string m; m = e.what(); "
                    f"return m.c_str(); }} return nullptr; }}\n"
                    for n in names
                )
                (out / "emu.cpp").write_text(
                    f'#include "cuda_emu.h"\n#include "kernels.cu"\n{wrappers}'
                )
                tmp = out / f"kernels.{os.getpid()}.so"
                cmd = [CXX, "-std=gnu++17", "-O1", "-fPIC", "-shared", "-I", str(HERE)]
                cmd += ["-I", str(out), str(out / "emu.cpp"), "-o", str(tmp)]
                run = subprocess.run(cmd, capture_output=True, text=True)
                if run.returncode != 0:
                    raise RuntimeError(f"emulator build failed:\n{run.stderr[-4000:]}")
                os.replace(tmp, so)
            cls._built[key] = ctypes.CDLL(str(so))
            return cls._built[key]

    def get_function(self, name: str) -> _Kernel:
        if name not in self.names:
            raise RuntimeError(f"no kernel named {name!r}")
        return _Kernel(self._lib, name)


class _Device:
    """``cupy.cuda.Device``: made current by ``use()`` or inside ``with`` (per thread)."""

    _current = threading.local()

    def __init__(self, device: int | None = None) -> None:
        self.id = _Device.current() if device is None else int(device)
        self._outer: list[int] = []

    @staticmethod
    def current() -> int:
        return getattr(_Device._current, "id", 0)

    def use(self) -> None:
        _Device._current.id = self.id

    def __enter__(self) -> _Device:
        self._outer.append(_Device.current())
        self.use()
        return self

    def __exit__(self, *exc: object) -> None:
        _Device._current.id = self._outer.pop()


class _Runtime:
    #: emulated devices (``BITNET_CUDA_DEVICE`` chooses among them)
    devices = 2

    @staticmethod
    def getDeviceCount() -> int:  # noqa: N802 (CuPy's name)
        return _Runtime.devices

    @staticmethod
    def getDeviceProperties(index: int) -> dict[str, Any]:  # noqa: N802
        if not 0 <= index < _Runtime.devices:
            raise RuntimeError(f"cudaErrorInvalidDevice: {index}")
        return {"name": f"CUDA emulator (CPU) #{index}".encode(), "major": 9, "minor": 0}

    @staticmethod
    def memGetInfo() -> tuple[int, int]:  # noqa: N802
        return (8 << 30, 8 << 30)


class EmulatedCuPy:
    """The ``cupy`` module as the provider sees it, on the CPU."""

    __version__ = "emulator"
    RawModule = _RawModule
    cuda = SimpleNamespace(
        runtime=_Runtime(),
        Device=_Device,
        Stream=_Stream,
        Event=_Event,
        get_elapsed_time=_elapsed_ms,
        get_current_stream=_current_stream,
    )

    @staticmethod
    def asarray(a: Any, dtype: Any = None) -> DeviceArray:
        _not_capturing("cupy.asarray")
        return _device(np.array(a, dtype=dtype, copy=True))  # a host-to-device copy

    @staticmethod
    def asnumpy(a: Any) -> np.ndarray:
        _not_capturing("cupy.asnumpy")
        return np.array(a, copy=True)

    @staticmethod
    def exp(x: Any) -> np.ndarray:
        _not_capturing("cupy.exp")
        with np.errstate(over="ignore"):  # inf, silently, as on the GPU
            return _device(np.asarray(np.exp(np.asarray(x))))

    def __getattr__(self, name: str) -> Any:  # zeros, empty, empty_like, maximum, ...
        fn = getattr(np, name)
        if isinstance(fn, type) or not callable(fn):  # dtypes, classes, constants
            return fn

        def device_fn(*args: Any, **kwargs: Any) -> Any:
            _not_capturing(f"cupy.{name}")
            out = fn(*args, **kwargs)
            return _device(out) if isinstance(out, np.ndarray) else out

        return device_fn
