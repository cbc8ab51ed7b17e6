"""TQ1_0: llama.cpp's 1.6875-bit ternary blocks (GGML type 34).

Block of 256 weights, 54 bytes: ``qs[48]``, ``qh[4]``, f16 ``d``. Trits
``t = value + 1`` in 0..2 are packed five to a byte as a base-3 fixed-point
fraction: a byte holds ``ceil(sum_k t_k * 3**(4-k) * 256 / 243)`` and trit k
is recovered as ``((uint8)(byte * 3**k) * 3) >> 8``. Weights 0..159 go to
``qs[0:32]`` (weight ``32*k + j`` is trit k of byte j), 160..239 to
``qs[32:48]`` (``160 + 16*k + j``), 240..255 to ``qh`` (``240 + 4*k + j``,
four trits, the fifth zero). Source: llama.cpp ``ggml-quants.c``
``quantize_row_tq1_0_ref`` / ``dequantize_row_tq1_0`` and gguf-py
``quants.TQ1_0``.
"""

from __future__ import annotations

import numpy as np

from .base import Codec, check_codes, row_scales, row_scales_from_blocks

QK = 256
BLOCK_BYTES = 54
_POW5 = np.array([81, 27, 9, 3, 1], dtype=np.uint16)
_POW4 = np.array([81, 27, 9, 3], dtype=np.uint16)
_MUL5 = np.array([1, 3, 9, 27, 81], dtype=np.uint8)
_MUL4 = np.array([1, 3, 9, 27], dtype=np.uint8)


def _encode(t: np.ndarray, groups: int, width: int, pows: np.ndarray) -> np.ndarray:
    """Trits ``[nb, groups*width]`` -> bytes ``[nb, width]`` (trit k of byte j: ``k*width + j``)."""
    nb = t.shape[0]
    v = (t.reshape(nb, groups, width).astype(np.uint16) * pows.reshape(1, groups, 1)).sum(axis=1)
    return ((v * 256 + 242) // 243).astype(np.uint8)


def _decode(b: np.ndarray, muls: np.ndarray) -> np.ndarray:
    """Bytes ``[nb, width]`` -> trits ``[nb, len(muls)*width]``."""
    nb, width = b.shape
    q = b.reshape(nb, 1, width) * muls.reshape(1, -1, 1)  # wraps mod 256 like uint8 in C
    return ((q.astype(np.uint16) * 3) >> 8).astype(np.int8).reshape(nb, muls.size * width)


class TQ1_0(Codec):
    name = "tq1_0"
    ggml_type = 34
    col_multiple = QK
    native_reader = True

    def nbytes(self, rows: int, cols: int) -> int:
        return rows * (cols // QK) * BLOCK_BYTES

    def pack(self, codes: np.ndarray, scales: np.ndarray | float) -> np.ndarray:
        codes = check_codes(codes, self.name)
        rows, cols = codes.shape
        self.check_shape(rows, cols)
        s = row_scales(scales, rows, self.name)
        nb = rows * (cols // QK)
        t = (codes.reshape(nb, QK) + 1).astype(np.uint8)
        qs0 = _encode(t[:, :160], 5, 32, _POW5)
        qs1 = _encode(t[:, 160:240], 5, 16, _POW5)
        qh = _encode(t[:, 240:], 4, 4, _POW4)
        live = codes.reshape(nb, QK).any(axis=1)
        d = np.where(live, np.repeat(s, cols // QK), 0).astype(np.float16)
        out = np.concatenate([qs0, qs1, qh, d.view(np.uint8).reshape(nb, 2)], axis=1)
        return out.reshape(-1)

    def unpack_numpy(self, raw: np.ndarray, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
        blocks = self.raw_bytes(raw, rows, cols).reshape(-1, BLOCK_BYTES)
        nb = blocks.shape[0]
        d = blocks[:, 52:54].copy().view(np.float16).reshape(nb).astype(np.float32)
        t = np.concatenate(
            [
                _decode(blocks[:, 0:32], _MUL5),
                _decode(blocks[:, 32:48], _MUL5),
                _decode(blocks[:, 48:52], _MUL4),
            ],
            axis=1,
        )
        codes = t - 1
        codes[d == 0] = 0
        live = codes.any(axis=1)
        scales = row_scales_from_blocks(
            d.reshape(rows, -1), live.reshape(rows, -1), f"{self.name} tensor"
        )
        return codes.reshape(rows, cols), scales
