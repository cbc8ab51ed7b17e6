"""The memory role of the CUDA backend: CuPy arrays, the padded int8 and half tables, weights.

``CudaMemory`` is the part of ``CudaProvider`` that moves data: the
protocol's memory ops and the helpers the op launches use. Weights are
resident in the SDK's ``i2_lanes`` packing (rows padded to 64 codes, the
layout ``kernels/bitnet_kernels.cu`` reads). It needs ``self.cp`` (CuPy).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from bitnet_core.errors import ShapeError, UnsupportedOperationError
from bitnet_core.hal.bf16 import BF16Array, bf16_to_f32
from bitnet_core.hal.weights import TernaryWeight
from bitnet_core.sdk.packing import pack_lanes


def pack_cuda_ternary(codes: np.ndarray) -> np.ndarray:
    """The SDK's ``"i2_lanes"`` layout, rows padded to 64 columns (a multiple of 4 words)."""
    return pack_lanes(codes, 64)


@dataclass(eq=False)
class CudaTernary:
    words: Any  # cupy uint32 [rows, kw]
    scales: Any  # cupy float32 [rows]
    rows: int
    cols: int
    host: TernaryWeight
    dense: Any = None  # float32 copy, made only for the debug path


@dataclass(eq=False)
class CudaQ8:
    """Quantized activations: int8 [T, kp] (zero padded) and per-row sums."""

    data: Any
    xsum: Any
    cols: int

    @property
    def shape(self) -> tuple[int, int]:
        return (int(self.data.shape[0]), self.cols)


@dataclass(eq=False)
class HalfTable:
    """A float16 or bfloat16 (``kind``) table [rows, cols] on the device.

    ``data`` is [rows, padded] with rows zero-padded to a multiple of 8 values,
    so the head reads 16 bytes a lane: float16, or uint16 bfloat16 bit patterns.
    """

    data: Any
    cols: int
    kind: str  # "f16" or "bf16"

    @property
    def shape(self) -> tuple[int, int]:
        return (int(self.data.shape[0]), self.cols)


class CudaMemory:
    """The memory ops and helpers of ``CudaProvider`` (see the module docstring)."""

    def to_device(self, array: np.ndarray | BF16Array) -> Any:
        if isinstance(array, BF16Array) and array.ndim == 2:
            return self._half_table(array.bits, "bf16")
        a = np.asarray(array)
        if a.dtype == np.float16 and a.ndim == 2:
            return self._half_table(a, "f16")
        if a.dtype == np.int8 and a.ndim == 2:
            return self._upload_q8(a)
        if np.issubdtype(a.dtype, np.integer):
            return self.cp.asarray(a.astype(np.int32))
        if a.dtype == np.float16:
            return self.cp.asarray(a)
        return self.cp.asarray(a, dtype=np.float32)

    def _half_table(self, a: np.ndarray, kind: str) -> HalfTable:
        rows, cols = a.shape
        padded = np.zeros((rows, max(8, -(-cols // 8) * 8)), a.dtype)
        padded[:, :cols] = a
        return HalfTable(self.cp.asarray(padded), cols, kind)

    def _upload_q8(self, xq: np.ndarray) -> CudaQ8:
        t, k = xq.shape
        kp = max(1, -(-k // 64)) * 64
        padded = np.zeros((t, kp), np.int8)
        padded[:, :k] = xq
        xsum = xq.astype(np.int32).sum(axis=1, dtype=np.int32)
        return CudaQ8(self.cp.asarray(padded), self.cp.asarray(xsum), k)

    def to_host(self, array: Any) -> np.ndarray:
        if isinstance(array, CudaQ8):
            return self.cp.asnumpy(array.data)[:, : array.cols]
        if isinstance(array, HalfTable):
            values = self.cp.asnumpy(array.data)[:, : array.cols]
            return bf16_to_f32(values).reshape(values.shape) if array.kind == "bf16" else values
        return self.cp.asnumpy(array) if hasattr(array, "device") else np.asarray(array)

    def empty(self, shape: tuple[int, ...], dtype: Any = np.float32) -> Any:
        return self.cp.zeros(shape, dtype=dtype)

    def reshape(self, array: Any, shape: tuple[int, ...]) -> Any:
        if math.prod(shape) != array.size:
            raise ShapeError(f"reshape: {tuple(array.shape)} cannot become {tuple(shape)}")
        return array.reshape(shape)

    def load_ternary(self, weight: TernaryWeight) -> CudaTernary:
        codes, scales = weight.unpack()
        return CudaTernary(
            self.cp.asarray(pack_cuda_ternary(codes)),
            self.cp.asarray(scales.astype(np.float32)),
            weight.rows,
            weight.cols,
            weight,
        )

    def _f32(self, x: Any) -> Any:
        if isinstance(x, (CudaQ8, HalfTable)):
            raise UnsupportedOperationError("cuda: expected a float32 array")
        if not hasattr(x, "device"):
            return self.cp.asarray(np.asarray(x, np.float32))
        return x if x.dtype == np.float32 else x.astype(np.float32)
