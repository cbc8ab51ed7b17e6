"""bitnet-webgpu: the WebGPU kernel provider of bitnet (WGSL shaders through wgpu)."""

from ._version import __version__
from .provider import WebGPUProvider

__all__ = ["WebGPUProvider", "__version__"]
