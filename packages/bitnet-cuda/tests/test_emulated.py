"""The CUDA provider and kernels run on a CPU emulator of the device.

No CI machine has an NVIDIA GPU. Here the real provider (``CudaProvider``:
uploads, packing, launch geometry, the host-side ops) runs with CuPy replaced
by ``cuda_emulator.EmulatedCuPy``, which compiles ``bitnet_kernels.cu`` as C++
and runs each launch with every CUDA thread a fiber, blocks and warps
synchronized as on the GPU (``cuda_emulator/cuda_emu.h``). So the kernels'
logic is checked against the numpy reference (the conformance kit, its
small cases) and a whole model against the CPU engine; what only a GPU shows
(speed, the compiled PTX, concurrency between blocks) is left to
``test_conformance.py`` on a machine that has one.
"""

from __future__ import annotations

import numpy as np
import pytest
from cuda_emulator import EmulatedCudaProvider, missing

from bitnet_core.config import BitNetConfig
from bitnet_core.model import Model, random_weights
from bitnet_core.model.backend import GenericBackend
from bitnet_core.testing import conformance

if missing():
    pytest.skip(missing(), allow_module_level=True)


def _emulated() -> EmulatedCudaProvider:
    return EmulatedCudaProvider()


TestEmulatedConformance = conformance.suite(_emulated, large=False)


def test_probe_sees_the_emulated_device() -> None:
    avail = _emulated().probe(explicit=True)
    assert avail.available and avail.details["compute_capability"] == "9.0"


def test_kernels_take_the_nvrtc_path() -> None:
    p = _emulated()
    _ = p.cp
    assert p.kernel_source == "nvrtc"  # the fatbin is GPU code: refused, the .cu is built


def small_config(activation: str) -> BitNetConfig:
    # odd sizes: head_dim 20, hidden 120, FFN 200 (none a multiple of 64), GQA 6/2
    return BitNetConfig(
        vocab_size=300,
        hidden_size=120,
        num_layers=2,
        num_heads=6,
        num_kv_heads=2,
        intermediate_size=200,
        context_length=64,
        ffn_activation=activation,
    )


@pytest.fixture(scope="module", params=["silu", "relu2"])
def models(request):
    weights = random_weights(small_config(request.param), seed=7)
    return (
        Model.from_weights(weights, device="cpu-reference"),
        Model(GenericBackend(_emulated(), weights)),
    )


def _close(got: np.ndarray, want: np.ndarray) -> None:
    # int8 activation codes may flip where float rounding differs: a small,
    # bounded drift relative to the logits' range
    scale = float(np.abs(want).max())
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-3 * scale)


def test_prefill_logits(models):
    ref_model, cuda_model = models
    prompt = np.array([1, 5, 299, 42, 42, 7, 100, 3, 250, 11, 12, 13])  # 12 > MAXT tokens
    _close(cuda_model.logits(prompt), ref_model.logits(prompt))


def test_decode_steps(models):
    ref_model, cuda_model = models
    rb, cb = ref_model.backend, cuda_model.backend
    with rb.new_cache() as rs, cb.new_cache() as cs:
        _close(cb.forward([4, 8, 15], cs), rb.forward([4, 8, 15], rs))
        for tok in (16, 23, 42, 0, 299):
            _close(cb.forward([tok], cs), rb.forward([tok], rs))


def test_greedy_tokens(models):
    ref_model, cuda_model = models
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    want = ref_model.generate_ids(prompt, max_tokens=12, temperature=0.0)
    assert cuda_model.generate_ids(prompt, max_tokens=12, temperature=0.0) == want
