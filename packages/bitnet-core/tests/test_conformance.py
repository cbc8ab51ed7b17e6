"""The conformance kit run on the reference provider itself (the one line every backend uses)."""

from bitnet_core.testing import conformance

TestConformance = conformance.suite("cpu-reference")
