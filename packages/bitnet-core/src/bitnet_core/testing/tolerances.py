"""How close a provider's result must be to the reference's, op by op.

Every comparison is elementwise: ``|got - want| <= bound`` where, unless an op
builds its own bound (see below), ``bound = atol * max|want| + rtol * |want|``
(``atol`` is relative to the largest magnitude of the expected output, so a
tolerance means the same for tiny and huge values). A NaN or infinity where
the reference is finite always fails: it is how unwritten elements of a
NaN-poisoned buffer show up.

==========================  ================================================
op                          tolerance
==========================  ================================================
to_device / to_host         exact (values, shape, dtype kind)
embedding                   exact for float16 tables; float32 tables may be
                            stored as float16: rtol 2**-11
rmsnorm                     rtol 2e-5, atol 1e-6
quantize_act                scale: rtol 1e-6; codes: exact, except a code may
                            be off by one where ``x * scale`` lies within
                            1e-4 of a half-integer (float rounding of the
                            product decides the side); exact ties
                            (``x * scale`` exactly k + 0.5) must round half
                            to even
matmul_i2s                  rtol 1e-6, atol 0: integer accumulation is exact,
                            only the final float scaling may round
linear                      as matmul_i2s, plus ``scales[n] / s[t]`` for every
                            activation code quantize_act may place either
                            side of a tie
matmul_ternary_float        1e-5 * sum_k |x[t,k] * w[n,k]| (any float32
                            summation order passes; one missing term fails)
matmul_dense                1e-5 * sum_k |x * table| for float16 tables,
                            1e-3 * sum_k |x * table| for float32 tables (may
                            be stored as float16)
rope                        atol (1e-5 + 2.5e-7 * max position) relative to
                            max|x| (float32 angles); the dimensions past
                            rot_dim exactly unchanged
kv_store                    exact; cache rows outside ``[start, start + T)``
                            untouched (still NaN)
attention                   rtol 1e-4, atol 2e-5
silu, silu_mul              rtol 1e-5, atol 1e-6
relu2, relu2_mul            rtol 1e-6, atol 0
add, mul                    exact (one IEEE float32 operation)
load_ternary                a weight in each file format of
                            ``bitnet_core.formats`` through matmul_i2s: as
                            matmul_i2s
reshape                     exact: a view of the same values
whole model (``model.py``)  logits within 1e-2 * max|logits|; greedy tokens
                            identical up to a reference tie
==========================  ================================================
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


class ConformanceFailure(AssertionError):
    """A provider's result differs from the reference by more than the op's tolerance."""


@dataclass(frozen=True)
class Tolerance:
    """``|got - want| <= atol * max|want| + rtol * |want|``."""

    rtol: float
    atol: float

    def bound(self, want: np.ndarray) -> np.ndarray:
        w = np.abs(np.asarray(want, dtype=np.float64))
        scale = float(w.max()) if w.size else 0.0
        return self.atol * scale + self.rtol * w


EXACT = Tolerance(0.0, 0.0)

#: Tolerances of the ops whose bound is the plain ``Tolerance`` form.
TOLERANCES: dict[str, Tolerance] = {
    "to_device": EXACT,
    "embedding_f16": EXACT,
    "embedding_f32": Tolerance(2.0**-11, 0.0),
    "rmsnorm": Tolerance(2e-5, 1e-6),
    "quantize_act_scale": Tolerance(1e-6, 0.0),
    "matmul_i2s": Tolerance(1e-6, 0.0),
    "kv_store": EXACT,
    "attention": Tolerance(1e-4, 2e-5),
    "silu": Tolerance(1e-5, 1e-6),
    "silu_mul": Tolerance(1e-5, 1e-6),
    "relu2": Tolerance(1e-6, 0.0),
    "relu2_mul": Tolerance(1e-6, 0.0),
    "add": EXACT,
    "mul": EXACT,
}

#: Relative bound on float32 dot products, times sum_k |x_k * w_k|.
DOT_RTOL = 1e-5
#: The same for float32 dense tables, which a provider may keep as float16.
DOT_RTOL_F16_STORAGE = 1e-3
#: ``x * scale`` this close to a half-integer may round to either neighbour.
QUANT_TIE_WINDOW = 1e-4


def rope_atol(max_position: int) -> float:
    """Rope's bound relative to max|x|: float32 angles lose ~ulp(pos * freq)."""
    return 1e-5 + 2.5e-7 * max_position


def assert_close(
    what: str,
    got: object,
    want: np.ndarray,
    *,
    tol: Tolerance | None = None,
    bound: np.ndarray | None = None,
) -> None:
    """Fail with a readable message unless ``got`` matches ``want`` within the bound."""
    want = np.asarray(want)
    got = np.asarray(got)
    if got.shape != want.shape:
        raise ConformanceFailure(f"{what}: shape {got.shape}, expected {want.shape}")
    g = got.astype(np.float64)
    w = want.astype(np.float64)
    if bound is None:
        bound = (tol or EXACT).bound(w)
    bound = np.broadcast_to(np.asarray(bound, dtype=np.float64), w.shape)
    finite = np.isfinite(w)
    broken = finite & ~np.isfinite(g)
    if broken.any():
        idx = tuple(int(i) for i in np.argwhere(broken)[0])
        raise ConformanceFailure(
            f"{what}: {int(broken.sum())} of {w.size} elements are NaN/inf where the reference "
            f"is finite (unwritten output?), first at {idx}: got {g[idx]}, expected {w[idx]}"
        )
    # Infinities and NaNs of the reference must be reproduced as such.
    special = ~finite & ~((np.isnan(w) & np.isnan(g)) | (w == g))
    err = np.where(finite, np.abs(g - w), 0.0)
    bad = (err > bound) | special
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        ratio = np.where(bound > 0, err / np.maximum(bound, 1e-300), np.where(err > 0, np.inf, 0))
        raise ConformanceFailure(
            f"{what}: {int(bad.sum())} of {w.size} elements out of tolerance; first at {idx}: "
            f"got {g[idx]!r}, expected {w[idx]!r} (error {err[idx]:.3g}, bound {bound[idx]:.3g}); "
            f"worst error/bound {float(ratio.max()):.3g}"
        )


def dot_bound(x: np.ndarray, w: np.ndarray, rtol: float = DOT_RTOL) -> np.ndarray:
    """``rtol * (|x| @ |w|.T)``: the bound for a float dot product ``x @ w.T``."""
    return rtol * (np.abs(x.astype(np.float64)) @ np.abs(w.astype(np.float64)).T)


def quant_ties(x: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """Where ``x * scale`` lies within ``QUANT_TIE_WINDOW`` of a half-integer (bool [T, K])."""
    v = np.abs(x.astype(np.float64) * scale.astype(np.float64)[:, None])
    return np.abs(v - np.floor(v) - 0.5) <= QUANT_TIE_WINDOW
