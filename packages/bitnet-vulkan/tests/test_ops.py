"""Every op of the Vulkan provider against the numpy reference, on awkward shapes."""

from __future__ import annotations

import numpy as np
import pytest

from bitnet_core.errors import ShapeError, UnsupportedOperationError
from bitnet_core.hal.weights import TernaryWeight

RNG = np.random.default_rng(1234)
ROWS_COLS = [(1, 1), (1, 17), (3, 37), (5, 64), (2, 100), (7, 257)]


def close(got, want, rtol, atol=0.0):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape
    bound = atol * (np.abs(want).max() if want.size else 0) + rtol * np.abs(want)
    err = np.abs(got - want)
    assert np.isfinite(got).all()
    assert (err <= bound).all(), (
        f"max err {err.max()} (bound {bound[err.argmax() // 1 if err.ndim == 1 else ()]})"
    )


def ternary(rows, cols, rng=RNG):
    codes = rng.integers(-1, 2, (rows, cols)).astype(np.int8)
    return TernaryWeight.from_codes(codes, rng.uniform(0.1, 2.0, rows).astype(np.float32))


def test_roundtrip_dtypes(vk):
    for a in [
        RNG.standard_normal((3, 5)).astype(np.float32),
        RNG.standard_normal(7).astype(np.float16),
        RNG.standard_normal((4, 9)).astype(np.float16),
        RNG.integers(-128, 127, (3, 21)).astype(np.int8),
        np.arange(11, dtype=np.int32),
    ]:
        back = vk.to_host(vk.to_device(a))
        want = a.astype(np.float32) if a.dtype == np.float16 and a.ndim == 1 else a
        assert back.dtype == want.dtype and np.array_equal(back, want)


def test_empty_is_zero(vk):
    assert not vk.to_host(vk.empty((3, 2, 5))).any()


@pytest.mark.parametrize("rows,cols", ROWS_COLS)
def test_quantize_act(vk, ref, rows, cols):
    x = (RNG.standard_normal((rows, cols)) * RNG.uniform(0.01, 100)).astype(np.float32)
    x[0, 0] = 0.0
    xq, xs = vk.quantize_act(vk.to_device(x))
    rq, rs = ref.quantize_act(x)
    assert np.array_equal(vk.to_host(xs), rs)  # correctly rounded, as numpy
    assert np.array_equal(vk.to_host(xq), rq)


def test_quantize_act_zero_row_and_ties(vk, ref):
    x = np.zeros((2, 9), np.float32)
    x[1] = [127, 0.5, 1.5, 2.5, -0.5, -1.5, -126.5, 3, 0]  # scale 1: exact ties round to even
    xq, xs = vk.quantize_act(x)
    rq, rs = ref.quantize_act(x)
    assert np.array_equal(vk.to_host(xq), rq) and np.array_equal(vk.to_host(xs), rs)


@pytest.mark.parametrize(
    "tokens,rows,cols",
    [(1, 1, 1), (1, 33, 17), (3, 29, 37), (2, 64, 256), (5, 7, 300), (1, 130, 1000)],
)
def test_matmul_i2s_both_paths(vk_matmul, ref, tokens, rows, cols):
    w = ternary(rows, cols)
    x = RNG.standard_normal((tokens, cols)).astype(np.float32)
    rq, rs = ref.quantize_act(x)
    got = vk_matmul.to_host(
        vk_matmul.matmul_i2s(
            vk_matmul.to_device(rq), vk_matmul.to_device(rs), vk_matmul.load_ternary(w)
        )
    )
    close(got, ref.matmul_i2s(rq, rs, ref.load_ternary(w)), rtol=1e-6, atol=1e-7)
    close(
        vk_matmul.to_host(vk_matmul.linear(x, vk_matmul.load_ternary(w))),
        ref.linear(x, ref.load_ternary(w)),
        rtol=1e-6,
        atol=1e-7,
    )


def test_matmul_i2s_extreme_activations(vk_matmul, ref):
    """All -128 codes times all -1 weights: the largest int32 sums the shapes allow."""
    cols = 4099
    w = TernaryWeight.from_codes(-np.ones((3, cols), np.int8), np.float32(0.5))
    xq = np.full((2, cols), -128, np.int8)
    xs = np.array([1.0, 3.0], np.float32)
    got = vk_matmul.to_host(vk_matmul.matmul_i2s(xq, xs, vk_matmul.load_ternary(w)))
    close(got, ref.matmul_i2s(xq, xs, ref.load_ternary(w)), rtol=1e-6)


@pytest.mark.parametrize("tokens,rows,cols", [(1, 1, 3), (3, 29, 37), (2, 17, 513)])
def test_matmul_ternary_float(vk, ref, tokens, rows, cols):
    w = ternary(rows, cols)
    x = RNG.standard_normal((tokens, cols)).astype(np.float32)
    got = vk.to_host(vk.matmul_ternary_float(x, vk.load_ternary(w)))
    want = ref.matmul_ternary_float(x, ref.load_ternary(w))
    bound = 1e-5 * (np.abs(x) @ np.abs(w.dense()).T)
    assert (np.abs(got - want) <= bound + 1e-30).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("tokens,n,k", [(1, 1, 1), (1, 50, 33), (3, 129, 64), (2, 7, 301)])
def test_matmul_dense(vk, ref, dtype, tokens, n, k):
    table = RNG.standard_normal((n, k)).astype(dtype)
    x = RNG.standard_normal((tokens, k)).astype(np.float32)
    got = vk.to_host(vk.matmul_dense(x, vk.to_device(table)))
    want = ref.matmul_dense(x, table)
    bound = 1e-5 * (np.abs(x) @ np.abs(table.astype(np.float64)).T)
    assert (np.abs(got - want) <= bound).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_embedding(vk, ref, dtype):
    table = RNG.standard_normal((13, 7)).astype(dtype)
    ids = np.array([0, 12, 5, 5, 1])
    assert np.array_equal(
        vk.to_host(vk.embedding(vk.to_device(table), ids)), ref.embedding(table, ids)
    )
    with pytest.raises(ShapeError):
        vk.embedding(vk.to_device(table), np.array([13]))


@pytest.mark.parametrize("rows,cols", ROWS_COLS)
def test_rmsnorm(vk, ref, rows, cols):
    x = RNG.standard_normal((rows, cols)).astype(np.float32) * 3
    w = RNG.standard_normal(cols).astype(np.float32)
    close(vk.to_host(vk.rmsnorm(x, w, 1e-5)), ref.rmsnorm(x, w, 1e-5), rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("style", ["neox", "norm"])
@pytest.mark.parametrize("t,h,d,rot", [(1, 1, 2, 2), (3, 2, 8, 8), (2, 3, 10, 6), (5, 4, 64, 64)])
def test_rope(vk, ref, style, t, h, d, rot):
    x = RNG.standard_normal((t, h, d)).astype(np.float32)
    pos = np.arange(1000, 1000 + t)
    got = vk.to_host(vk.rope(x, pos, 10000.0, style, rot))
    want = ref.rope(x, pos, 10000.0, style, rot)
    close(got, want, rtol=0, atol=2e-6)
    assert np.array_equal(got[..., rot:], x[..., rot:])


def test_kv_store_leaves_other_rows(vk):
    cache = vk.to_device(np.full((9, 2, 3), np.nan, np.float32))
    x = RNG.standard_normal((3, 2, 3)).astype(np.float32)
    vk.kv_store(cache, vk.to_device(x), 4)
    host = vk.to_host(cache)
    assert np.array_equal(host[4:7], x) and np.isnan(host[:4]).all() and np.isnan(host[7:]).all()
    with pytest.raises(ShapeError):
        vk.kv_store(cache, vk.to_device(x), 7)


@pytest.mark.parametrize(
    "t,hq,hkv,d,start,cap",
    [
        (1, 1, 1, 1, 0, 1),
        (1, 4, 2, 8, 5, 8),
        (3, 6, 2, 16, 0, 3),
        (4, 3, 3, 64, 70, 80),
        (2, 2, 1, 130, 3, 9),
    ],
)
def test_attention(vk, ref, t, hq, hkv, d, start, cap):
    k = RNG.standard_normal((cap, hkv, d)).astype(np.float32)
    v = RNG.standard_normal((cap, hkv, d)).astype(np.float32)
    q = RNG.standard_normal((t, hq, d)).astype(np.float32)
    got = vk.to_host(vk.attention(q, vk.to_device(k), vk.to_device(v), start))
    close(got, ref.attention(q, k, v, start), rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize("shape", [(1,), (3, 37), (2, 3, 129), (1000,)])
def test_elementwise(vk, ref, shape):
    a = (RNG.standard_normal(shape) * 4).astype(np.float32)
    b = RNG.standard_normal(shape).astype(np.float32)
    close(vk.to_host(vk.silu(a)), ref.silu(a), rtol=1e-5, atol=1e-6)
    close(vk.to_host(vk.silu_mul(a, b)), ref.silu_mul(a, b), rtol=1e-5, atol=1e-6)
    close(vk.to_host(vk.relu2(a)), ref.relu2(a), rtol=1e-6)
    close(vk.to_host(vk.relu2_mul(a, b)), ref.relu2_mul(a, b), rtol=1e-6)
    assert np.array_equal(vk.to_host(vk.add(a, b)), ref.add(a, b))
    assert np.array_equal(vk.to_host(vk.mul(a, b)), ref.mul(a, b))


def test_broadcast_add_mul(vk, ref):
    a = RNG.standard_normal((4, 6)).astype(np.float32)
    b = RNG.standard_normal(6).astype(np.float32)
    assert np.array_equal(vk.to_host(vk.add(a, b)), ref.add(a, b))
    assert np.array_equal(vk.to_host(vk.mul(b, a)), ref.mul(b, a))
    with pytest.raises(ShapeError):
        vk.add(a, RNG.standard_normal(5).astype(np.float32))
    with pytest.raises(UnsupportedOperationError):
        vk.add(a, RNG.standard_normal((4, 1)).astype(np.float32))


def test_shape_errors(vk):
    w = vk.load_ternary(ternary(3, 5))
    with pytest.raises(ShapeError):
        vk.linear(np.zeros((2, 4), np.float32), w)
    with pytest.raises(ShapeError):
        vk.rope(np.zeros((2, 3), np.float32), np.arange(2), 1e4, "neox", 2)
    with pytest.raises(UnsupportedOperationError):
        vk.rope(np.zeros((1, 1, 4), np.float32), np.arange(1), 1e4, "gptj", 4)
    with pytest.raises(ShapeError):
        vk.attention(np.zeros((1, 3, 4), np.float32), vk.empty((4, 2, 4)), vk.empty((4, 2, 4)), 0)


def test_reshape_views_share_the_buffer(vk):
    x = RNG.standard_normal((2, 12)).astype(np.float32)
    d = vk.to_device(x)
    v = vk.reshape(d, (2, 3, 4))
    assert v.shape == (2, 3, 4) and np.array_equal(vk.to_host(v), x.reshape(2, 3, 4))
    with pytest.raises(ShapeError):
        d.reshape(5, 5)


def test_quantize_act_scales_correctly_rounded_many_rows(vk, ref):
    """Thousands of row maxima: the scale is numpy's correctly rounded 127 / amax every time."""
    x = RNG.standard_normal((3000, 5)).astype(np.float32)
    x *= np.exp(RNG.uniform(-12, 12, (3000, 1))).astype(np.float32)
    xq, xs = vk.quantize_act(x)
    rq, rs = ref.quantize_act(x)
    assert np.array_equal(vk.to_host(xs), rs)
    assert np.array_equal(vk.to_host(xq), rq)


@pytest.mark.parametrize("layout", [(32, 4), (8, 16), (1, 64), (64, 1)])
def test_matmul_workgroup_layouts(vk, ref, monkeypatch, layout):
    """Every matmul shader is right for the GPU and the CPU-device workgroup shapes alike."""
    import bitnet_vulkan.provider as provider_module

    monkeypatch.setattr(provider_module, "MATMUL_CPU", layout)
    monkeypatch.setattr(provider_module, "MATMUL_GPU", layout)
    w = ternary(70, 45)
    x = RNG.standard_normal((3, 45)).astype(np.float32)
    table = RNG.standard_normal((70, 45)).astype(np.float16)
    close(
        vk.to_host(vk.linear(x, vk.load_ternary(w))),
        ref.linear(x, ref.load_ternary(w)),
        rtol=1e-6,
        atol=1e-7,
    )
    want = ref.matmul_ternary_float(x, ref.load_ternary(w))
    close(vk.to_host(vk.matmul_ternary_float(x, vk.load_ternary(w))), want, rtol=1e-5, atol=1e-6)
    want = ref.matmul_dense(x, table)
    close(vk.to_host(vk.matmul_dense(x, vk.to_device(table))), want, rtol=1e-5, atol=1e-6)
