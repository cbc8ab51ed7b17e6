"""The kernels of the template backend: ``csrc/kernels.cpp``, built by CMake (pybind11)
into the module ``_kernels`` when the wheel is built; ``load`` imports it, and each
op's function launches its kernel.

A GPU backend keeps its kernel sources here as a ``kernels/`` package (the
sources beside ``__init__.py``, which compiles or loads them; ``tools/new-backend
--gpu`` makes this module that package), or in ``csrc/`` when the build compiles
them, as this one does.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np


def load() -> ModuleType:
    """The compiled kernel module; ``ImportError`` when the build did not make it."""
    from bitnet_template import _kernels

    return _kernels


def matmul_i2s(xq: Any, xscale: Any, weight: Any) -> np.ndarray:
    """``matmul_i2s`` on a resident weight (``memory.TemplateWeight``)."""
    return load().matmul_i2s(
        np.asarray(xq, dtype=np.int8),
        np.asarray(xscale, dtype=np.float32).reshape(-1),
        weight.packed,
        weight.scales,
        weight.shape[1],
    )
