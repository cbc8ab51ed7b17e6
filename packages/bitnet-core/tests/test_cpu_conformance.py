"""The conformance kit on the native CPU providers (skipped where the CPU lacks them)."""

from bitnet_core.testing import conformance

TestAvx512Conformance = conformance.suite("cpu-avx512")
TestAvx2Conformance = conformance.suite("cpu-avx2")
TestNeonConformance = conformance.suite("cpu-neon")
TestScalarConformance = conformance.suite("cpu-scalar")
