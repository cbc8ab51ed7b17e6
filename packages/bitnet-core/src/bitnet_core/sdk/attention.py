"""The geometry of an ``attention`` call, worked out once for every backend's launch."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .checks import shape_of


@dataclass(frozen=True)
class AttentionShape:
    """Queries ``[tokens, heads, dim]`` against a cache of ``kv_heads``, from ``start``."""

    tokens: int
    heads: int
    kv_heads: int
    dim: int
    start: int

    @classmethod
    def of(cls, q: Any, k_cache: Any, start: int) -> AttentionShape:
        t, hq, d = shape_of(q)
        return cls(t, hq, shape_of(k_cache)[1], d, int(start))

    @property
    def keys(self) -> int:
        """Cache rows the last query sees (``start + tokens``)."""
        return self.start + self.tokens

    @property
    def scale(self) -> float:
        """``1 / sqrt(dim)``, the score scale of the contract."""
        return 1.0 / math.sqrt(self.dim)
