"""The numpy reference provider (``cpu-reference``): always available, the executable spec.

Every other provider is tested against this one (``bitnet_core.testing``).
It favours clarity over speed: weights are unpacked to int8 codes and
matrix products run in int32 / float64 where that makes the result exact.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._version import __version__
from ..errors import ShapeError
from ..formats.absmax import quantize_act_ref
from ..hal.extra_ops import attention_window_ref, gelu_mul_ref
from ..hal.provider import Availability, RopeStyle
from ..hal.weights import TernaryWeight
from ..sdk.host_memory import lazy_zeros
from ..sdk.provider import DeviceProvider


class ReferenceWeight:
    """A ternary weight as the reference keeps it: int8 codes and per-row scales."""

    __slots__ = ("name", "codes", "scales")

    def __init__(self, name: str, codes: np.ndarray, scales: np.ndarray) -> None:
        self.name = name
        self.codes = codes
        self.scales = scales

    @property
    def shape(self) -> tuple[int, int]:
        return self.codes.shape  # type: ignore[return-value]


class ReferenceProvider(DeviceProvider):
    """Plain numpy implementations of every op of the protocol (arguments checked by
    ``DeviceProvider``)."""

    name = "cpu-reference"
    family = "cpu"
    device_kind = "cpu"
    priority = 100
    distribution = "bitnet-core"
    #: KV cache dtypes kv_store/attention accept, preferred first (the spec: float32)
    kv_dtypes = ("float32", "float16")
    #: host memory from ``empty`` (``lazy_zeros``) is committed only where it is written
    commits_on_touch = True

    def probe(self, explicit: bool = False) -> Availability:
        return Availability.yes("numpy " + np.__version__, bitnet_core=__version__)

    # --- memory -------------------------------------------------------------
    def to_device(self, array: np.ndarray) -> np.ndarray:
        return np.asarray(array)

    def to_host(self, array: Any) -> np.ndarray:
        return np.asarray(array)

    def empty(self, shape: tuple[int, ...], dtype: Any = np.float32) -> np.ndarray:
        return lazy_zeros(shape, dtype)

    def reshape(self, array: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        try:
            return np.asarray(array).reshape(shape)
        except ValueError as exc:
            raise ShapeError(f"reshape: {np.shape(array)} cannot become {shape}") from exc

    def load_ternary(self, weight: TernaryWeight) -> ReferenceWeight:
        codes, scales = weight.unpack()
        return ReferenceWeight(weight.name, codes, scales.astype(np.float32))

    # --- ops ----------------------------------------------------------------
    def embedding(self, table: np.ndarray, ids: np.ndarray) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        return np.asarray(table[ids], dtype=np.float32)

    def rmsnorm(self, x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
        x64 = np.asarray(x, dtype=np.float64)
        inv = 1.0 / np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True) + eps)
        return (x64 * inv * np.asarray(weight, dtype=np.float64)).astype(np.float32)

    def quantize_act(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return quantize_act_ref(x)

    def matmul_i2s(self, xq: np.ndarray, xscale: np.ndarray, weight: ReferenceWeight) -> np.ndarray:
        acc = xq.astype(np.int32) @ weight.codes.astype(np.int32).T
        y = acc.astype(np.float64) * weight.scales.astype(np.float64)[None, :]
        return (y / np.asarray(xscale, dtype=np.float64)[:, None]).astype(np.float32)

    def linear(self, x: np.ndarray, weight: ReferenceWeight) -> np.ndarray:
        xq, xs = self.quantize_act(x)
        return self.matmul_i2s(xq, xs, weight)

    def matmul_ternary_float(self, x: np.ndarray, weight: ReferenceWeight) -> np.ndarray:
        y = np.asarray(x, np.float64) @ weight.codes.astype(np.float64).T
        return (y * weight.scales.astype(np.float64)[None, :]).astype(np.float32)

    def matmul_dense(self, x: np.ndarray, table: np.ndarray) -> np.ndarray:
        return (np.asarray(x, np.float64) @ np.asarray(table, np.float64).T).astype(np.float32)

    def rope(
        self,
        x: np.ndarray,
        positions: np.ndarray,
        theta: float,
        style: RopeStyle,
        rot_dim: int,
    ) -> np.ndarray:
        t = x.shape[0]
        half = rot_dim // 2
        inv_freq = float(theta) ** (-np.arange(half, dtype=np.float64) * 2.0 / rot_dim)
        ang = np.asarray(positions, dtype=np.float64).reshape(t, 1) * inv_freq[None, :]
        cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        out = np.array(x, dtype=np.float64)
        if style == "neox":
            a, b = out[..., :half].copy(), out[..., half:rot_dim].copy()
            out[..., :half] = a * cos - b * sin
            out[..., half:rot_dim] = b * cos + a * sin
        else:  # "norm"
            a, b = out[..., 0:rot_dim:2].copy(), out[..., 1:rot_dim:2].copy()
            out[..., 0:rot_dim:2] = a * cos - b * sin
            out[..., 1:rot_dim:2] = b * cos + a * sin
        return out.astype(np.float32)

    def kv_store(self, cache: np.ndarray, x: np.ndarray, start: int) -> None:
        cache[start : start + x.shape[0]] = x

    def attention(
        self, q: np.ndarray, k_cache: np.ndarray, v_cache: np.ndarray, start: int
    ) -> np.ndarray:
        t, hq, d = q.shape
        hkv = k_cache.shape[1]
        n = start + t
        group = hq // hkv
        k = np.repeat(np.asarray(k_cache[:n], np.float64), group, axis=1)  # [n, hq, d]
        v = np.repeat(np.asarray(v_cache[:n], np.float64), group, axis=1)
        scores = np.einsum("thd,shd->hts", np.asarray(q, np.float64), k) / np.sqrt(d)
        pos_q = start + np.arange(t)[:, None]
        mask = np.arange(n)[None, :] > pos_q  # [t, n]
        scores = np.where(mask[None], -np.inf, scores)
        scores -= scores.max(axis=-1, keepdims=True)
        p = np.exp(scores)
        p /= p.sum(axis=-1, keepdims=True)
        return np.einsum("hts,shd->thd", p, v).astype(np.float32)

    def silu(self, x: np.ndarray) -> np.ndarray:
        x64 = np.asarray(x, np.float64)
        return (x64 / (1.0 + np.exp(-x64))).astype(np.float32)

    def relu2(self, x: np.ndarray) -> np.ndarray:
        r = np.maximum(np.asarray(x, np.float64), 0.0)
        return (r * r).astype(np.float32)

    def silu_mul(self, gate: np.ndarray, up: np.ndarray) -> np.ndarray:
        return (self.silu(gate).astype(np.float64) * up).astype(np.float32)

    def relu2_mul(self, gate: np.ndarray, up: np.ndarray) -> np.ndarray:
        return (self.relu2(gate).astype(np.float64) * up).astype(np.float32)

    def gelu_mul(self, gate: np.ndarray, up: np.ndarray) -> np.ndarray:
        """``gelu_tanh(gate) * up`` (``hal.extra_ops``: Gemma3's feed-forward)."""
        return gelu_mul_ref(gate, up)

    def attention_window(
        self, q: np.ndarray, k_cache: np.ndarray, v_cache: np.ndarray, start: int, window: int
    ) -> np.ndarray:
        """``attention`` over the last ``window`` positions (``hal.extra_ops``)."""
        return attention_window_ref(q, k_cache, v_cache, start, window)

    def add(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return (np.asarray(a, np.float32) + np.asarray(b, np.float32)).astype(np.float32)

    def mul(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return (np.asarray(a, np.float32) * np.asarray(b, np.float32)).astype(np.float32)
