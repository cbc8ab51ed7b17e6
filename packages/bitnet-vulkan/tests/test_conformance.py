"""The bitnet conformance kit on the vulkan provider (every op against the numpy reference)."""

from bitnet_core.testing import conformance

TestConformance = conformance.suite("vulkan")
