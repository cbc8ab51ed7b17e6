"""On/off environment switches of providers and backends (``BITNET_CPU_FUSED=0``, ...)."""

from __future__ import annotations

import os

OFF = ("0", "false", "no", "off")


def env_enabled(name: str) -> bool:
    """``name`` is unset or not one of ``0``, ``false``, ``no``, ``off`` (any case)."""
    return os.environ.get(name, "1").strip().lower() not in OFF
