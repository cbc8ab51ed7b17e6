"""Random inputs shared by the tests."""

from __future__ import annotations

import numpy as np

from bitnet_core.hal.weights import TernaryWeight


def ternary(rng: np.random.Generator, rows: int, cols: int) -> TernaryWeight:
    codes = rng.integers(-1, 2, size=(rows, cols), dtype=np.int8)
    scales = rng.uniform(0.01, 2.0, size=rows).astype(np.float32)
    return TernaryWeight.from_codes(codes, scales, name=f"w{rows}x{cols}")


def acts(rng: np.random.Generator, *shape: int, scale: float = 3.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def run_kernel(ocl, name: str, gsize, lsize, *args) -> None:
    """Launch ``name``; numpy arguments are uploaded (and kept alive until it ran)."""
    rt = ocl.runtime
    held = [ocl.to_device(a) if isinstance(a, np.ndarray) else a for a in args]
    rt.kernel(name)(rt.queue, gsize, lsize, *(getattr(a, "buffer", a) for a in held))
    rt.finish()
