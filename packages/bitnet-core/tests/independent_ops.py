"""The protocol's numeric ops written a second time, from their formulas, for the core kit run.

The conformance kit compares a provider with ``ReferenceProvider``; run on the
reference provider itself that proves nothing. ``IndependentOps`` takes the
reference's place as the kit's expectation in ``test_conformance.py``: the same
mathematics in other forms (a row loop with a norm, rotation by complex
numbers, a per-head loop of softmax, ``tanh`` for the logistic function), so a
fault in one is not repeated in the other. Memory ops and ``load_ternary`` are
the reference's (they move data, they compute nothing).
"""

from __future__ import annotations

import math

import numpy as np

from bitnet_core.providers.reference import ReferenceProvider


class IndependentOps(ReferenceProvider):
    """Float64 formulas of each numeric op, written apart from ``ReferenceProvider``."""

    def embedding(self, table, ids):  # type: ignore[no-untyped-def]
        rows = [np.array(table[int(i)], dtype=np.float32) for i in np.ravel(ids)]
        return np.stack(rows) if rows else np.zeros((0, table.shape[1]), np.float32)

    def rmsnorm(self, x, weight, eps):  # type: ignore[no-untyped-def]
        x = np.asarray(x, np.float64)
        flat = x.reshape(-1, x.shape[-1])
        d = flat.shape[1]
        w = np.asarray(weight, np.float64)
        out = [row / math.sqrt(float(np.dot(row, row)) / d + eps) * w for row in flat]
        return np.array(out, np.float32).reshape(x.shape)

    def quantize_act(self, x):  # type: ignore[no-untyped-def]
        x = np.asarray(x, np.float32)
        codes = np.empty(x.shape, np.int8)
        scales = np.empty(x.shape[0], np.float32)
        for i, row in enumerate(x):
            peak = max(float(np.max(np.abs(row), initial=0.0)), 1e-5)
            scales[i] = np.float32(127.0) / np.float32(peak)
            codes[i] = np.clip(np.rint(row * scales[i]), -128, 127)
        return codes, scales

    def matmul_i2s(self, xq, xscale, weight):  # type: ignore[no-untyped-def]
        acc = np.einsum("tk,nk->tn", np.asarray(xq, np.int64), weight.codes.astype(np.int64))
        per = weight.scales.astype(np.float64)[None, :] / np.asarray(xscale, np.float64)[:, None]
        return (acc * per).astype(np.float32)

    def linear(self, x, weight):  # type: ignore[no-untyped-def]
        return self.matmul_i2s(*self.quantize_act(x), weight)

    def matmul_ternary_float(self, x, weight):  # type: ignore[no-untyped-def]
        dense = weight.codes.astype(np.float64) * weight.scales.astype(np.float64)[:, None]
        return np.einsum("tk,nk->tn", np.asarray(x, np.float64), dense).astype(np.float32)

    def matmul_dense(self, x, table):  # type: ignore[no-untyped-def]
        x, table = np.asarray(x, np.float64), np.asarray(table, np.float64)
        return np.einsum("tk,nk->tn", x, table).astype(np.float32)

    def rope(self, x, positions, theta, style, rot_dim):  # type: ignore[no-untyped-def]
        out = np.array(x, np.complex128)  # real parts; pairs rotate as complex numbers
        half = rot_dim // 2
        if style == "neox":
            first, second = np.arange(half), np.arange(half) + half
        else:
            first, second = np.arange(0, rot_dim, 2), np.arange(1, rot_dim, 2)
        freq = np.array([float(theta) ** (-2.0 * i / rot_dim) for i in range(half)])
        turn = np.exp(1j * np.outer(np.asarray(positions, np.float64), freq))[:, None, :]
        z = (out[..., first] + 1j * out[..., second]) * turn
        result = np.array(x, np.float64)
        result[..., first], result[..., second] = z.real, z.imag
        return result.astype(np.float32)

    def attention(self, q, k_cache, v_cache, start):  # type: ignore[no-untyped-def]
        t, hq, d = q.shape
        group = hq // k_cache.shape[1]
        out = np.zeros((t, hq, d))
        for i in range(t):
            seen = start + i + 1  # causal: keys 0..start+i
            for h in range(hq):
                k = np.asarray(k_cache[:seen, h // group], np.float64)
                v = np.asarray(v_cache[:seen, h // group], np.float64)
                s = k @ np.asarray(q[i, h], np.float64) / math.sqrt(d)
                e = np.exp(s - s.max())
                out[i, h] = (e / e.sum()) @ v
        return out.astype(np.float32)

    def silu(self, x):  # type: ignore[no-untyped-def]
        x = np.asarray(x, np.float64)
        return (0.5 * x * (1.0 + np.tanh(0.5 * x))).astype(np.float32)  # x * logistic(x)

    def relu2(self, x):  # type: ignore[no-untyped-def]
        x = np.asarray(x, np.float64)
        return np.where(x > 0, x * x, 0.0).astype(np.float32)

    def silu_mul(self, gate, up):  # type: ignore[no-untyped-def]
        g = np.asarray(gate, np.float64)
        return (0.5 * g * (1.0 + np.tanh(0.5 * g)) * np.asarray(up, np.float64)).astype(np.float32)

    def relu2_mul(self, gate, up):  # type: ignore[no-untyped-def]
        g = np.asarray(gate, np.float64)
        return (np.where(g > 0, g * g, 0.0) * np.asarray(up, np.float64)).astype(np.float32)

    def add(self, a, b):  # type: ignore[no-untyped-def]
        return np.add(a, b, dtype=np.float32)

    def mul(self, a, b):  # type: ignore[no-untyped-def]
        return np.multiply(a, b, dtype=np.float32)
