"""Shared fixtures of bitnet-core's tests."""

from __future__ import annotations

import pytest

from bitnet_core.hal import REGISTRY


@pytest.fixture
def clean_registry(monkeypatch):
    """A registry re-read from the environment, restored afterwards."""
    for var in ("BITNET_DEVICE", "BITNET_GPU_FAKE", "BITNET_STRICT_MODE"):
        monkeypatch.delenv(var, raising=False)
    REGISTRY.refresh()
    yield REGISTRY
    REGISTRY.refresh()
