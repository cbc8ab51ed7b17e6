"""The memory role of the template backend: what a device array is, how a weight is kept.

Here a device array is a contiguous host numpy array (a GPU backend returns
its buffer type and copies in ``to_device``/``to_host``), and a ternary weight
is kept in the canonical 2-bit I2 packing the C++ kernel reads (a quarter
byte per weight; see ``bitnet_core.sdk.packing`` for the shared device layouts).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bitnet_core.errors import ShapeError
from bitnet_core.hal.weights import TernaryWeight
from bitnet_core.sdk.host_memory import lazy_zeros


class TemplateWeight:
    """A resident ternary weight: 2-bit packed codes for the C++ kernel, per-row scales."""

    __slots__ = ("name", "packed", "scales", "shape")

    def __init__(self, weight: TernaryWeight) -> None:
        codes, scales = weight.unpack()
        self.name = weight.name
        self.packed = np.ascontiguousarray(TernaryWeight.from_codes(codes, scales).packed_i2())
        self.scales = np.ascontiguousarray(scales, dtype=np.float32)
        self.shape = (int(weight.rows), int(weight.cols))


class TemplateMemory:
    """The memory ops every backend must have (the registry refuses a provider without them)."""

    def to_device(self, array: Any) -> np.ndarray:
        return np.ascontiguousarray(array)

    def to_host(self, array: Any) -> np.ndarray:
        return np.asarray(array)

    def empty(self, shape: tuple[int, ...], dtype: Any = np.float32) -> np.ndarray:
        return lazy_zeros(shape, dtype)

    def reshape(self, array: Any, shape: tuple[int, ...]) -> np.ndarray:
        try:
            return np.asarray(array).reshape(shape)
        except ValueError as exc:
            raise ShapeError(f"reshape: {np.shape(array)} cannot become {shape}") from exc

    def load_ternary(self, weight: TernaryWeight) -> TemplateWeight:
        return TemplateWeight(weight)

    def kv_store(self, cache: np.ndarray, x: Any, start: int) -> None:
        cache[start : start + len(x)] = x
