"""The native CPU providers as the tests take them (skipped where this CPU lacks one)."""

from __future__ import annotations

import pytest

from bitnet_core.providers.cpu_native import ALL_PROVIDERS, NativeCpuProvider

PROVIDER_CLASSES = {cls.name: cls for cls in ALL_PROVIDERS}

#: (provider name, threads) of every native provider with 1 and 2 threads
NAME_THREADS = [(n, t) for n in PROVIDER_CLASSES for t in (1, 2)]


def native_provider(name: str, threads: int, **kw) -> NativeCpuProvider:
    """Provider ``name`` on ``threads`` threads, or a skip with its probe's reason."""
    prov = PROVIDER_CLASSES[name](threads=threads, **kw)
    avail = prov.probe()
    if not avail.available:
        pytest.skip(f"{name}: {avail.reason}")
    return prov


def available_providers(threads: int = 2) -> list[NativeCpuProvider]:
    """Every native provider this machine can run."""
    provs = [cls(threads=threads) for cls in ALL_PROVIDERS]
    return [p for p in provs if p.probe().available]
