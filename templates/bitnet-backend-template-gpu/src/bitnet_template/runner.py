"""``TemplateRunner``: the fused Level-2 runner of a GPU backend, on ``bitnet_core.sdk.fused``.

A fused runner cuts a step's launches: each layer's q|k|v is one stacked
ternary matmul and gate|up another (``fused_layers``, with this backend's
``stack``), and the server's batched step runs the sequences that decode one
token together (``decode_together``): their matmuls are one batch, attention
runs per sequence over its own cache. The KV cache, the memory pool, prompt
chunking and ``forward_batch``'s checks are ``GenericRunner``'s.

Device arrays here are host numpy arrays, so the runner splits a stacked
matmul's output by slicing; on a device, that is a split kernel (or the
rope/KV-store kernel reading its part of the stacked output). Replace the op
calls with your device's fused kernels one at a time; ``tests/test_runner.py``
checks the runner still gives the reference engine's tokens.
"""

from __future__ import annotations

from collections.abc import Sequence as SequenceOf
from typing import Any

import numpy as np

from bitnet_core.hal.weights import TernaryWeight
from bitnet_core.sdk.fused import FusedLayer, StepItem, decode_together, fused_layers
from bitnet_core.sdk.kv_cache import Sequence
from bitnet_core.sdk.runner import GenericRunner

#: one sequence's part of a step: its cache, its first position, its token count
Part = tuple[Sequence, int, int]


def stacker(provider: Any) -> Any:
    """``stack(weights)``: one ternary weight holding ``weights``' rows in order, loaded on
    ``provider``. (A weight the registry placed keeps its file form as ``source``; a device
    that concatenates resident weights does it there instead.)"""

    def stack(weights: SequenceOf[Any]) -> Any:
        parts = [getattr(w, "source", w).unpack() for w in weights]
        codes = np.concatenate([c for c, _ in parts])
        scales = np.concatenate([s for _, s in parts])
        return provider.load_ternary(TernaryWeight.from_codes(codes, scales, name="stacked"))

    return stack


class TemplateRunner(GenericRunner):
    """The template's fused runner: stacked q|k|v and gate|up, decode steps batched."""

    def __init__(self, provider: Any, weights: Any, **opts: Any) -> None:
        super().__init__(provider, weights, **opts)
        self.layers: list[FusedLayer] = fused_layers(self.weights, stacker(provider))

    def _forward(self, ids: np.ndarray, cache: Sequence, all_logits: bool) -> np.ndarray:
        start, t = cache.length, int(ids.size)
        cache.reserve(start + t)
        x = self._layers(ids, [(cache, start, t)])
        cache.advance(t)
        if not all_logits and t > 1:
            x = self.provider.embedding(x, np.array([t - 1], dtype=np.int64))
        logits = self._head(x)
        return logits if all_logits else logits[-1]

    def _forward_batch(self, batch: list[StepItem]) -> np.ndarray:
        return decode_together(batch, self._decode, lambda ids, c: self._forward(ids, c, False))

    def _decode(self, items: list[StepItem]) -> np.ndarray:
        """One token of each sequence in ``items``, as one batch; the caches are advanced
        by ``decode_together``."""
        ids = np.concatenate([ids for ids, _ in items])
        return self._head(self._layers(ids, [(cache, cache.length, 1) for _, cache in items]))

    def _head(self, x: Any) -> np.ndarray:
        p, w = self.provider, self.weights
        x = p.rmsnorm(x, w.output_norm, self.config.rms_norm_eps)
        return np.asarray(p.to_host(p.matmul_dense(x, w.head)), dtype=np.float32)

    def _layers(self, ids: np.ndarray, parts: list[Part]) -> Any:
        """The residual stream after every layer for the tokens ``ids`` of ``parts``
        (each part's tokens consecutive in ``ids``), their K/V stored in each cache."""
        p, cfg, view = self.provider, self.config, self._reshape
        hq, hkv, d, ff = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.intermediate_size
        eps, t = cfg.rms_norm_eps, int(ids.size)
        positions = np.concatenate([np.arange(s, s + n, dtype=np.int64) for _, s, n in parts])
        bounds = np.cumsum([0] + [n for _, _, n in parts])
        x = p.embedding(self.weights.embedding, ids)
        for i, layer in enumerate(self.layers):
            qkv = p.to_host(self._lin(p.rmsnorm(x, layer.attn_norm, eps), layer.qkv))
            q = view(np.ascontiguousarray(qkv[:, : hq * d]), (t, hq, d))
            k = view(np.ascontiguousarray(qkv[:, hq * d : (hq + hkv) * d]), (t, hkv, d))
            v = view(np.ascontiguousarray(qkv[:, (hq + hkv) * d :]), (t, hkv, d))
            q = p.rope(q, positions, cfg.rope_theta, cfg.rope_style, cfg.rot_dim)
            k = p.rope(k, positions, cfg.rope_theta, cfg.rope_style, cfg.rot_dim)
            a = np.empty((t, hq, d), np.float32)
            for j, (cache, start, _) in enumerate(parts):
                rows = slice(int(bounds[j]), int(bounds[j + 1]))
                k_cache, v_cache = cache.layer(i)
                p.kv_store(k_cache, k[rows], start)
                p.kv_store(v_cache, v[rows], start)
                a[rows] = p.to_host(p.attention(q[rows], k_cache, v_cache, start))
            a = p.rmsnorm(view(a, (t, hq * d)), layer.attn_sub_norm, eps)
            x = p.add(x, self._lin(a, layer.o))
            gate_up = p.to_host(self._lin(p.rmsnorm(x, layer.ffn_norm, eps), layer.gate_up))
            f = self._ffn(
                np.ascontiguousarray(gate_up[:, :ff]), np.ascontiguousarray(gate_up[:, ff:])
            )
            x = p.add(x, self._lin(p.rmsnorm(f, layer.ffn_sub_norm, eps), layer.down))
        return x
