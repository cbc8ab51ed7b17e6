"""Every op of the provider against the numpy reference, on awkward shapes, on a real device."""

from __future__ import annotations

import numpy as np
import pytest

from bitnet_core.errors import ShapeError, UnsupportedOperationError
from bitnet_core.hal.weights import TernaryWeight
from bitnet_opencl import CLArray


def ternary(rng, rows: int, cols: int) -> TernaryWeight:
    codes = rng.integers(-1, 2, size=(rows, cols), dtype=np.int8)
    scales = rng.uniform(0.01, 2.0, size=rows).astype(np.float32)
    return TernaryWeight.from_codes(codes, scales, name=f"w{rows}x{cols}")


def acts(rng, *shape: int, scale: float = 3.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def assert_close(got, want, rtol=1e-5, atol_scale=1e-6):
    want = np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype
    atol = atol_scale * max(1.0, float(np.abs(want).max(initial=0.0)))
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


SHAPES_TK = [(1, 1), (1, 7), (3, 64), (2, 65), (5, 130), (1, 257), (4, 1000)]


def test_memory_round_trip(ocl, rng):
    for arr in (acts(rng, 3, 5), np.arange(7, dtype=np.int8), np.ones((2, 3), np.float16)):
        dev = ocl.to_device(arr)
        assert isinstance(dev, CLArray) and dev.shape == arr.shape
        np.testing.assert_array_equal(ocl.to_host(dev), arr)
    z = ocl.empty((3, 4, 5))
    assert z.shape == (3, 4, 5)
    np.testing.assert_array_equal(ocl.to_host(z), np.zeros((3, 4, 5), np.float32))
    assert ocl.to_host(ocl.empty((0, 4))).shape == (0, 4)
    v = ocl.to_device(np.arange(12, dtype=np.float32)).reshape(3, -1)
    np.testing.assert_array_equal(ocl.to_host(v), np.arange(12, dtype=np.float32).reshape(3, 4))
    with pytest.raises(ShapeError):
        v.reshape(5, -1)
    with pytest.raises(UnsupportedOperationError):
        ocl.to_device(np.array(["a"]))


@pytest.mark.parametrize("t,k", SHAPES_TK)
def test_quantize_act_exact(ocl, ref, rng, t, k):
    x = acts(rng, t, k)
    x[0, 0] = 0.0
    if t > 1:
        x[1] = 0.0  # an all-zero row uses the 1e-5 floor
    xq, xs = ocl.quantize_act(ocl.to_device(x))
    rq, rs = ref.quantize_act(x)
    np.testing.assert_array_equal(ocl.to_host(xs), rs)
    np.testing.assert_array_equal(ocl.to_host(xq), rq)


def test_quantize_act_rounds_half_to_even(ocl, ref):
    # max 127 -> scale 1: x*s hits .5 exactly
    x = np.array([[127.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 126.5]], np.float32)
    xq, _ = ocl.quantize_act(ocl.to_device(x))
    np.testing.assert_array_equal(ocl.to_host(xq), ref.quantize_act(x)[0])


@pytest.mark.parametrize(
    "t,n,k", [(1, 1, 1), (1, 3, 5), (1, 17, 64), (2, 9, 65), (3, 33, 200), (1, 7, 1000)]
)
def test_matmul_i2s_gemv(ocl, ref, rng, t, n, k):
    w = ternary(rng, n, k)
    x = acts(rng, t, k)
    xq, xs = ref.quantize_act(x)
    got = ocl.to_host(ocl.matmul_i2s(ocl.to_device(xq), ocl.to_device(xs), ocl.load_ternary(w)))
    want = ref.matmul_i2s(xq, xs, ref.load_ternary(w))
    if ocl.runtime.features.fp64:
        np.testing.assert_array_equal(got, want)
    else:
        assert_close(got, want, rtol=1e-6)


@pytest.mark.parametrize(
    "t,n,k", [(9, 1, 1), (9, 33, 65), (40, 70, 130), (33, 32, 64), (64, 5, 300)]
)
def test_matmul_i2s_gemm(ocl, ref, rng, t, n, k):
    w = ternary(rng, n, k)
    x = acts(rng, t, k)
    xq, xs = ref.quantize_act(x)
    got = ocl.to_host(ocl.matmul_i2s(ocl.to_device(xq), ocl.to_device(xs), ocl.load_ternary(w)))
    want = ref.matmul_i2s(xq, xs, ref.load_ternary(w))
    if ocl.runtime.features.fp64:
        np.testing.assert_array_equal(got, want)
    else:
        assert_close(got, want, rtol=1e-6)


@pytest.mark.parametrize("t,n,k", [(1, 5, 7), (3, 17, 129), (12, 40, 96)])
def test_linear(ocl, ref, rng, t, n, k):
    w = ternary(rng, n, k)
    x = acts(rng, t, k)
    got = ocl.to_host(ocl.linear(ocl.to_device(x), ocl.load_ternary(w)))
    assert_close(got, ref.linear(x, ref.load_ternary(w)), rtol=1e-6)


@pytest.mark.parametrize("t,n,k", [(1, 3, 5), (2, 17, 33), (3, 9, 200)])
def test_matmul_ternary_float(ocl, ref, rng, t, n, k):
    w = ternary(rng, n, k)
    x = acts(rng, t, k)
    got = ocl.to_host(ocl.matmul_ternary_float(ocl.to_device(x), ocl.load_ternary(w)))
    assert_close(got, ref.matmul_ternary_float(x, ref.load_ternary(w)), rtol=1e-4, atol_scale=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("t,n,k", [(1, 1, 1), (1, 13, 7), (5, 31, 130), (2, 100, 64)])
def test_matmul_dense(ocl, ref, rng, dtype, t, n, k):
    table = acts(rng, n, k, scale=0.5).astype(dtype)
    x = acts(rng, t, k)
    got = ocl.to_host(ocl.matmul_dense(ocl.to_device(x), ocl.to_device(table)))
    assert_close(got, ref.matmul_dense(x, table), rtol=1e-4, atol_scale=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_embedding(ocl, ref, rng, dtype):
    table = acts(rng, 11, 13).astype(dtype)
    ids = np.array([0, 10, 3, 3, 7])
    got = ocl.to_host(ocl.embedding(ocl.to_device(table), ids))
    np.testing.assert_array_equal(got, ref.embedding(table, ids))
    with pytest.raises(ShapeError):
        ocl.embedding(ocl.to_device(table), np.array([11]))
    with pytest.raises(ShapeError):
        ocl.embedding(ocl.to_device(table), np.array([-1]))


@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (2, 64), (5, 513), (2, 3, 10)])
def test_rmsnorm(ocl, ref, rng, shape):
    x = acts(rng, *shape)
    w = acts(rng, shape[-1], scale=1.0)
    got = ocl.to_host(ocl.rmsnorm(ocl.to_device(x), ocl.to_device(w), 1e-6))
    assert_close(got, ref.rmsnorm(x, w, 1e-6), rtol=2e-6)


@pytest.mark.parametrize("style", ["neox", "norm"])
@pytest.mark.parametrize("t,h,d,rot", [(1, 1, 2, 2), (3, 2, 8, 8), (5, 3, 10, 6), (2, 4, 64, 64)])
def test_rope(ocl, ref, rng, style, t, h, d, rot):
    x = acts(rng, t, h, d)
    pos = np.arange(100, 100 + t) if t > 1 else np.array([4095])
    got = ocl.to_host(ocl.rope(ocl.to_device(x), pos, 10000.0, style, rot))
    assert_close(got, ref.rope(x, pos, 10000.0, style, rot), rtol=1e-5, atol_scale=1e-6)


def test_rope_rejects_bad_dims(ocl, rng):
    x = ocl.to_device(acts(rng, 2, 1, 8))
    with pytest.raises(ShapeError):
        ocl.rope(x, np.arange(2), 10000.0, "neox", 10)
    with pytest.raises(ShapeError):
        ocl.rope(x, np.arange(3), 10000.0, "neox", 8)
    with pytest.raises(UnsupportedOperationError):
        ocl.rope(x, np.arange(2), 10000.0, "bogus", 8)


@pytest.mark.parametrize(
    "t,hq,hkv,d,start,cap",
    [
        (1, 1, 1, 1, 0, 1),
        (1, 4, 2, 8, 5, 9),
        (3, 6, 2, 16, 0, 3),
        (4, 2, 1, 33, 70, 80),
        (2, 8, 8, 64, 130, 140),
    ],
)
def test_kv_store_and_attention(ocl, ref, rng, t, hq, hkv, d, start, cap):
    k_hist, v_hist = acts(rng, start, hkv, d), acts(rng, start, hkv, d)
    k_new, v_new = acts(rng, t, hkv, d), acts(rng, t, hkv, d)
    q = acts(rng, t, hq, d, scale=0.5)
    kc, vc = ocl.empty((cap, hkv, d)), ocl.empty((cap, hkv, d))
    rk, rv = np.zeros((cap, hkv, d), np.float32), np.zeros((cap, hkv, d), np.float32)
    for p, (cache, rcache, hist, new) in enumerate(
        [(kc, rk, k_hist, k_new), (vc, rv, v_hist, v_new)]
    ):
        if start:
            ocl.kv_store(cache, ocl.to_device(hist), 0)
            ref.kv_store(rcache, hist, 0)
        ocl.kv_store(cache, ocl.to_device(new), start)
        ref.kv_store(rcache, new, start)
        assert p in (0, 1)
    np.testing.assert_array_equal(ocl.to_host(kc), rk)
    np.testing.assert_array_equal(ocl.to_host(vc), rv)
    got = ocl.to_host(ocl.attention(ocl.to_device(q), kc, vc, start))
    assert_close(got, ref.attention(q, rk, rv, start), rtol=1e-4, atol_scale=1e-5)


def test_kv_store_out_of_range(ocl, rng):
    cache = ocl.empty((4, 2, 3))
    with pytest.raises(ShapeError):
        ocl.kv_store(cache, ocl.to_device(acts(rng, 2, 2, 3)), 3)
    with pytest.raises(ShapeError):
        ocl.kv_store(cache, ocl.to_device(acts(rng, 1, 3, 3)), 0)


@pytest.mark.parametrize("op", ["silu", "relu2"])
@pytest.mark.parametrize("shape", [(1,), (3, 7), (2, 3, 129)])
def test_unary(ocl, ref, rng, op, shape):
    x = acts(rng, *shape, scale=6.0)
    got = ocl.to_host(getattr(ocl, op)(ocl.to_device(x)))
    assert_close(got, getattr(ref, op)(x), rtol=2e-6)


@pytest.mark.parametrize("op", ["silu_mul", "relu2_mul", "add", "mul"])
@pytest.mark.parametrize("shape", [(1,), (3, 7), (2, 3, 129)])
def test_binary(ocl, ref, rng, op, shape):
    a, b = acts(rng, *shape, scale=6.0), acts(rng, *shape)
    got = ocl.to_host(getattr(ocl, op)(ocl.to_device(a), ocl.to_device(b)))
    assert_close(got, getattr(ref, op)(a, b), rtol=2e-6)


@pytest.mark.parametrize("op", ["add", "mul"])
def test_binary_broadcast_and_mismatch(ocl, ref, rng, op):
    a, b = acts(rng, 3, 5), acts(rng, 5)
    got = ocl.to_host(getattr(ocl, op)(ocl.to_device(a), ocl.to_device(b)))
    np.testing.assert_array_equal(got, getattr(ref, op)(a, b))
    with pytest.raises(ShapeError):
        getattr(ocl, op)(ocl.to_device(a), ocl.to_device(acts(rng, 3)))


def test_matmul_shape_errors(ocl, rng):
    w = ocl.load_ternary(ternary(rng, 4, 10))
    with pytest.raises(ShapeError):
        ocl.linear(ocl.to_device(acts(rng, 2, 11)), w)
    with pytest.raises(ShapeError):
        ocl.matmul_i2s(
            ocl.to_device(np.zeros((2, 10), np.int8)), ocl.to_device(np.ones(3, np.float32)), w
        )
    with pytest.raises(UnsupportedOperationError):
        ocl.matmul_i2s(
            ocl.to_device(np.zeros((2, 10), np.float32)), ocl.to_device(np.ones(2, np.float32)), w
        )
