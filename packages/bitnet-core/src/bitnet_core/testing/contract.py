"""Probe and error-path checks: what a provider promises besides numbers.

- ``probe`` returns an ``Availability`` in both modes and never raises;
- the class attributes (``name``, ``family``, ``device_kind``, ``priority``)
  are well formed and every op of ``KERNEL_INVENTORY`` is a method;
- bad shapes and out-of-range arguments raise an error of
  ``bitnet_core.errors`` (any ``BitnetError``: the CLI turns it into a clear
  message and exit code), never an ``IndexError`` from a kernel, a crash or a
  silently wrong answer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import BitnetError
from ..hal.provider import KERNEL_INVENTORY, Availability
from ..hal.weights import TernaryWeight
from .ops import upload
from .tolerances import ConformanceFailure


def check_probe(p: Any) -> None:
    for explicit in (False, True):
        try:
            result = p.probe(explicit=explicit)
        except Exception as exc:
            raise ConformanceFailure(
                f"probe(explicit={explicit}) raised {type(exc).__name__}: {exc}; "
                "it must return Availability.no(reason) instead"
            ) from exc
        if not isinstance(result, Availability):
            raise ConformanceFailure(
                f"probe(explicit={explicit}) returned {type(result).__name__}, not Availability"
            )
        if result.available and not result.device:
            raise ConformanceFailure("an available probe must name its device")
        if not result.available and not result.reason:
            raise ConformanceFailure("an unavailable probe must give its reason")


def check_attributes(p: Any) -> None:
    for attr, kind in (("name", str), ("family", str), ("device_kind", str), ("priority", int)):
        value = getattr(p, attr, None)
        if not isinstance(value, kind) or (kind is str and not value):
            raise ConformanceFailure(f"provider.{attr} must be a non-empty {kind.__name__}")
    if p.device_kind not in ("cpu", "gpu"):
        raise ConformanceFailure(f"device_kind {p.device_kind!r} is neither 'cpu' nor 'gpu'")
    missing = [op for op in ("probe", *KERNEL_INVENTORY) if not callable(getattr(p, op, None))]
    if missing:
        raise ConformanceFailure(f"provider lacks the ops {', '.join(missing)}")


@dataclass(frozen=True)
class ErrorCase:
    """A call with bad arguments that must raise a ``BitnetError``."""

    id: str
    call: Callable[[Any], object] = field(repr=False)

    def run(self, p: Any) -> None:
        try:
            result = self.call(p)
        except BitnetError:
            return
        except Exception as exc:
            raise ConformanceFailure(
                f"{self.id}: raised {type(exc).__name__}: {exc}; expected a "
                "bitnet_core.errors error (ShapeError for bad shapes)"
            ) from exc
        raise ConformanceFailure(f"{self.id}: returned {type(result).__name__} instead of raising")


def _weight(rows: int, cols: int) -> TernaryWeight:
    codes = (np.arange(rows * cols).reshape(rows, cols) % 3 - 1).astype(np.int8)
    return TernaryWeight.from_codes(codes, 1.0)


def _f32(*shape: int) -> np.ndarray:
    return np.ones(shape, dtype=np.float32)


def _cache(p: Any, *shape: int) -> Any:
    return upload(p, np.zeros(shape, dtype=np.float32))


def error_cases() -> list[ErrorCase]:
    def q(p, t, k):
        return upload(p, np.ones((t, k), np.int8)), upload(p, np.ones(t, np.float32))

    return [
        ErrorCase("matmul_i2s-K-mismatch", lambda p: p.matmul_i2s(*q(p, 2, 5), p.load_ternary(_weight(3, 6)))),
        ErrorCase("linear-K-mismatch", lambda p: p.linear(upload(p, _f32(2, 7)), p.load_ternary(_weight(3, 6)))),
        ErrorCase("matmul_ternary_float-K-mismatch", lambda p: p.matmul_ternary_float(upload(p, _f32(1, 9)), p.load_ternary(_weight(4, 8)))),
        ErrorCase("matmul_dense-K-mismatch", lambda p: p.matmul_dense(upload(p, _f32(2, 3)), upload(p, _f32(5, 4)))),
        ErrorCase("quantize_act-1d", lambda p: p.quantize_act(upload(p, _f32(8)))),
        ErrorCase("embedding-id-too-large", lambda p: p.embedding(upload(p, _f32(5, 3)), np.array([0, 5]))),
        ErrorCase("embedding-id-negative", lambda p: p.embedding(upload(p, _f32(5, 3)), np.array([-1]))),
        ErrorCase("rope-odd-rot_dim", lambda p: p.rope(upload(p, _f32(2, 1, 8)), np.arange(2), 1e4, "neox", 3)),
        ErrorCase("rope-rot_dim-past-head", lambda p: p.rope(upload(p, _f32(2, 1, 8)), np.arange(2), 1e4, "neox", 10)),
        ErrorCase("rope-2d-input", lambda p: p.rope(upload(p, _f32(2, 8)), np.arange(2), 1e4, "neox", 8)),
        ErrorCase("rope-unknown-style", lambda p: p.rope(upload(p, _f32(2, 1, 8)), np.arange(2), 1e4, "gptj", 8)),
        ErrorCase("kv_store-overflow", lambda p: p.kv_store(_cache(p, 4, 2, 3), upload(p, _f32(3, 2, 3)), 2)),
        ErrorCase("kv_store-negative-start", lambda p: p.kv_store(_cache(p, 4, 2, 3), upload(p, _f32(1, 2, 3)), -1)),
        ErrorCase("kv_store-head-mismatch", lambda p: p.kv_store(_cache(p, 4, 2, 3), upload(p, _f32(1, 3, 3)), 0)),
        ErrorCase("attention-heads-not-grouped", lambda p: p.attention(upload(p, _f32(1, 3, 4)), _cache(p, 8, 2, 4), _cache(p, 8, 2, 4), 0)),
        ErrorCase("attention-past-cache", lambda p: p.attention(upload(p, _f32(2, 2, 4)), _cache(p, 8, 2, 4), _cache(p, 8, 2, 4), 7)),
        ErrorCase("reshape-wrong-size", lambda p: p.reshape(upload(p, _f32(2, 3)), (4, 2))),
        ErrorCase("attention-head-dim-mismatch", lambda p: p.attention(upload(p, _f32(1, 2, 5)), _cache(p, 8, 2, 4), _cache(p, 8, 2, 4), 0)),
    ]  # fmt: skip
