"""How a model is loaded, from the values of the command-line options every entry
point shares (``bitnet run``/``chat``/``bench``/``serve``, ``serve-ray``'s replicas):
the kernels' threads and the KV cache."""

from __future__ import annotations

import dataclasses
import os

from ..errors import ConfigError
from ..sdk.kv_cache import KVCacheConfig


def apply_threads(threads: int | None) -> None:
    """``--threads``: exported as ``BITNET_THREADS``/``OMP_NUM_THREADS`` before providers load."""
    if threads is None:
        return
    if threads <= 0:
        raise ConfigError(f"--threads must be a positive integer, got {threads}")
    os.environ["BITNET_THREADS"] = str(threads)
    os.environ["OMP_NUM_THREADS"] = str(threads)


def kv_cache_config(
    ctx_size: int | None, kv_type: str | None, kv_budget_mib: int | None
) -> KVCacheConfig | None:
    """``--ctx-size``, ``--kv-type`` and ``--kv-budget`` as a ``KVCacheConfig`` (None: defaults)."""
    if ctx_size is not None and ctx_size <= 0:
        raise ConfigError(f"--ctx-size must be a positive integer, got {ctx_size}")
    if kv_budget_mib is not None and kv_budget_mib <= 0:
        raise ConfigError(f"--kv-budget must be a positive number of MiB, got {kv_budget_mib}")
    if ctx_size is None and kv_type is None and kv_budget_mib is None:
        return None
    kv = KVCacheConfig(max_seq_len=ctx_size, dtype=kv_type)
    if kv_budget_mib is not None:
        kv = dataclasses.replace(kv, max_bytes=kv_budget_mib << 20)
    return kv
