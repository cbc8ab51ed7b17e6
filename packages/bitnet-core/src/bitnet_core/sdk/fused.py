"""The weights of a fused decode step, the same for every runner that fuses one.

A fused runner reads a layer as its four norms and four ternary matmuls:
q|k|v stacked into one matrix and gate|up into another (one launch each
instead of three and two), o and down as they are. ``fused_layers`` builds
them from a model's ``DeviceWeights``; the runner passes its own ``stack``,
which turns a list of its ternary weights into one stacked weight on its
device. ``fused_graph_supported`` says whether a model's graph is the one the
fused kernels compute; ``decode_together`` is the shape of a fused runner's
batched step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import UnsupportedOperationError


def fused_graph_supported(provider: Any, weights: Any) -> bool:
    """Whether the fused kernels compute this model's graph: BitNet's two sub-norms a
    layer and no input RMSNorm on each BitLinear. Otherwise the provider's
    ``make_runner`` returns None and the generic engine runs the model, visibly (a
    trace fallback: in the receipt, an error under ``BITNET_STRICT_MODE``)."""
    cfg = weights.config
    if cfg.sub_norms and not cfg.linear_norms:
        return True
    from ..sdk.runner import generic_engine_fallback

    what = "BitLinear input norms" if cfg.linear_norms else "no sub-norms"
    generic_engine_fallback(
        provider,
        f"{provider.name}: the fused kernels need BitNet's sub-norms and no BitLinear input "
        f"norms, this model has {what} ({cfg.arch} graph); the generic engine runs it",
    )
    return False


@dataclass(eq=False)
class FusedLayer:
    """One layer as a fused step reads it (arrays and weights of the runner's device)."""

    attn_norm: Any
    attn_sub_norm: Any
    ffn_norm: Any
    ffn_sub_norm: Any
    qkv: Any  # q|k|v stacked by rows
    o: Any
    gate_up: Any  # gate|up stacked by rows
    down: Any


def fused_layers(weights: Any, stack: Callable[[Sequence[Any]], Any]) -> list[FusedLayer]:
    """Every layer of ``weights`` (a ``DeviceWeights``) with q|k|v and gate|up stacked;
    ``UnsupportedOperationError`` for a graph the fused kernels do not compute (a runner
    made directly, past ``fused_graph_supported``)."""
    if any(
        lw.in_norms or lw.attn_sub_norm is None or lw.ffn_sub_norm is None for lw in weights.layers
    ):
        raise UnsupportedOperationError(
            "the fused kernels compute BitNet's graph (two sub-norms a layer, no BitLinear "
            "input norms), not this model's: run it on GenericRunner"
        )
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


#: one item of a batched step: the token ids a sequence brings, and its KV-cache sequence
StepItem = tuple[np.ndarray, Any]


def decode_together(
    batch: Sequence[StepItem],
    decode: Callable[[list[StepItem]], np.ndarray],
    prefill: Callable[[np.ndarray, Any], np.ndarray],
    min_decode: int = 2,
) -> np.ndarray:
    """A fused runner's ``_forward_batch``: the sequences that bring one token each go
    through ``decode`` together (its logits ``[n, vocab]``; their caches are advanced
    here), when there are at least ``min_decode`` of them; every other sequence runs
    ``prefill(ids, cache)``, which returns its last token's logits. Rows in the batch's
    order."""
    rows: list[np.ndarray | None] = [None] * len(batch)
    decoding = [j for j, (ids, _) in enumerate(batch) if ids.size == 1]
    if len(decoding) >= min_decode:
        items = [batch[j] for j in decoding]
        for (_, cache), j, row in zip(items, decoding, decode(items), strict=True):
            cache.advance(1)
            rows[j] = row
    for j, (ids, cache) in enumerate(batch):
        if rows[j] is None:
            rows[j] = prefill(ids, cache)
    return np.stack(rows)
