"""The six elementwise ops as one shader switched by an op code (Vulkan's and WebGPU's).

A backend with one elementwise kernel (``elementwise.comp``, ``elementwise.wgsl``)
mixes in ``ElementwiseOps`` and writes only ``_elementwise(op, a, b)``, which
dispatches its kernel with ``ELEMENTWISE_OPS[op]``; the shaders switch on the
same codes.
"""

from __future__ import annotations

from typing import Any

#: op -> the code the elementwise shaders switch on
ELEMENTWISE_OPS: dict[str, int] = {
    "silu": 0,
    "relu2": 1,
    "silu_mul": 2,
    "relu2_mul": 3,
    "add": 4,
    "mul": 5,
}


class ElementwiseOps:
    """``silu``, ``relu2``, ``silu_mul``, ``relu2_mul``, ``add``, ``mul`` through ``_elementwise``."""

    def _elementwise(self, op: str, a: Any, b: Any | None = None) -> Any:
        raise NotImplementedError

    def silu(self, x: Any) -> Any:
        return self._elementwise("silu", x)

    def relu2(self, x: Any) -> Any:
        return self._elementwise("relu2", x)

    def silu_mul(self, gate: Any, up: Any) -> Any:
        return self._elementwise("silu_mul", gate, up)

    def relu2_mul(self, gate: Any, up: Any) -> Any:
        return self._elementwise("relu2_mul", gate, up)

    def add(self, a: Any, b: Any) -> Any:
        return self._elementwise("add", a, b)

    def mul(self, a: Any, b: Any) -> Any:
        return self._elementwise("mul", a, b)
