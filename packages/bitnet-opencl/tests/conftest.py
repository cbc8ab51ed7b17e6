"""Fixtures of bitnet-opencl's tests: a real OpenCL provider (PoCL's CPU device in CI)."""

from __future__ import annotations

import numpy as np
import pytest

from bitnet_core.providers.reference import ReferenceProvider
from bitnet_opencl import OpenCLProvider


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
def ref() -> ReferenceProvider:
    return ReferenceProvider()


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)
