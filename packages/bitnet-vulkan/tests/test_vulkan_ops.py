"""Vulkan-specific op checks (the conformance kit, test_conformance.py, covers every op).

Here: both matmul_i2s paths (integer dot product and plain integer math), every
matmul workgroup layout, exactly rounded activation scales, the padded int8
layout, attention's per-thread output slots, broadcasting, and views.
"""

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
def test_matmul_i2s_every_path(vk_matmul, ref, tokens, rows, cols):
    w = ternary(rows, cols)
    x = RNG.standard_normal((tokens, cols)).astype(np.float32)
    rq, rs = ref.quantize_act(x)
    mark = vk_matmul.trace.mark()
    got = vk_matmul.to_host(
        vk_matmul.matmul_i2s(
            vk_matmul.to_device(rq), vk_matmul.to_device(rs), vk_matmul.load_ternary(w)
        )
    )
    shader = "matmul_i2s_dot" if vk_matmul.context.use_int_dot else "matmul_i2s"
    ran = [k for k in vk_matmul.trace.kernels_since(mark) if k.startswith("matmul")]
    assert ran and all(k.startswith(shader) and ("_dot" in k) == ("_dot" in shader) for k in ran)
    close(got, ref.matmul_i2s(rq, rs, ref.load_ternary(w)), rtol=1e-6, atol=1e-7)
    close(
        vk_matmul.to_host(vk_matmul.linear(x, vk_matmul.load_ternary(w))),
        ref.linear(x, ref.load_ternary(w)),
        rtol=1e-6,
        atol=1e-7,
    )


def test_matmul_dense_every_path(vk_matmul, ref):
    for dtype in (np.float16, np.float32):
        table = RNG.standard_normal((131, 67)).astype(dtype)
        x = RNG.standard_normal((2, 67)).astype(np.float32)
        got = vk_matmul.to_host(vk_matmul.matmul_dense(x, vk_matmul.to_device(table)))
        want = ref.matmul_dense(x, table)
        assert (np.abs(got - want) <= 1e-5 * (np.abs(x) @ np.abs(table.astype(np.float64)).T)).all()


@pytest.mark.parametrize("sg_wg", [32, 64, 128])
def test_subgroup_workgroup_sizes(vk, ref, monkeypatch, sg_wg):
    """The subgroup shaders take any workgroup size: rows follow gl_SubgroupID / gl_NumSubgroups."""
    if not vk.context.use_subgroup:
        pytest.skip("subgroup matmuls are not used on this device")
    import bitnet_vulkan.launch as provider_module

    monkeypatch.setattr(provider_module, "MATMUL_SG_CPU", sg_wg)
    monkeypatch.setattr(provider_module, "MATMUL_SG_GPU", sg_wg)
    w = ternary(53, 200)
    x = RNG.standard_normal((2, 200)).astype(np.float32)
    close(
        vk.to_host(vk.linear(x, vk.load_ternary(w))),
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


def test_broadcast_add_mul(vk, ref):
    a = RNG.standard_normal((4, 6)).astype(np.float32)
    b = RNG.standard_normal(6).astype(np.float32)
    assert np.array_equal(vk.to_host(vk.add(a, b)), ref.add(a, b))
    assert np.array_equal(vk.to_host(vk.mul(b, a)), ref.mul(b, a))
    with pytest.raises(ShapeError):
        vk.add(a, RNG.standard_normal(5).astype(np.float32))
    with pytest.raises(UnsupportedOperationError):
        vk.add(a, RNG.standard_normal((4, 1)).astype(np.float32))


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
    import bitnet_vulkan.launch as provider_module

    monkeypatch.setattr(provider_module, "MATMUL_CPU", layout)
    monkeypatch.setattr(provider_module, "MATMUL_GPU", layout)
    monkeypatch.setattr(vk.context, "use_subgroup", False)  # the shared-memory shaders
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


def test_linears_of_one_input_share_its_quantization(vk, ref):
    w1, w2 = ternary(9, 40), ternary(11, 40)
    x = vk.to_device(RNG.standard_normal((2, 40)).astype(np.float32))
    before = vk.stream.stats["dispatches"]
    a, b = vk.linear(x, vk.load_ternary(w1)), vk.linear(x, vk.load_ternary(w2))
    assert vk.stream.stats["dispatches"] - before == 3  # one quantize_act, two matmuls
    hx = vk.to_host(x)
    close(vk.to_host(a), ref.linear(hx, ref.load_ternary(w1)), rtol=1e-6, atol=1e-7)
    close(vk.to_host(b), ref.linear(hx, ref.load_ternary(w2)), rtol=1e-6, atol=1e-7)
    # an array kv_store writes into is quantized afresh
    cache = vk.to_device(np.zeros((2, 40), np.float32))
    wv = vk.load_ternary(w1)
    vk.linear(cache, wv)
    new = RNG.standard_normal((2, 40)).astype(np.float32)
    vk.kv_store(cache, vk.to_device(new), 0)
    close(
        vk.to_host(vk.linear(cache, wv)),
        ref.linear(new, ref.load_ternary(w1)),
        rtol=1e-6,
        atol=1e-7,
    )


@pytest.mark.parametrize("rows,cols", [(1, 1), (3, 37), (70, 300)])
def test_row_ops_every_path(vk_matmul, ref, rows, cols):
    """rmsnorm and quantize_act, shared-memory and subgroup versions alike."""
    x = (RNG.standard_normal((rows, cols)) * 7).astype(np.float32)
    w = RNG.standard_normal(cols).astype(np.float32)
    close(
        vk_matmul.to_host(vk_matmul.rmsnorm(x, w, 1e-5)),
        ref.rmsnorm(x, w, 1e-5),
        rtol=2e-5,
        atol=1e-6,
    )
    xq, xs = vk_matmul.quantize_act(x)
    rq, rs = ref.quantize_act(x)
    assert np.array_equal(vk_matmul.to_host(xs), rs) and np.array_equal(vk_matmul.to_host(xq), rq)


def test_matmuls_on_buffers_over_a_mebibyte(vk, ref):
    """Weights and tables big enough for buffers of their own (>= 1 MiB), several tokens."""
    w = ternary(3000, 1600)  # 1.2 MB of 2-bit codes
    x = RNG.standard_normal((5, 1600)).astype(np.float32)
    got = vk.to_host(vk.linear(x, vk.load_ternary(w)))
    close(got, ref.linear(x, ref.load_ternary(w)), rtol=1e-6, atol=1e-7)
    table = RNG.standard_normal((4100, 300)).astype(np.float32)  # 4.9 MB
    x2 = RNG.standard_normal((2, 300)).astype(np.float32)
    got = vk.to_host(vk.matmul_dense(x2, vk.to_device(table)))
    want = ref.matmul_dense(x2, table)
    assert (np.abs(got - want) <= 1e-5 * (np.abs(x2) @ np.abs(table.astype(np.float64)).T)).all()
