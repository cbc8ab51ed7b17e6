"""bitnet-vulkan: the ``vulkan`` kernel provider (GLSL compute shaders as SPIR-V)."""

from ._version import __version__

__all__ = ["__version__"]
