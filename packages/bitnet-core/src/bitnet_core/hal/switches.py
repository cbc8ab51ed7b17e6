"""Environment switches of providers and backends (``BITNET_CPU_FUSED=0``, ...)."""

from __future__ import annotations

import os

from ..errors import ConfigError

OFF = ("0", "false", "no", "off")


def env_enabled(name: str) -> bool:
    """``name`` is unset or not one of ``0``, ``false``, ``no``, ``off`` (any case)."""
    return os.environ.get(name, "1").strip().lower() not in OFF


def env_int(name: str, default: int, minimum: int = 0) -> int:
    """``name`` as a whole number ``>= minimum``, ``default`` when unset; ``ConfigError`` else."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a whole number >= {minimum}, got {raw!r}") from None
    if value < minimum:
        raise ConfigError(f"{name} must be a whole number >= {minimum}, got {raw!r}")
    return value
