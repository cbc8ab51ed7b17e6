"""The bitnet conformance kit on this backend: every op against the numpy reference."""

from bitnet_core.testing import conformance

TestConformance = conformance.suite("template")
