"""pytest-benchmark benchmarks of the CPU kernels (not part of the test suite).

    uv run --no-sync pytest packages/bitnet-core/benchmarks/bench_cpu_kernels.py --benchmark-only

Shapes are bitnet_b1_58-large's (decode T=1, prefill T=128). For bandwidth
against the machine's memory speed use tools/bench/gemv_bandwidth.py, which
cycles through more weights than the caches hold.
"""

from __future__ import annotations

import numpy as np
import pytest

from bitnet_core.hal.weights import TernaryWeight
from bitnet_core.providers.cpu_native import ALL_PROVIDERS

PROVIDERS = [cls for cls in ALL_PROVIDERS if cls.name != "cpu-scalar"]


@pytest.fixture(params=[cls.name for cls in PROVIDERS])
def prov(request):
    cls = next(c for c in PROVIDERS if c.name == request.param)
    p = cls()
    if not p.probe().available:
        pytest.skip(p.probe().reason)
    return p


@pytest.mark.parametrize("layout", ["i2_128", "tq1_160"])
@pytest.mark.parametrize("t", [1, 128])
@pytest.mark.parametrize("shape", [(1536, 1536), (4096, 1536), (1536, 4096)], ids=str)
def test_linear(benchmark, prov, shape, t, layout):
    rng = np.random.default_rng(0)
    codes = rng.integers(-1, 2, size=shape, dtype=np.int8)
    prov._layout = layout
    w = prov.load_ternary(TernaryWeight.from_codes(codes, 1.0))
    x = rng.standard_normal((t, shape[1])).astype(np.float32)
    benchmark(prov.linear, x, w)


@pytest.mark.parametrize("int8", [False, True])
def test_head(benchmark, prov, int8):
    rng = np.random.default_rng(0)
    table = rng.standard_normal((32000, 1536)).astype(np.float16)
    x = rng.standard_normal((1, 1536)).astype(np.float32)
    prov._int8_head = int8
    prov.matmul_dense(x, table)
    benchmark(prov.matmul_dense, x, table)


@pytest.mark.parametrize("t,start", [(1, 255), (128, 0)])
def test_attention(benchmark, prov, t, start):
    rng = np.random.default_rng(0)
    q = rng.standard_normal((t, 16, 96)).astype(np.float32)
    k = rng.standard_normal((start + t, 16, 96)).astype(np.float32)
    benchmark(prov.attention, q, k, k, start)


def test_quantize_act(benchmark, prov):
    x = np.random.default_rng(0).standard_normal((128, 4096)).astype(np.float32)
    benchmark(prov.quantize_act, x)
