"""The bitnet_core conformance suite on the installed ``opencl`` provider (PoCL in CI)."""

from bitnet_core.testing import conformance

TestConformance = conformance.suite("opencl")
