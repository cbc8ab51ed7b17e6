"""transformers' packed BitNet weights (``quantization_config.quant_method == "bitnet"``).

From ``transformers/integrations/bitnet.py``: a ``BitLinear`` keeps ``weight`` as
uint8 ``[out/4, in]``, value ``v`` of output row ``r`` stored as ``v + 1`` in
bits ``2k..2k+1`` of packed row ``r mod (out/4)`` with ``k = r // (out/4)``, and
one ``weight_scale``; the layer computes ``(x @ codes.T) / weight_scale``, so the
ternary scale is ``1 / weight_scale``.
"""

from __future__ import annotations

import numpy as np

from ..errors import QuantizationError

VALUES_PER_BYTE = 4


def unpack_bitnet_weight(packed: np.ndarray, rows: int, name: str = "weight") -> np.ndarray:
    """int8 codes ``[rows, cols]`` of a packed ``[rows/4, cols]`` uint8 weight."""
    packed = np.asarray(packed)
    if packed.dtype != np.uint8 or packed.ndim != 2:
        raise QuantizationError(
            f"{name}: expected a 2-D uint8 packed weight, got {packed.dtype} {packed.shape}"
        )
    r = packed.shape[0]
    if r * VALUES_PER_BYTE != rows:
        raise QuantizationError(f"{name}: {r} packed rows do not hold {rows} output rows")
    parts = [((packed >> (2 * k)) & 3).astype(np.int8) - 1 for k in range(VALUES_PER_BYTE)]
    codes = np.concatenate(parts, axis=0)
    if (codes > 1).any():
        raise QuantizationError(f"{name}: packed weight holds the invalid 2-bit code 3")
    return codes


def bitnet_scale(weight_scale: np.ndarray, name: str = "weight") -> float:
    """The ternary scale of a packed layer: ``1 / weight_scale``."""
    ws = np.asarray(weight_scale, dtype=np.float64).reshape(-1)
    if ws.size != 1 or not np.isfinite(ws[0]) or ws[0] <= 0:
        raise QuantizationError(f"{name}: weight_scale must be one positive number, got {ws[:4]}")
    return float(1.0 / ws[0])
