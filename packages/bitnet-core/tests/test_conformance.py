"""The conformance kit on the reference provider, judged by an independent implementation.

The kit's op cases compare a provider with ``bitnet_core.testing.ops.REFERENCE``
(a ``ReferenceProvider``); here that expectation is ``IndependentOps``
(independent_ops.py: the same formulas written apart), so a fault in the
reference's arithmetic fails these cases. The model cases still compare the
engine on ``cpu-reference`` with itself (they check the engine's plumbing:
prefill vs decode, greedy tokens); crossval checks its numbers against transformers.
"""

import pytest
from independent_ops import IndependentOps

from bitnet_core.testing import conformance, ops

TestConformance = conformance.suite("cpu-reference")


@pytest.fixture(autouse=True, scope="module")
def _independent_expectation():
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ops, "REFERENCE", IndependentOps())
        yield
