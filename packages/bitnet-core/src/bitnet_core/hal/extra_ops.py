"""Ops of the Qwen3/Gemma3 graphs that the ``KernelProvider`` protocol does not list.

``gelu_mul`` (Gemma3's feed-forward: ``gelu_tanh(gate) * up``) and
``attention_window`` (Gemma3's local layers: ``attention`` where query ``t`` sees only
the ``window`` cache positions ``start + t - window + 1 .. start + t``). A provider may
define either as a method of the same name and signature; the generic engine calls
it then, else it runs the numpy reference below on the host (the arrays copied there
and back), recorded as a fallback in the provider's trace (so in the run's receipt; an
error under ``BITNET_STRICT_MODE``), else logged once: correct everywhere, fast where
the provider has its own.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np

log = logging.getLogger("bitnet")

#: the ops of this module, each a provider method of that name when it has one
EXTRA_OPS: tuple[str, ...] = ("gelu_mul", "attention_window")
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def gelu_mul_ref(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    """``gelu(gate) * up`` with the tanh approximation (``gelu_pytorch_tanh``), float32."""
    g = np.asarray(gate, dtype=np.float64)
    gelu = 0.5 * g * (1.0 + np.tanh(_SQRT_2_OVER_PI * (g + 0.044715 * g**3)))
    return (gelu * np.asarray(up, dtype=np.float64)).astype(np.float32)


def attention_window_ref(
    q: np.ndarray, k_cache: np.ndarray, v_cache: np.ndarray, start: int, window: int
) -> np.ndarray:
    """Causal grouped-query attention (scale ``1/sqrt(D)``) over the last ``window``
    positions of each query; ``[T, Hq, D]`` float32."""
    q = np.asarray(q, dtype=np.float64)
    t, hq, d = q.shape
    hkv = k_cache.shape[1]
    n = start + t
    lo = max(0, start - window + 1)  # the first position any query of the block sees
    group = hq // hkv
    k = np.repeat(np.asarray(k_cache[lo:n], np.float64), group, axis=1)
    v = np.repeat(np.asarray(v_cache[lo:n], np.float64), group, axis=1)
    scores = np.einsum("thd,shd->hts", q, k) / np.sqrt(d)
    pos_q = start + np.arange(t)[:, None]
    pos_k = lo + np.arange(n - lo)[None, :]
    mask = (pos_k > pos_q) | (pos_k <= pos_q - window)
    scores = np.where(mask[None], -np.inf, scores)
    scores -= scores.max(axis=-1, keepdims=True)
    w = np.exp(scores)
    w /= w.sum(axis=-1, keepdims=True)
    return np.einsum("hts,shd->thd", w, v).astype(np.float32)


_REFERENCE = {"gelu_mul": gelu_mul_ref, "attention_window": attention_window_ref}
_warned: set[tuple[int, str]] = set()


def host_ops_of(provider: Any) -> tuple[str, ...]:
    """The ops of ``EXTRA_OPS`` that ``provider`` lacks (they run on the host)."""
    return tuple(op for op in EXTRA_OPS if not callable(getattr(provider, op, None)))


def run(provider: Any, op: str, *args: Any) -> Any:
    """``provider.<op>(*args)``, or the host reference with copies (see the module)."""
    own = getattr(provider, op, None)
    if callable(own):
        return own(*args)
    reason = (
        f"{getattr(provider, 'name', type(provider).__name__)} has no {op}: "
        "it runs on the host (numpy), with copies around it"
    )
    trace = getattr(provider, "trace", None)
    if callable(getattr(trace, "fallback", None)):
        trace.fallback(reason)  # in the run's receipt; an error under BITNET_STRICT_MODE
    elif (id(provider), op) not in _warned:
        _warned.add((id(provider), op))
        log.warning("%s", reason)
    host = [provider.to_host(a) if not isinstance(a, (int, float)) else a for a in args]
    return provider.to_device(np.ascontiguousarray(_REFERENCE[op](*host)))
