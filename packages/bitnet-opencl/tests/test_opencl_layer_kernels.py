"""One token's four-launch layer (kernels/layer.cl) on awkward shapes: against the numpy
reference, and bit for bit against the ten-launch chain of fused.cl that batched steps
still run (rmsnorm_quant, gemv_i2s, rope_store, attn_split, attn_merge_norm_quant,
gemv_i2s_add, act_norm_quant), with groups larger than the sums' sizes and several
lanes a row (a GPU's plan) as well as one (a CPU's)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from ocl_helpers import acts, run_kernel, ternary

EPS = 1e-5
WG = 64
i32, f32 = np.int32, np.float32


def _acc(ocl) -> int:
    return 8 if ocl.runtime.features.fp64 else 4


def _old_norm_quant(ocl, x, w, k):
    """rmsnorm_quant as the ten-launch step runs it: (xq, xs, its group size)."""
    lsz = ocl.runtime.reduce_group("rmsnorm_quant", WG, k)
    xq, xs = ocl._alloc((1, k), np.int8), ocl._alloc((1,))
    run_kernel(
        ocl, "rmsnorm_quant", (lsz,), (lsz,), x, w, xq.buffer, xs.buffer, i32(k), f32(EPS),
        ocl._local(lsz * _acc(ocl)),
    )  # fmt: skip
    return xq, xs, lsz


def _old_gemv(ocl, name, w, xq, xs, y):
    lanes, wg = ocl.runtime.row_plan(name, w.blocks_per_row)
    run_kernel(
        ocl, name, (-(-w.rows // (wg // lanes)) * wg, 1), (wg, 1), w.packed,
        i32(w.blocks_per_row), xq.buffer, xs.buffer, w.scales, y.buffer, i32(w.rows),
        i32(w.cols), i32(lanes), ocl._local(wg * 4),
    )  # fmt: skip


def _group(vls: int, lanes: int, big: bool) -> int:
    """A launch's group: the sums' size (or 128, larger) and room for `lanes` a row."""
    return max(vls, lanes, 128 if big else 1)


SHAPES = [  # hq, hkv, d, k, rot, style, cap, pos, splits
    (6, 2, 20, 120, 20, "neox", 64, 0, 1),
    (4, 1, 9, 65, 6, "norm", 300, 63, 3),
    (3, 3, 7, 200, 6, "neox", 129, 128, 5),
    (2, 1, 4, 1, 2, "norm", 9, 8, 2),
    (4, 1, 16, 96, 16, "neox", 300, 200, 2),  # 150 keys a split: chunks of the group
]


@pytest.mark.parametrize("kv", [np.float32, np.float16])
@pytest.mark.parametrize("lanes,big", [(1, False), (1, True), (4, False), (4, True), (16, True)])
@pytest.mark.parametrize("shape", SHAPES, ids=[f"{s[0]}-{s[2]}-{s[3]}-{s[6]}" for s in SHAPES])
def test_qkv_attend(ocl, ref, rng, kv, lanes, big, shape):
    """norm + int8, q|k|v rows, rope, K/V store and split attention in one launch: the
    reference's attention output; att and the caches bit for bit the chain's."""
    _check_qkv_attend(ocl, ref, rng, kv, lanes, big, *shape)


@pytest.mark.parametrize("kv", [np.float32, np.float16])
def test_float32_build_qkv_attend_and_norm_gemv(ocl_no_fp64, ref, rng, kv):
    """Without float64 the sums' order shows in the bits: a group of 128 items sums as
    the chain's groups of 64 (and fewer) did."""
    _check_qkv_attend(ocl_no_fp64, ref, rng, kv, 4, True, *SHAPES[-1])
    _check_qkv_attend(ocl_no_fp64, ref, rng, kv, 1, True, *SHAPES[2])
    _check_norm_gemv_add(ocl_no_fp64, ref, rng, 4, True, 130, 6912)


def _check_qkv_attend(ocl, ref, rng, kv, lanes, big, hq, hkv, d, k, rot, style, cap, pos, splits):
    x, nw = acts(rng, 1, k), acts(rng, k, scale=1.0)
    host_w = ternary(rng, (hq + 2 * hkv) * d, k)
    w = ocl.load_ternary(host_w)
    kc0 = acts(rng, cap, hkv, d, scale=1.0).astype(kv)
    vc0 = acts(rng, cap, hkv, d).astype(kv)
    cs, _ = ocl._rope_table(np.arange(cap), 10000.0, max(rot, 2))
    meta = ocl.to_device(np.array([5, pos], np.int32))
    span, scale = -(-cap // splits), f32(1 / math.sqrt(d))
    f16 = "_f16" if kv == np.float16 else ""
    rt, acc = ocl.runtime, _acc(ocl)
    dx, dnw = ocl.to_device(x), ocl.to_device(nw)
    alsz = rt.reduce_group("attn_split", WG, span)

    # the ten-launch chain: rmsnorm_quant, gemv_i2s, rope_store, attn_split, attn_merge
    kc, vc = ocl.to_device(kc0), ocl.to_device(vc0)
    xq, xs, nvls = _old_norm_quant(ocl, dx.buffer, dnw.buffer, k)
    qkv, q = ocl._alloc((1, w.rows)), ocl._alloc((1, hq * d))
    _old_gemv(ocl, "gemv_i2s", w, xq, xs, qkv)
    run_kernel(
        ocl, "rope_store" + f16, (d, hq + 2 * hkv), None, qkv.buffer, cs.buffer, meta.buffer,
        i32(1), i32(0), q.buffer, kc.buffer, vc.buffer, i32(hq), i32(hkv), i32(d), i32(rot),
        i32(style == "neox"),
    )  # fmt: skip
    po, pml = ocl._alloc((hq * splits * d,)), ocl._alloc((hq * splits * 2,))
    run_kernel(
        ocl, "attn_split" + f16, (alsz * hq, splits), (alsz, 1), q.buffer, kc.buffer, vc.buffer,
        meta.buffer, i32(1), i32(0), i32(0), po.buffer, pml.buffer, i32(hq), i32(hkv), i32(d),
        scale, i32(span), ocl._local(d * 4), ocl._local(d * 4), ocl._local(alsz * 4),
        ocl._local(alsz * 4),
    )  # fmt: skip
    att0 = ocl._alloc((1, hq * d))
    mlsz = rt.reduce_group("attn_merge_norm_quant", WG, hq * d)
    run_kernel(
        ocl, "attn_merge_norm_quant", (mlsz,), (mlsz,), po.buffer, pml.buffer, att0.buffer,
        acts(rng, hq * d), ocl._alloc((1, hq * d), np.int8).buffer,
        ocl._alloc((1,)).buffer, i32(hq), i32(d), i32(splits), f32(EPS), i32(0), i32(0),
        ocl._local(mlsz * acc),
    )  # fmt: skip
    want_kc, want_vc = ocl.to_host(kc), ocl.to_host(vc)

    # one launch
    kc, vc = ocl.to_device(kc0), ocl.to_device(vc0)
    wg = _group(max(nvls, alsz), lanes, big)
    att = ocl.to_device(np.full((1, hq * d), 7.0, np.float32))
    po2 = ocl._alloc((hq * splits * d,))
    pml2 = ocl._alloc((hq * splits * 2,))
    ct = 2 if f16 else 4
    run_kernel(
        ocl, "qkv_attend" + f16, (wg * hq,), (wg,), dx.buffer, dnw.buffer, i32(nvls), f32(EPS),
        w.packed, i32(w.blocks_per_row), w.scales, i32(k), i32(lanes), cs.buffer, meta.buffer,
        i32(1), kc.buffer, vc.buffer, i32(hq), i32(hkv), i32(d), i32(rot), i32(style == "neox"),
        scale, i32(span), i32(splits), i32(alsz), po2.buffer, pml2.buffer, att.buffer,
        ocl._local(w.blocks_per_row * 64), ocl._local(wg * acc), ocl._local(wg * 4),
        ocl._local(4 * d * 4), ocl._local(d * 4), ocl._local(wg * 4), ocl._local(d * ct),
        ocl._local(d * ct),
    )  # fmt: skip
    got = ocl.to_host(att)
    np.testing.assert_array_equal(got, ocl.to_host(att0))
    np.testing.assert_array_equal(ocl.to_host(kc), want_kc)
    np.testing.assert_array_equal(ocl.to_host(vc), want_vc)

    # the numpy reference: norm, int8, product, rope, store, attention
    rxq, rxs = ref.quantize_act(ref.rmsnorm(x, nw, EPS))
    heads = ref.matmul_i2s(rxq, rxs, ref.load_ternary(host_w)).reshape(hq + 2 * hkv, d)
    p = np.array([pos])
    rq = ref.rope(heads[None, :hq], p, 10000.0, style, rot)
    rk = ref.rope(heads[None, hq : hq + hkv], p, 10000.0, style, rot)
    keys, values = kc0.copy(), vc0.copy()
    keys[pos], values[pos] = rk[0].astype(kv), heads[hq + hkv :].astype(kv)
    want = ref.attention(rq, keys[: pos + 1], values[: pos + 1], pos).reshape(1, hq * d)
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3)
    tol = 1e-3 if f16 else 1e-6  # the product's last bit: float64 epilogues or not
    np.testing.assert_allclose(ocl.to_host(vc)[pos], values[pos], rtol=tol)
    others = np.arange(cap) != pos
    np.testing.assert_array_equal(ocl.to_host(kc)[others], kc0[others])


@pytest.mark.parametrize("lanes,big", [(1, False), (4, True), (16, True)])
@pytest.mark.parametrize("n,k", [(1, 1), (37, 63), (65, 65), (130, 200), (9, 6912)])
def test_norm_gemv_add(ocl, ref, rng, lanes, big, n, k):
    """y += W (rmsnorm(x) in int8): the reference's; bit for bit rmsnorm_quant + gemv_i2s_add."""
    _check_norm_gemv_add(ocl, ref, rng, lanes, big, n, k)


def _check_norm_gemv_add(ocl, ref, rng, lanes, big, n, k):
    x, nw, y0 = acts(rng, 1, k), acts(rng, k, scale=1.0), acts(rng, 1, n)
    host_w = ternary(rng, n, k)
    w = ocl.load_ternary(host_w)
    dx, dnw = ocl.to_device(x), ocl.to_device(nw)
    xq, xs, vls = _old_norm_quant(ocl, dx.buffer, dnw.buffer, k)
    chain = ocl.to_device(y0)
    _old_gemv(ocl, "gemv_i2s_add", w, xq, xs, chain)
    y, wg = ocl.to_device(y0), _group(vls, lanes, big)
    run_kernel(
        ocl, "norm_gemv_add", (-(-n // (wg // lanes)) * wg,), (wg,), dx.buffer, dnw.buffer,
        i32(vls), f32(EPS), w.packed, i32(w.blocks_per_row), w.scales, y.buffer, i32(n), i32(k),
        i32(lanes), ocl._local(w.blocks_per_row * 64), ocl._local(wg * _acc(ocl)),
        ocl._local(wg * 4),
    )  # fmt: skip
    got = ocl.to_host(y)
    np.testing.assert_array_equal(got, ocl.to_host(chain))
    rxq, rxs = ref.quantize_act(ref.rmsnorm(x, nw, EPS))
    want = y0 + ref.matmul_i2s(rxq, rxs, ref.load_ternary(host_w))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3 * np.abs(want).max())


@pytest.mark.parametrize("act", ["silu", "relu2"])
@pytest.mark.parametrize("lanes,big", [(1, False), (4, True)])
@pytest.mark.parametrize("f,k", [(1, 1), (37, 63), (200, 120), (257, 333)])
def test_norm_gemv_act(ocl, ref, rng, act, lanes, big, f, k):
    """f = act(gate) * up of gate|up times rmsnorm(x) in int8: the reference's; bit for
    bit rmsnorm_quant + gemv_i2s + act_norm_quant's f."""
    x, nw = acts(rng, 1, k), acts(rng, k, scale=1.0)
    host_w = ternary(rng, 2 * f, k)
    w = ocl.load_ternary(host_w)
    dx, dnw = ocl.to_device(x), ocl.to_device(nw)
    relu2 = i32(act == "relu2")
    xq, xs, vls = _old_norm_quant(ocl, dx.buffer, dnw.buffer, k)
    gu, chain = ocl._alloc((1, 2 * f)), ocl._alloc((1, f))
    _old_gemv(ocl, "gemv_i2s", w, xq, xs, gu)
    lsz = ocl.runtime.reduce_group("act_norm_quant", WG, f)
    run_kernel(
        ocl, "act_norm_quant", (lsz,), (lsz,), gu.buffer, chain.buffer, acts(rng, f),
        ocl._alloc((1, f), np.int8).buffer, ocl._alloc((1,)).buffer, i32(f), relu2, f32(EPS),
        ocl._local(lsz * _acc(ocl)),
    )  # fmt: skip
    out, wg = ocl.to_device(np.full((1, f), 9.0, np.float32)), _group(vls, lanes, big)
    run_kernel(
        ocl, "norm_gemv_act", (-(-f // (wg // lanes)) * wg,), (wg,), dx.buffer, dnw.buffer,
        i32(vls), f32(EPS), w.packed, i32(w.blocks_per_row), w.scales, out.buffer, i32(f), i32(k),
        i32(lanes), relu2, ocl._local(w.blocks_per_row * 64), ocl._local(wg * _acc(ocl)),
        ocl._local(wg * 4),
    )  # fmt: skip
    got = ocl.to_host(out)
    np.testing.assert_array_equal(got, ocl.to_host(chain))
    rxq, rxs = ref.quantize_act(ref.rmsnorm(x, nw, EPS))
    g_u = ref.matmul_i2s(rxq, rxs, ref.load_ternary(host_w))
    want = (ref.silu_mul if act == "silu" else ref.relu2_mul)(g_u[:, :f], g_u[:, f:])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3 * np.abs(want).max())
