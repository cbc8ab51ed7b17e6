"""Test kit for provider (backend) packages: the conformance suite and its pieces.

One line in a backend package's ``tests/test_conformance.py``::

    from bitnet_core.testing import conformance

    TestConformance = conformance.suite("opencl")   # the provider's registered name

See ``conformance`` for what it checks and ``tolerances`` for the per-op
tolerances. ``python -m bitnet_core.testing NAME`` runs it outside pytest.
A runner's own tests use ``receipt`` (what a run's receipt must say) and
``batching`` (its batched step against each sequence alone, and the server's
scheduler on it).
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
