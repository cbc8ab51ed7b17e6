"""What the kit cannot know about this backend: its registration and its C++ kernels."""

from __future__ import annotations

import numpy as np
import pytest

from bitnet_core.errors import ShapeError
from bitnet_core.hal import REGISTRY, TernaryWeight, select


def test_registered_and_selectable():
    REGISTRY.refresh()
    record = REGISTRY.get("template")
    assert record is not None, "entry point bitnet.providers:template is not installed"
    assert record.probe(explicit=True).available, record.probe(explicit=True).reason
    assert select("template").record.name == "template"


def test_kernels_are_native():
    from bitnet_template import _kernels

    assert _kernels.__file__.endswith((".so", ".pyd"))


def test_matmul_i2s_rejects_a_wrong_weight():
    provider = REGISTRY.get("template").provider
    weight = provider.load_ternary(TernaryWeight.from_codes(np.ones((3, 6), np.int8), 1.0))
    with pytest.raises(ShapeError):
        provider.matmul_i2s(np.ones((2, 5), np.int8), np.ones(2, np.float32), weight)
