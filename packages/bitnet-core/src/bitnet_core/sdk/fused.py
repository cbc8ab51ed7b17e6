"""The weights of a fused decode step, the same for every runner that fuses one.

A fused runner reads a layer as its four norms and four ternary matmuls:
q|k|v stacked into one matrix and gate|up into another (one launch each
instead of three and two), o and down as they are. ``fused_layers`` builds
them from a model's ``DeviceWeights``; the runner passes its own ``stack``,
which turns a list of its ternary weights into one stacked weight on its
device.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(eq=False)
class FusedLayer:
    """One layer as a fused step reads it (arrays and weights of the runner's device)."""

    attn_norm: Any
    attn_sub_norm: Any  # None for a graph without sub-norms (architecture llama)
    ffn_norm: Any
    ffn_sub_norm: Any
    qkv: Any  # q|k|v stacked by rows
    o: Any
    gate_up: Any  # gate|up stacked by rows
    down: Any


def fused_layers(weights: Any, stack: Callable[[Sequence[Any]], Any]) -> list[FusedLayer]:
    """Every layer of ``weights`` (a ``DeviceWeights``) with q|k|v and gate|up stacked."""
    return [
        FusedLayer(
            lw.attn_norm,
            lw.attn_sub_norm,
            lw.ffn_norm,
            lw.ffn_sub_norm,
            stack([lw.q, lw.k, lw.v]),
            lw.o,
            stack([lw.gate, lw.up]),
            lw.down,
        )
        for lw in weights.layers
    ]
