"""GGML tensor types: names and byte sizes, from gguf-py plus bitnet.cpp's I2_S.

gguf-py's ``GGMLQuantizationType`` / ``GGML_QUANT_SIZES`` cover llama.cpp's
types. bitnet.cpp's ggml fork adds ``I2_S = 36`` (and ``I8_S = 37``,
``TL1 = 38``, ``TL2 = 39``, kernel-specific layouts bitnet does not read); the
size of a type-36 tensor is not ``elements * type_size`` but depends on the
flavour (I2_S, QK256, BitNet32-F16), resolved by ``ModelFile`` from the bytes
the file gives the tensor.
"""

from __future__ import annotations

from .gguf_constants import GGML_QUANT_SIZES, GGMLQuantizationType

#: bitnet.cpp's I2_S type id (its ggml fork, ``ggml.h``).
GGML_TYPE_I2_S = 36
#: Type ids bitnet.cpp's fork gives its kernel layouts that bitnet cannot read.
BITNET_CPP_UNSUPPORTED = {37: "I8_S", 38: "TL1", 39: "TL2"}


def type_name(type_id: int) -> str:
    """Human name of a GGML type id (``"TQ2_0"``, ``"I2_S"``, ``"type 99"``)."""
    if type_id == GGML_TYPE_I2_S:
        return "I2_S"
    if type_id in BITNET_CPP_UNSUPPORTED:
        return BITNET_CPP_UNSUPPORTED[type_id]
    try:
        return GGMLQuantizationType(type_id).name
    except ValueError:
        return f"type {type_id}"


def block_sizes(type_id: int) -> tuple[int, int] | None:
    """``(block elements, block bytes)`` of a gguf-py type, None if gguf-py does not know it."""
    try:
        return GGML_QUANT_SIZES[GGMLQuantizationType(type_id)]
    except (ValueError, KeyError):
        return None
