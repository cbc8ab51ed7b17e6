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

from .tq_blocks import TernaryBlockCodec

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


class TQ1_0(TernaryBlockCodec):
    name = "tq1_0"
    ggml_type = 34
    block_bytes = BLOCK_BYTES

    def pack_blocks(self, codes: np.ndarray) -> np.ndarray:
        t = (codes + 1).astype(np.uint8)
        qs0 = _encode(t[:, :160], 5, 32, _POW5)
        qs1 = _encode(t[:, 160:240], 5, 16, _POW5)
        qh = _encode(t[:, 240:], 4, 4, _POW4)
        return np.concatenate([qs0, qs1, qh], axis=1)

    def unpack_blocks(self, data: np.ndarray) -> np.ndarray:
        t = np.concatenate(
            [
                _decode(data[:, 0:32], _MUL5),
                _decode(data[:, 32:48], _MUL5),
                _decode(data[:, 48:52], _MUL4),
            ],
            axis=1,
        )
        return t - 1
