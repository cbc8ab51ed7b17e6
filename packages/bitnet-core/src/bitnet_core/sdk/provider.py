"""``DeviceProvider``: the base class of every provider; it checks each op's arguments once.

A subclass writes only its device's part. Each op of ``checks.CHECKS`` that a
class defines is wrapped when the class is created, so the shared check runs
before the provider's code (and the provider's body never repeats it). Each
compute op (``TRACED_OPS``) it defines is wrapped so that a call from outside
the provider that named no kernel in ``self.trace`` is recorded there under
the op's name (the ops it calls itself are part of it): the receipt's
``kernels`` are what ran, whether or not the backend names its own. The
class attributes a plugin describes itself with (``hal.provider.KernelProvider``)
get their defaults here; ``GpuProvider`` adds what every GPU backend says the
same way, so a backend's class header states only what differs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, ClassVar

from ..hal.provider import KERNEL_INVENTORY, PLUGIN_API_VERSION
from . import checks
from .trace import LaunchTrace

#: the ops that move or describe memory, not compute: never recorded as kernels
MEMORY_OPS = frozenset({"to_device", "to_host", "empty", "reshape", "load_ternary"})
#: the ops a trace records by name when they ran without naming a kernel of their own
TRACED_OPS = tuple(op for op in KERNEL_INVENTORY if op not in MEMORY_OPS)


def _checked(fn: Callable[..., Any], check: Callable[..., None]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def op(self: Any, *args: Any, **kwargs: Any) -> Any:
        check(*args, **kwargs)
        return fn(self, *args, **kwargs)

    op.__checked__ = check  # type: ignore[attr-defined]
    return op


def _traced(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    @functools.wraps(fn)
    def op(self: Any, *args: Any, **kwargs: Any) -> Any:
        trace = self.trace
        here = trace.thread  # this thread's: other threads' ops do not count here
        if getattr(here, "in_op", False):  # called by another op (linear's quantize_act)
            return fn(self, *args, **kwargs)
        before = getattr(here, "records", 0)
        here.in_op = True
        try:
            out = fn(self, *args, **kwargs)
        finally:
            here.in_op = False
        if getattr(here, "records", 0) == before:  # it named no kernel: it stands for its own
            trace.kernel(name)
            trace.launched()
        return out

    op.__traced__ = name  # type: ignore[attr-defined]
    return op


#: the class keywords a provider may describe itself with
DESCRIPTION = ("name", "family", "device_kind", "priority", "aliases", "fakeable", "distribution")


class DeviceProvider:
    """Defaults of a plugin's self-description, and the argument checks of its ops."""

    plugin_api: ClassVar[int] = PLUGIN_API_VERSION
    aliases: ClassVar[tuple[str, ...]] = ()
    fakeable: ClassVar[bool] = False
    distribution: ClassVar[str] = ""

    def __init_subclass__(cls, **describe: Any) -> None:
        """``class P(DeviceProvider, family="x", priority=20, ...)``: the self-description
        as class keywords (any of ``DESCRIPTION``; ``name`` defaults to ``family``)."""
        unknown = sorted(set(describe) - set(DESCRIPTION))
        if unknown:
            raise TypeError(f"{cls.__name__}: unknown provider description {', '.join(unknown)}")
        super().__init_subclass__()
        if "family" in describe and "name" not in describe and "name" not in cls.__dict__:
            describe["name"] = describe["family"]
        for key, value in describe.items():
            setattr(cls, key, value)
        for name, check in checks.CHECKS.items():
            fn = getattr(cls, name, None)  # its own, or a mixin's not checked yet
            if callable(fn) and getattr(fn, "__checked__", None) is not check:
                setattr(cls, name, _checked(fn, check))
        for name in TRACED_OPS:  # outside the check: a refused call ran nothing
            fn = getattr(cls, name, None)  # its own, or a mixin's not traced yet
            if callable(fn) and getattr(fn, "__traced__", None) != name:
                setattr(cls, name, _traced(fn, name))

    @property
    def trace(self) -> LaunchTrace:
        """What this provider ran (``sdk.trace``): kernels, submissions, fallbacks."""
        trace = self.__dict__.get("_launch_trace")
        if trace is None:
            trace = self.__dict__["_launch_trace"] = LaunchTrace()
        return trace


class GpuProvider(DeviceProvider):
    """Defaults of a GPU backend: a GPU device, fakeable (``BITNET_GPU_FAKE``).

    The KV cache dtypes are the kernels' to say: a backend whose ``kv_store`` and
    ``attention`` take float16 caches lists them in ``kv_dtypes``; without it, float32
    only (``sdk.kv_cache.DEFAULT_KV_DTYPES``)."""

    device_kind: ClassVar[str] = "gpu"
    fakeable: ClassVar[bool] = True
