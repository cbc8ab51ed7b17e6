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
