"""The one table of ternary codecs: ``get_codec(name)``."""

from __future__ import annotations

from collections.abc import Callable

from ..errors import QuantizationError
from .base import Codec
from .bitnet32 import BitNet32
from .dense import BF16, F16, F32
from .i2 import I2
from .i2_s import I2_S
from .qk256 import QK256
from .tl import TL1, TL2
from .tq1_0 import TQ1_0
from .tq2_0 import TQ2_0

_FACTORIES: dict[str, Callable[[], Codec]] = {
    "tq2_0": TQ2_0,
    "tq1_0": TQ1_0,
    "i2_s": I2_S,
    "qk256": QK256,
    "bitnet32": BitNet32,
    "i2": I2,
    "tl1": TL1,
    "tl2": TL2,
    "f32": lambda: F32,
    "f16": lambda: F16,
    "bf16": lambda: BF16,
}

#: Every codec name ``get_codec`` knows.
CODEC_NAMES: tuple[str, ...] = tuple(_FACTORIES)

#: Names accepted as aliases (seed and llama.cpp spellings).
_ALIASES = {"i2s": "i2_s", "bitnet32f16": "bitnet32", "bitnet32_f16": "bitnet32"}


def get_codec(name: str) -> Codec:
    """The codec called ``name`` (case-insensitive), e.g. ``"tq2_0"``, ``"qk256"``."""
    key = str(name).lower().replace("-", "_")
    key = _ALIASES.get(key, key)
    try:
        return _FACTORIES[key]()
    except KeyError:
        raise QuantizationError(
            f"unknown ternary format {name!r}; known: {', '.join(CODEC_NAMES)}"
        ) from None
