"""OpenCL failures surface as bitnet_core errors naming the call."""

from __future__ import annotations

import numpy as np
import pytest
from ocl_helpers import acts

from bitnet_core.errors import ConfigError, ProviderError, UnsupportedOperationError
from bitnet_opencl import OpenCLProvider


def test_device_allocation_failure_is_provider_error(ocl):
    too_big = ocl.device_info.global_mem * 4 // np.dtype(np.float32).itemsize
    with pytest.raises(ProviderError, match="opencl empty"):
        ocl.empty((too_big,))


def test_foreign_weight_is_rejected(ocl, rng):
    with pytest.raises(UnsupportedOperationError, match="load_ternary"):
        ocl.linear(ocl.to_device(acts(rng, 1, 4)), np.zeros((4, 4), np.int8))


def test_bad_feature_switch_is_config_error(monkeypatch, ocl):
    monkeypatch.setenv("BITNET_OPENCL_DISABLE", "warp-drive")
    p = OpenCLProvider(device=ocl.device_info.address)
    p.probe(explicit=True)
    with pytest.raises(ConfigError, match="warp-drive"):
        p.synchronize()
