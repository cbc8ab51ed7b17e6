"""sdk.provider: a provider's self-description from class keywords and the GPU defaults."""

from __future__ import annotations

import pytest

from bitnet_core.sdk.kv_cache import provider_kv_dtypes
from bitnet_core.sdk.provider import DeviceProvider, GpuProvider


def test_gpu_provider_states_only_what_differs():
    class Plain(GpuProvider, family="x-gpu", priority=33):
        pass

    class HalfFirst(GpuProvider, family="y-gpu", priority=34, fakeable=False):
        kv_dtypes = ("float16", "float32")

    assert (Plain.name, Plain.family, Plain.priority) == ("x-gpu", "x-gpu", 33)
    # the KV dtypes are the kernels' to list: none listed is the one default, float32
    assert (Plain.device_kind, Plain.fakeable, provider_kv_dtypes(Plain())) == (
        "gpu",
        True,
        ("float32",),
    )
    assert (HalfFirst.fakeable, provider_kv_dtypes(HalfFirst())) == (False, ("float16", "float32"))
    assert DeviceProvider.fakeable is False and not hasattr(DeviceProvider, "device_kind")


def test_unknown_description_keyword_is_refused():
    with pytest.raises(TypeError, match="unknown provider description colour"):

        class Bad(GpuProvider, family="b", colour="red"):
            pass
