"""The conformance kit must fail providers with planted bugs, case by case."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

from bitnet_core.errors import ShapeError
from bitnet_core.hal.provider import Availability
from bitnet_core.providers.reference import ReferenceProvider
from bitnet_core.testing import ConformanceFailure, conformance, model, run
from bitnet_core.testing.tolerances import Tolerance, assert_close

pytest_plugins = ["pytester"]


class OffByOneMatmul(ReferenceProvider):
    """matmul_i2s's inner loop stops one column short (a classic K-tail bug)."""

    name = "bug-k-tail"

    def matmul_i2s(self, xq, xscale, weight):
        xq = np.array(xq, copy=True)
        xq[:, -1] = 0
        return super().matmul_i2s(xq, xscale, weight)


class UnwrittenLastRow(ReferenceProvider):
    """matmul_i2s never writes the last token's row of its output."""

    name = "bug-last-row"

    def matmul_i2s(self, xq, xscale, weight):
        full = super().matmul_i2s(xq, xscale, weight)
        out = np.full_like(full, np.nan)  # what a fresh, poisoned device buffer holds
        out[:-1] = full[:-1]
        return out


class RoundHalfAway(ReferenceProvider):
    """quantize_act rounds ties away from zero (C's round()) instead of to even."""

    name = "bug-round"

    def quantize_act(self, x):
        x = np.asarray(x, np.float32)
        amax = np.maximum(np.abs(x).max(axis=1), np.float32(1e-5))
        s = (np.float32(127) / amax).astype(np.float32)
        v = x * s[:, None]
        q = np.sign(v) * np.floor(np.abs(v) + 0.5)
        return np.clip(q, -128, 127).astype(np.int8), s


class NoCausalMask(ReferenceProvider):
    """attention lets every query of a chunk see the whole chunk."""

    name = "bug-mask"

    def attention(self, q, k_cache, v_cache, start):
        t = q.shape[0]
        rows = [super(NoCausalMask, self).attention(q[i : i + 1], k_cache, v_cache, start + t - 1)
                for i in range(t)]  # fmt: skip
        return np.concatenate(rows)


class SwappedRopeStyle(ReferenceProvider):
    """rope ignores its style argument and always pairs (i, i + d/2)."""

    name = "bug-rope"

    def rope(self, x, positions, theta, style, rot_dim):
        return super().rope(x, positions, theta, "neox", rot_dim)


class KvStoreOneTooMany(ReferenceProvider):
    """kv_store also writes the row after the chunk."""

    name = "bug-kv"

    def kv_store(self, cache, x, start):
        super().kv_store(cache, x, start)
        if start + x.shape[0] < cache.shape[0]:
            cache[start + x.shape[0]] = x[-1]


class RaisingProbe(ReferenceProvider):
    name = "bug-probe"

    def probe(self, explicit=False):
        if explicit:
            raise RuntimeError("driver exploded")
        return Availability.yes("test")


def _dense_without_checks(self, x, table):
    return (np.asarray(x) @ np.asarray(table).T).astype(np.float32)


class ValueErrorOnBadShape(ReferenceProvider):
    """matmul_dense lets numpy's ValueError escape on a shape mismatch.

    Set after the class is made, so ``DeviceProvider`` does not wrap it with
    the shared check: a provider that bypasses the SDK."""

    name = "bug-errors"


ValueErrorOnBadShape.matmul_dense = _dense_without_checks


class SdkGuardsBadShapes(ReferenceProvider):
    """The same op written in the class body: the SDK's shared check runs first."""

    name = "sdk-guarded"
    matmul_dense = _dense_without_checks


def test_sdk_checks_an_ops_arguments_before_the_provider_code():
    failed, _ = failed_ids(SdkGuardsBadShapes(), ["matmul_dense"])
    assert not failed
    with pytest.raises(ShapeError, match="does not match table"):
        SdkGuardsBadShapes().matmul_dense(np.ones((2, 3), np.float32), np.ones((5, 4), np.float32))


def failed_ids(provider, only):
    report = run(provider, large=False, only=only)
    assert report.results, "nothing ran"
    return {r.id for r in report.failed}, report


@pytest.mark.parametrize(
    ("bug", "ops", "must_fail"),
    [
        (OffByOneMatmul, ["matmul_i2s"], ["matmul_i2s-T3-K31-N17", "matmul_i2s-T1-K3-N5"]),
        (UnwrittenLastRow, ["matmul_i2s"], ["matmul_i2s-T1-K1-N1", "matmul_i2s-T64-K129-N255"]),
        (RoundHalfAway, ["quantize_act"], ["quantize_act-ties-T1-K7", "quantize_act-ties-T3-K300"]),
        (NoCausalMask, ["attention"], ["attention-S16-Hq4-Hkv2-D5-0+7-7+1-8+1"]),
        (SwappedRopeStyle, ["rope"], ["rope-T3-H2-D8-rot8-norm-pos2"]),
        (KvStoreOneTooMany, ["attention"], ["attention-S16-Hq4-Hkv2-D5-0+7-7+1-8+1"]),
        (ValueErrorOnBadShape, ["matmul_dense"], ["error-matmul_dense-K-mismatch"]),
    ],
)
def test_kit_catches_planted_bug(bug, ops, must_fail):
    failed, report = failed_ids(bug(), ops)
    missing = [case for case in must_fail if case not in failed]
    assert not missing, f"{bug.__name__} passed {missing}; failures: {sorted(failed)}"
    # The same subset is green on the correct reference: the failures are the bug's.
    clean, _ = failed_ids(ReferenceProvider(), ops)
    assert not clean


def test_kit_reports_a_probe_that_raises():
    with pytest.raises(ConformanceFailure, match="driver exploded"):
        run(RaisingProbe())


def test_unwritten_rows_are_named_in_the_message():
    report = run(UnwrittenLastRow(), large=False, only=["matmul_i2s-T3-K31-N17"])
    (result,) = report.failed
    assert "NaN" in result.message and "unwritten" in result.message


def test_assert_close_bounds():
    want = np.array([1.0, -2.0, 100.0])
    assert_close("x", want * (1 + 1e-7), want, tol=Tolerance(1e-6, 0.0))
    with pytest.raises(ConformanceFailure, match="1 of 3"):
        assert_close("x", want + [0, 0, 1e-3], want, tol=Tolerance(1e-6, 0.0))
    with pytest.raises(ConformanceFailure, match="shape"):
        assert_close("x", want[:2], want)


def test_resolve_by_registry_name(clean_registry, monkeypatch):
    with pytest.raises(ConformanceFailure, match="no provider named"):
        conformance.resolve("no-such-backend")
    monkeypatch.setenv("BITNET_GPU_FAKE", "cuda")
    clean_registry.refresh()
    provider, availability = conformance.resolve("fake-cuda")
    assert availability.fake and provider.name == "fake-cuda"


class NoDevice(ReferenceProvider):
    name = "bug-nodevice"

    def probe(self, explicit=False):
        return Availability.no("no test device here")


def test_unavailable_provider_skips_or_fails_when_required(monkeypatch):
    report = run(NoDevice())
    assert [r.status for r in report.results] == ["skipped"]
    assert "no test device here" in report.results[0].message
    with pytest.raises(conformance.ProviderUnavailable):
        conformance.resolve(NoDevice())


def test_error_path_accepts_only_bitnet_errors():
    from bitnet_core.testing.contract import ErrorCase

    ErrorCase("ok", lambda p: (_ for _ in ()).throw(ShapeError("bad"))).run(None)
    with pytest.raises(ConformanceFailure, match="IndexError"):
        ErrorCase("idx", lambda p: [][1]).run(None)
    with pytest.raises(ConformanceFailure, match="instead of raising"):
        ErrorCase("none", lambda p: 1).run(None)


PLANTED = textwrap.dedent(
    """
    import numpy as np
    from bitnet_core.providers.reference import ReferenceProvider
    from bitnet_core.testing import conformance

    class Buggy(ReferenceProvider):
        name = "bug-k-tail"

        def matmul_i2s(self, xq, xscale, weight):
            xq = np.array(xq, copy=True)
            xq[:, -1] = 0
            return super().matmul_i2s(xq, xscale, weight)

    TestConformance = conformance.suite(Buggy(), large=False)
    """
)


def test_one_line_suite_fails_a_buggy_provider(pytester):
    """The pytest class a backend gets from one line reports the planted bug as failures."""
    pytester.makepyfile(test_buggy=PLANTED)
    result = pytester.runpytest_inprocess(
        "-q", "-p", "no:cacheprovider", "-k", "matmul_i2s or probe"
    )
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) >= 8, result.stdout.str()
    assert outcomes.get("passed", 0) >= 2  # probe/attributes and the K=1 shapes still pass
    result.stdout.fnmatch_lines(["*test_op*matmul_i2s-T3-K31-N17*"])


@pytest.mark.parametrize("config_name", sorted(model.MODEL_CONFIGS))
def test_greedy_check_is_not_vacuous(config_name):
    """A float32 provider (errors ~1e-7) gets all 12 greedy steps compared, not cut short."""
    assert model.check_greedy(Float32Norm(), config_name) == 12


class Float32Norm(ReferenceProvider):
    """A correct provider with float32 rounding of its own (rmsnorm in float32)."""

    name = "f32-norm"

    def rmsnorm(self, x, weight, eps):
        x = np.asarray(x, np.float32)
        ms = np.mean(x * x, axis=-1, keepdims=True, dtype=np.float32)
        return (x / np.sqrt(ms + np.float32(eps)) * weight).astype(np.float32)


def test_model_checks_catch_a_matmul_bug():
    report = run(OffByOneMatmul(), only=["model"])
    failed = {r.id for r in report.failed}
    assert {f"model-prefill-{c}" for c in model.MODEL_CONFIGS} <= failed, failed
    assert {f"model-decode-{c}" for c in model.MODEL_CONFIGS} <= failed, failed


class MixedUpBatch(ReferenceProvider):
    """A backend whose batched step hands each sequence another one's logits."""

    name = "bug-batch-rows"

    def make_runner(self, weights, **opts):
        from bitnet_core.model import GenericRunner

        class Runner(GenericRunner):
            def _forward_batch(self, batch):
                return np.roll(super()._forward_batch(batch), 1, axis=0)

        return Runner(self, weights, **opts)


def test_batch_check_catches_mixed_up_rows():
    report = run(MixedUpBatch(), only=["model"])
    failed = {r.id for r in report.failed}
    assert {f"model-batch-{c}" for c in model.MODEL_CONFIGS} <= failed, failed
    assert not {f"model-decode-{c}" for c in model.MODEL_CONFIGS} & failed, failed
