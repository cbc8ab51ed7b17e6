"""The bitnet conformance kit on the cuda provider (skips with the probe's reason without a GPU)."""

import pytest

from bitnet_core.testing import conformance

pytestmark = pytest.mark.gpu

TestConformance = conformance.suite("cuda")
