"""Version of bitnet-vulkan (kept in step with every distribution by tools/set_version.py)."""

__version__ = "0.1.0"
