"""``sdk.trace``: a provider's record of kernels, submissions and fallbacks."""

from __future__ import annotations

import pytest

from bitnet_core.errors import StrictModeError
from bitnet_core.sdk.provider import DeviceProvider


class _Device(DeviceProvider, family="trace-test"):
    pass


def test_trace_is_per_provider_and_counts() -> None:
    a, b = _Device(), _Device()
    a.trace.kernel("rmsnorm_quant")
    a.trace.kernel("rmsnorm_quant")
    a.trace.kernel("attention_split_k")
    a.trace.submit(3)
    assert a.trace.kernel_names() == ["attention_split_k", "rmsnorm_quant"]
    assert a.trace.kernels["rmsnorm_quant"] == 2
    assert a.trace.submissions == 3
    assert b.trace.kernel_names() == [] and b.trace.submissions == 0


def test_fallback_is_kept_once_and_strict_mode_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    p = _Device()
    monkeypatch.delenv("BITNET_STRICT_MODE", raising=False)
    p.trace.fallback("step replay unavailable: shape changed")
    p.trace.fallback("step replay unavailable: shape changed")
    assert p.trace.fallbacks == ["step replay unavailable: shape changed"]
    monkeypatch.setenv("BITNET_STRICT_MODE", "1")
    with pytest.raises(StrictModeError, match="replay"):
        p.trace.fallback("graph replay failed")


def test_mark_counts_only_what_ran_after_it() -> None:
    p = _Device()
    p.trace.kernel("relu2_mul")
    p.trace.kernel("rmsnorm")
    mark = p.trace.mark()
    p.trace.kernel("rmsnorm")
    p.trace.kernel("silu_mul")
    assert p.trace.kernels_since(mark) == ["rmsnorm", "silu_mul"]
    assert p.trace.kernel_names() == ["relu2_mul", "rmsnorm", "silu_mul"]


def test_receipt_lists_its_own_models_kernels_on_a_shared_provider() -> None:
    """Two models on one (cached) provider: the second's receipt does not list the first's."""
    from bitnet_core.model import Model, random_weights
    from bitnet_core.testing.strict import strict_config

    relu = Model.from_weights(random_weights(strict_config("relu2"), seed=1), "cpu-reference")
    relu.generate_ids([1, 2, 3], max_tokens=2, temperature=0)
    assert "relu2_mul" in relu.receipt()["provider"]["kernels"]
    silu = Model.from_weights(random_weights(strict_config("silu"), seed=1), "cpu-reference")
    assert silu.provider is relu.provider
    silu.generate_ids([1, 2, 3], max_tokens=2, temperature=0)
    kernels = silu.receipt()["provider"]["kernels"]
    assert "silu_mul" in kernels and "relu2_mul" not in kernels


def test_ops_record_per_thread_and_a_trace_pickles() -> None:
    """An op in one thread is recorded though another thread records kernels meanwhile."""
    import pickle
    import threading

    import numpy as np

    from bitnet_core.providers.reference import ReferenceProvider

    class Slow(ReferenceProvider, name="slow-trace-test", family="slow-trace-test"):
        def add(self, a, b):
            started.set()
            resume.wait(5)
            return super().add(a, b)

    started, resume = threading.Event(), threading.Event()
    p = Slow()
    x = np.ones(4, np.float32)
    worker = threading.Thread(target=p.add, args=(x, x))
    worker.start()
    assert started.wait(5)
    p.trace.kernel("fused_elsewhere")  # another thread names a kernel mid-op
    resume.set()
    worker.join(5)
    assert p.trace.kernel_names() == ["add", "fused_elsewhere"]
    copy = pickle.loads(pickle.dumps(p.trace))
    assert copy.kernels == p.trace.kernels and copy.thread is not p.trace.thread
