"""The single place the project's version lives (every distribution reads it)."""

__version__ = "0.1.0"
