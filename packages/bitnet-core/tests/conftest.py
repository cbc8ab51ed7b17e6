"""Shared fixtures of bitnet-core's tests."""

from __future__ import annotations

import os

import pytest

# every probe is a real probe: no answers remembered from another process
# (hal/probe_cache.py; tests/test_probe_cache.py turns it on where it is the subject)
os.environ.setdefault("BITNET_CACHE", "0")

from bitnet_core.hal import REGISTRY


@pytest.fixture
def clean_registry(monkeypatch):
    """A registry re-read from the environment, restored afterwards."""
    for var in ("BITNET_DEVICE", "BITNET_GPU_FAKE", "BITNET_STRICT_MODE"):
        monkeypatch.delenv(var, raising=False)
    REGISTRY.refresh()
    yield REGISTRY
    REGISTRY.refresh()
