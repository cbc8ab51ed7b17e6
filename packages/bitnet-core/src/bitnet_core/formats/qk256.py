"""QK256 ("GgmlQk256NoScale"): the seeds' 256-weight 2-bit blocks with no inline scale.

Each row is padded with zeros to a multiple of 256 weights; a block is 64
bytes, byte ``i`` holding weights ``4i .. 4i+3`` in bits ``0-1, 2-3, 4-5, 6-7``
(BitNet-rs ``crates/bitnet-models/src/quant/i2s_qk256.rs``,
``unpack_qk256_block``). Codes are ``value + 1`` (0 -> -1, 1 -> 0, 2 -> +1) as in
bitnet.cpp's I2_S; BitNet-rs's draft table ``{-2, -1, +1, +2}`` is not ternary
and is not followed (docs/FORMATS.md). The scale lives outside the data: in
a GGUF file it is the companion tensor ``<name>.scale`` (one value, or one per
row), which the reader binds with :meth:`QK256.with_scales`; the file stores
the data with GGML type 36 and the reader tells it from I2_S by its byte size
(``rows * ceil(cols/256) * 64``), as the seeds' ``I2SFlavor::detect`` does.
"""

from __future__ import annotations

import numpy as np

from ..errors import QuantizationError
from .base import Codec, check_codes, pad_cols, row_scales

QK = 256
BLOCK_BYTES = 64
_SHIFTS = np.array([0, 2, 4, 6], dtype=np.uint8)


def pack_lsb_first(codes: np.ndarray) -> np.ndarray:
    """Codes ``[rows, 4k]`` -> bytes ``[rows, k]``, column ``4j+i`` in bits ``2i``."""
    q = (codes.astype(np.int16) + 1).astype(np.uint8)
    q = q.reshape(q.shape[0], -1, 4) << _SHIFTS
    return q[..., 0] | q[..., 1] | q[..., 2] | q[..., 3]


def unpack_lsb_first(packed: np.ndarray, what: str) -> np.ndarray:
    """Inverse of :func:`pack_lsb_first`; rejects code 3."""
    q = (packed[..., None] >> _SHIFTS) & 3
    if (q == 3).any():
        raise QuantizationError(f"{what}: invalid 2-bit code 3 in packed data")
    return (q.astype(np.int8) - 1).reshape(packed.shape[0], -1)


class QK256(Codec):
    name = "qk256"
    ggml_type = 36  # shares the I2_S id; told apart by size
    needs_scale_tensor = True

    def __init__(self, scales: np.ndarray | float | None = None) -> None:
        self.scales = None if scales is None else np.asarray(scales, dtype=np.float32)

    def with_scales(self, scales: np.ndarray | float) -> QK256:
        """This codec with its scales (one, or one per row) bound."""
        return QK256(scales)

    def nbytes(self, rows: int, cols: int) -> int:
        return rows * (-(-cols // QK)) * BLOCK_BYTES

    def pack(self, codes: np.ndarray, scales: np.ndarray | float = 1.0) -> np.ndarray:
        """The packed codes only: store ``scales`` in the companion tensor."""
        codes = check_codes(codes, self.name)
        row_scales(scales, codes.shape[0], self.name)  # validated, stored elsewhere
        return pack_lsb_first(pad_cols(codes, QK)).reshape(-1)

    def unpack(self, raw: np.ndarray, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
        data = self.raw_bytes(raw, rows, cols).reshape(rows, -1)
        codes = unpack_lsb_first(data, self.name)[:, :cols]
        if self.scales is None:
            raise QuantizationError(
                f"{self.name}: no scales bound (the file needs a companion '.scale' tensor)"
            )
        return np.ascontiguousarray(codes), row_scales(self.scales, rows, self.name)
