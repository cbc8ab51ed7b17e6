"""The kernels of the template backend: ``csrc/kernels.cpp``, built by CMake (pybind11)
into the module ``_kernels`` when the wheel is built; ``load`` imports it.

A GPU backend keeps its kernel sources here as a ``kernels/`` package (the
sources beside ``__init__.py``, which compiles or loads them), or in ``csrc/``
when the build compiles them, as this one does.
"""

from __future__ import annotations

from types import ModuleType


def load() -> ModuleType:
    """The compiled kernel module; ``ImportError`` when the build did not make it."""
    from . import _kernels

    return _kernels
