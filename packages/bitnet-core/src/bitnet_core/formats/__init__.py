"""Ternary weight formats: codecs, quantizers and the absmean rule.

- ``get_codec(name)``: pack/unpack of one layout (``tq2_0``, ``tq1_0``, ``i2_s``,
  ``qk256``, ``bitnet32``, ``i2``, ``tl1``, ``tl2``, and ``f32``/``f16``/``bf16``
  quantized with absmean when unpacked). Layouts and sources: docs/FORMATS.md.
- ``quantize(x, qtype)``: seed 003's I2S / TL1 / TL2 quantizers.
- ``absmean_ternary(w)``: BitNet b1.58's weight rule; ``quantize_activations``:
  the per-token int8 activation rule (``absmax.py``; the reference provider's
  ``quantize_act``).
"""

from .absmean import absmean_ternary, ternarize_rows
from .base import Codec
from .quantize import QTYPES, QuantizedTensor, quantize, quantize_activations
from .registry import CODEC_NAMES, get_codec

__all__ = [
    "CODEC_NAMES",
    "QTYPES",
    "Codec",
    "QuantizedTensor",
    "absmean_ternary",
    "get_codec",
    "quantize",
    "quantize_activations",
    "ternarize_rows",
]
