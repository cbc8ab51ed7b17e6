"""Argument checks of the protocol's ops, written once (``DeviceProvider`` runs them).

Each check has the op's signature (without ``self``) and looks only at shapes,
which every device array type exposes (``.shape``; a resident ternary weight:
``.shape`` or ``.rows``/``.cols``). A failed check raises the error the
conformance kit expects, before the provider's own code runs. Numbers inside
device arrays (token ids are host numpy by contract) are the one exception.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import ShapeError, UnsupportedOperationError

ROPE_STYLES = ("neox", "norm")


def shape_of(a: Any) -> tuple[int, ...]:
    """The logical shape of a host or device array, or of a resident ternary weight."""
    shape = getattr(a, "shape", None)
    if type(shape) is tuple:  # numpy, CuPy and the backends' arrays: the fast path
        return shape
    if shape is None and hasattr(a, "rows") and hasattr(a, "cols"):
        return (int(a.rows), int(a.cols))
    return tuple(int(s) for s in (np.shape(a) if shape is None else shape))


def _weight(op: str, weight: Any) -> tuple[int, ...]:
    shape = shape_of(weight)
    if len(shape) != 2:
        raise ShapeError(f"{op}: weight must be a 2-D ternary weight, got {type(weight).__name__}")
    return shape


def reshape(array: Any, shape: Any) -> None:
    old = shape_of(array)
    new = (int(shape),) if np.isscalar(shape) else tuple(int(s) for s in shape)
    if -1 not in new and math.prod(new) != math.prod(old):
        raise ShapeError(f"reshape: {old} cannot become {new}")


def embedding(table: Any, ids: Any) -> None:
    shape = shape_of(table)
    if len(shape) != 2:
        raise UnsupportedOperationError(f"embedding: the table must be 2-D, got {shape}")
    if isinstance(ids, np.ndarray | list | tuple | int | np.integer):
        flat = np.asarray(ids).reshape(-1)
        if flat.size and (flat.min() < 0 or flat.max() >= shape[0]):
            raise ShapeError(f"token id out of range [0, {shape[0]})")


def rmsnorm(x: Any, weight: Any, eps: float) -> None:
    xs, ws = shape_of(x), shape_of(weight)
    if not xs or math.prod(ws) != xs[-1]:
        raise ShapeError(f"rmsnorm: weight {ws} does not match activations {xs}")


def quantize_act(x: Any) -> None:
    shape = shape_of(x)
    if len(shape) != 2:
        raise ShapeError(f"quantize_act expects [T, K] activations, got shape {shape}")


def matmul_i2s(xq: Any, xscale: Any, weight: Any) -> None:
    xs, ws = shape_of(xq), _weight("matmul_i2s", weight)
    if len(xs) != 2 or xs[1] != ws[1]:
        raise ShapeError(f"matmul_i2s: activations {xs} do not match weight {ws}")
    if math.prod(shape_of(xscale)) != xs[0]:
        raise ShapeError(f"matmul_i2s: scales {shape_of(xscale)} do not match activations {xs}")


def linear(x: Any, weight: Any) -> None:
    xs, ws = shape_of(x), _weight("linear", weight)
    if len(xs) != 2 or xs[1] != ws[1]:
        raise ShapeError(f"linear: activations {xs} do not match weight {ws}")


def matmul_ternary_float(x: Any, weight: Any) -> None:
    xs, ws = shape_of(x), _weight("matmul", weight)
    if len(xs) != 2 or xs[1] != ws[1]:
        raise ShapeError(f"matmul: activations {xs} do not match weight {ws}")


def matmul_dense(x: Any, table: Any) -> None:
    xs, ts = shape_of(x), shape_of(table)
    if len(xs) != 2 or len(ts) != 2 or xs[1] != ts[1]:
        raise ShapeError(f"matmul_dense: {xs} does not match table {ts}")


def rope(x: Any, positions: Any, theta: float, style: str, rot_dim: int) -> None:
    shape = shape_of(x)
    if len(shape) != 3:
        raise ShapeError(f"rope expects [T, H, D], got shape {shape}")
    t, _, d = shape
    if rot_dim > d or rot_dim % 2 or rot_dim < 0:
        raise ShapeError(f"rope: rot_dim {rot_dim} must be even and <= head dim {d}")
    if style not in ROPE_STYLES:
        raise UnsupportedOperationError(f"unknown rope style {style!r}")
    n = math.prod(shape_of(positions))
    if n != t:
        raise ShapeError(f"rope: {n} positions for {t} tokens")


def kv_store(cache: Any, x: Any, start: int) -> None:
    cs, xs = shape_of(cache), shape_of(x)
    t = xs[0] if xs else 0
    if start < 0 or start + t > cs[0] or xs[1:] != cs[1:]:
        raise ShapeError(f"kv_store: {xs} at {start} does not fit cache {cs}")


def attention(q: Any, k_cache: Any, v_cache: Any, start: int) -> None:
    qs, ks, vs = shape_of(q), shape_of(k_cache), shape_of(v_cache)
    if len(qs) != 3 or len(ks) != 3 or vs != ks:
        raise ShapeError(f"attention: q {qs} vs caches {ks} / {vs}")
    t, hq, d = qs
    hkv = ks[1]
    if hkv == 0 or hq % hkv or ks[2] != d or start < 0 or start + t > ks[0]:
        raise ShapeError(f"attention: q {qs} vs cache {ks} at {start}")


def same_shape(op: str) -> Callable[[Any, Any], None]:
    """The check of a gated activation (``silu_mul``): both inputs have one shape."""

    def check(gate: Any, up: Any) -> None:
        a, b = shape_of(gate), shape_of(up)
        if a != b:
            raise ShapeError(f"{op}: shapes {a} and {b} do not match")

    return check


def broadcast(op: str) -> Callable[[Any, Any], None]:
    """The check of ``add``/``mul``: ``b`` equals ``a`` or broadcasts over its leading dims."""

    def check(a: Any, b: Any) -> None:
        sa, sb = shape_of(a), shape_of(b)
        if sa == sb:
            return
        try:
            full = np.broadcast_shapes(sa, sb)
        except ValueError:
            raise ShapeError(f"{op}: shapes {sa} and {sb} do not broadcast") from None
        if full not in (sa, sb):
            raise ShapeError(f"{op}: shapes {sa} and {sb} do not broadcast to either")

    return check


#: op name -> its check, for ``DeviceProvider`` to run before the op.
CHECKS: dict[str, Callable[..., None]] = {
    "reshape": reshape,
    "embedding": embedding,
    "rmsnorm": rmsnorm,
    "quantize_act": quantize_act,
    "matmul_i2s": matmul_i2s,
    "linear": linear,
    "matmul_ternary_float": matmul_ternary_float,
    "matmul_dense": matmul_dense,
    "rope": rope,
    "kv_store": kv_store,
    "attention": attention,
    "silu_mul": same_shape("silu_mul"),
    "relu2_mul": same_shape("relu2_mul"),
    "add": broadcast("add"),
    "mul": broadcast("mul"),
}
