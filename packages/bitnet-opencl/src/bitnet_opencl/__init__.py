"""bitnet-opencl: the ``opencl`` kernel provider of bitnet (OpenCL C kernels through PyOpenCL)."""

from __future__ import annotations

from ._version import __version__
from .buffers import CLArray
from .provider import OpenCLProvider

__all__ = ["CLArray", "OpenCLProvider", "__version__"]
