"""The bitnet conformance kit on the webgpu provider (every op against the numpy reference)."""

from bitnet_core.testing import conformance

TestConformance = conformance.suite("webgpu")
