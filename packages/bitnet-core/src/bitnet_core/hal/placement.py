"""Partial providers: the ops a device lacks are placed on the host, explicitly.

A provider implements the ops it has (the methods of ``KERNEL_INVENTORY`` it
defines; ``implements`` may name fewer). The memory ops (``DEVICE_REQUIRED``)
it must have; any compute op it lacks runs on the host provider
(``cpu-reference``) with the copies around it made here: device-array
arguments are downloaded with ``to_host``, the result uploaded with
``to_device``, ternary weights kept in both forms. ``PlacedProvider`` is that
completed provider; ``host_ops`` and ``device_ops`` say which ops run where,
and receipts and ``bitnet devices --verbose`` report them.

An op the engine calls that is other ops in a row (``COMPOSED``: ``linear``
is ``quantize_act`` then ``matmul_i2s``) is run as those ops when the
provider has some of them, each where it runs: a provider with only
``matmul_i2s`` runs every ternary matmul of a model itself.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from .provider import KERNEL_INVENTORY
from .weights import TernaryWeight

#: what a provider must run itself: its arrays and weights live on its device
DEVICE_REQUIRED: tuple[str, ...] = (
    "to_device",
    "to_host",
    "empty",
    "reshape",
    "load_ternary",
    "kv_store",
)


def device_ops(provider: Any) -> tuple[str, ...]:
    """The protocol ops ``provider`` runs itself."""
    declared = getattr(provider, "implements", None)
    return tuple(
        op
        for op in KERNEL_INVENTORY
        if callable(getattr(provider, op, None)) and (declared is None or op in declared)
    )


def missing_required(provider: Any) -> list[str]:
    """The memory ops ``provider`` lacks (it cannot be completed on the host without them)."""
    have = device_ops(provider)
    return [op for op in DEVICE_REQUIRED if op not in have]


class PlacedWeight:
    """A ternary weight resident on the device, with its host form made on first use."""

    __slots__ = ("source", "device", "_host")

    def __init__(self, source: TernaryWeight, device: Any) -> None:
        self.source = source
        self.device = device
        self._host: Any = None

    @property
    def rows(self) -> int:
        return self.source.rows

    @property
    def cols(self) -> int:
        return self.source.cols

    def host(self, provider: Any) -> Any:
        if self._host is None:
            self._host = provider.load_ternary(self.source)
        return self._host


def _linear(p: Any, x: Any, weight: Any) -> Any:
    xq, xscale = p.quantize_act(x)
    return p.matmul_i2s(xq, xscale, weight)


#: ops that are other ops in a row, with those ops (see the module docstring)
COMPOSED: dict[str, tuple[tuple[str, ...], Any]] = {
    "linear": (("quantize_act", "matmul_i2s"), _linear),
}

#: the attributes ``PlacedProvider`` sets itself
_OWN = frozenset({"device", "host", "device_ops", "composed_ops", "host_ops", "host_calls"})


class PlacedProvider:
    """``device`` completed by ``host`` for the ops it lacks (see the module docstring)."""

    def __init__(self, device: Any, host: Any) -> None:
        self.device = device
        self.host = host
        self.device_ops = device_ops(device)
        lacking = [op for op in KERNEL_INVENTORY if op not in self.device_ops]
        #: ops run as their parts (``COMPOSED``), some of them on the device
        self.composed_ops = tuple(
            op
            for op in lacking
            if op in COMPOSED and any(part in self.device_ops for part in COMPOSED[op][0])
        )
        self.host_ops = tuple(op for op in lacking if op not in self.composed_ops)
        #: host ops run so far, by name
        self.host_calls: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in _OWN:  # not set yet (copy, pickle): no recursion
            raise AttributeError(name)
        if name in self.composed_ops:
            return functools.partial(COMPOSED[name][1], self)
        if name in self.host_ops:
            return functools.partial(self._on_host, name)
        if name in KERNEL_INVENTORY:
            return functools.partial(self._on_device, name)
        return getattr(self.device, name)  # name, family, probe, priority, ...

    def __repr__(self) -> str:
        return f"PlacedProvider({self.device.name}, host_ops={list(self.host_ops)})"

    def kernel_names(self) -> list[str]:
        """The ops that run on the device (a receipt's ``kernels``)."""
        return list(self.device_ops)

    def load_ternary(self, weight: TernaryWeight) -> PlacedWeight:
        return PlacedWeight(weight, self.device.load_ternary(weight))

    def _on_device(self, name: str, *args: Any, **kwargs: Any) -> Any:
        args = tuple(a.device if isinstance(a, PlacedWeight) else a for a in args)
        return getattr(self.device, name)(*args, **kwargs)

    def _on_host(self, name: str, *args: Any, **kwargs: Any) -> Any:
        self.host_calls[name] = self.host_calls.get(name, 0) + 1
        args = tuple(self._to_host(a) for a in args)
        kwargs = {k: self._to_host(v) for k, v in kwargs.items()}
        result = getattr(self.host, name)(*args, **kwargs)
        if isinstance(result, tuple):
            return tuple(self.device.to_device(r) for r in result)
        return self.device.to_device(result)

    def _to_host(self, a: Any) -> Any:
        if isinstance(a, PlacedWeight):
            return a.host(self.host)
        if a is None or isinstance(a, (np.ndarray, np.generic, int, float, str, bool)):
            return a
        return self.device.to_host(a)


def place(provider: Any, host: Any) -> Any:
    """``provider`` itself when it runs every op, else a ``PlacedProvider`` over ``host``."""
    if len(device_ops(provider)) == len(KERNEL_INVENTORY):
        return provider
    return PlacedProvider(provider, host)
