"""Version of the bitnet meta package (kept in step by tools/set_version.py)."""

__version__ = "0.1.0"
