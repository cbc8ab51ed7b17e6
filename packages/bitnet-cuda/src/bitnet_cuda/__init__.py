"""bitnet-cuda: the CUDA kernel provider of bitnet (CUDA C++ kernels run through CuPy)."""

from ._version import __version__
from .provider import CudaProvider

__all__ = ["CudaProvider", "__version__"]
