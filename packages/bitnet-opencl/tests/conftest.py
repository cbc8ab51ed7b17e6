"""Fixtures of bitnet-opencl's tests: a real OpenCL provider (PoCL's CPU device in CI)."""

from __future__ import annotations

import numpy as np
import pytest

from bitnet_core.providers.reference import ReferenceProvider
from bitnet_opencl import OpenCLProvider
from bitnet_opencl.replay import COMMAND_BUFFER_EXT


@pytest.fixture(scope="session")
def ocl() -> OpenCLProvider:
    """The provider on the best OpenCL device, asked for explicitly (a CPU device counts)."""
    provider = OpenCLProvider()
    avail = provider.probe(explicit=True)
    if not avail.available:
        pytest.skip(f"no OpenCL device: {avail.reason}")
    provider.synchronize()  # build the kernels once for the session
    return provider


@pytest.fixture(scope="session")
def ocl_no_fp64(ocl) -> OpenCLProvider:
    """A second provider on the same device built without float64 (as on Intel Arc)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("BITNET_OPENCL_DISABLE", "fp64,correctly_rounded_div")
    p = OpenCLProvider(device=ocl.device_info.address)
    p.probe(explicit=True)
    p.synchronize()
    mp.undo()
    assert not p.runtime.features.fp64
    return p


@pytest.fixture(scope="session")
def ref() -> ReferenceProvider:
    return ReferenceProvider()


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


@pytest.fixture(params=["command-buffer", "loop"])
def mode(request, ocl, monkeypatch):
    """Replayed decode steps both ways: the command buffer (skipped where the device has
    no cl_khr_command_buffer) and the ctypes loop of launches."""
    if request.param == "command-buffer":
        if COMMAND_BUFFER_EXT not in ocl.runtime.info.extensions:
            pytest.skip(f"the device has no {COMMAND_BUFFER_EXT}")
        monkeypatch.delenv("BITNET_OPENCL_COMMAND_BUFFER", raising=False)
    else:
        monkeypatch.setenv("BITNET_OPENCL_COMMAND_BUFFER", "0")
    monkeypatch.delenv("BITNET_STRICT_MODE", raising=False)
    return request.param
