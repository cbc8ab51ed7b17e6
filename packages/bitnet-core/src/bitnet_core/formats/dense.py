"""F32 / F16 / BF16 weights read as ternary (absmean at load).

``unpack`` ternarizes the float matrix with :func:`ternarize_rows` over the
whole tensor (exact per-row scales when it is already ternary); ``pack``
writes ``codes * scales`` in the float type.
"""

from __future__ import annotations

import numpy as np

from ..hal.bf16 import bf16_to_f32, f32_to_bf16
from .absmean import ternarize_rows
from .base import Codec, check_codes, row_scales


class DenseCodec(Codec):
    """A float matrix quantized to ternary when unpacked."""

    def __init__(self, name: str, ggml_type: int, itemsize: int) -> None:
        self.name = name
        self.ggml_type = ggml_type
        self.itemsize = itemsize

    def nbytes(self, rows: int, cols: int) -> int:
        return rows * cols * self.itemsize

    def to_float(self, raw: np.ndarray, rows: int, cols: int) -> np.ndarray:
        data = self.raw_bytes(raw, rows, cols)
        if self.name == "bf16":
            return bf16_to_f32(data.view("<u2")).reshape(rows, cols)
        dtype = "<f4" if self.name == "f32" else "<f2"
        return data.view(dtype).astype(np.float32).reshape(rows, cols)

    def pack(self, codes: np.ndarray, scales: np.ndarray | float) -> np.ndarray:
        codes = check_codes(codes, self.name)
        s = row_scales(scales, codes.shape[0], self.name)
        values = codes.astype(np.float32) * s[:, None]
        if self.name == "bf16":
            return f32_to_bf16(values).view(np.uint8).reshape(-1)
        dtype = "<f4" if self.name == "f32" else "<f2"
        return values.astype(dtype).view(np.uint8).reshape(-1)

    def unpack(self, raw: np.ndarray, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
        return ternarize_rows(self.to_float(raw, rows, cols), per_row=False)


F32 = DenseCodec("f32", 0, 4)
F16 = DenseCodec("f16", 1, 2)
BF16 = DenseCodec("bf16", 30, 2)
