"""Test kit for provider (backend) packages: the conformance suite and its pieces.

One line in a backend package's ``tests/test_conformance.py``::

    from bitnet_core.testing import conformance

    TestConformance = conformance.suite("opencl")   # the provider's registered name

See ``conformance`` for what it checks and ``tolerances`` for the per-op
tolerances. ``python -m bitnet_core.testing NAME`` runs it outside pytest.
"""

from . import conformance, tolerances
from .conformance import ConformanceReport, resolve, run, suite
from .tolerances import ConformanceFailure

__all__ = [
    "ConformanceFailure",
    "ConformanceReport",
    "conformance",
    "resolve",
    "run",
    "suite",
    "tolerances",
]
