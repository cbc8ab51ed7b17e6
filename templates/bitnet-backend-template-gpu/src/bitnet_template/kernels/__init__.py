"""The kernels of the template GPU backend, and their loader.

A GPU backend keeps its kernel sources in this package, beside this loader
(OpenCL C or WGSL compiled at run time, SPIR-V or a fatbin the build made) and
``load`` returns what launches them. Until you port them, the kernels are the
template's C++ ones (``csrc/kernels.cpp``, built by CMake into
``bitnet_template._kernels``), run on the host CPU.
"""

from __future__ import annotations

from types import ModuleType


def load() -> ModuleType:
    """The compiled kernel module; ``ImportError`` when the build did not make it."""
    from .. import _kernels

    return _kernels
