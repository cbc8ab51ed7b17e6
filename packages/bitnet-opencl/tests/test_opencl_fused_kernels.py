"""The fused decode-step kernels (kernels/fused.cl, gemv_i2s_add) against the numpy
reference and the unfused OpenCL ops, on awkward shapes."""

from __future__ import annotations

import math

import numpy as np
import pytest
from ocl_helpers import acts, ternary
from ocl_helpers import run_kernel as _run

from bitnet_core.testing.batching import assert_row_as_alone
from bitnet_opencl.runner import fuse_weights

EPS = 1e-5
WG = 64


def _acc(ocl) -> int:
    return 8 if ocl.runtime.features.fp64 else 4


def _norm_quant_ref(ref, x, w):
    return ref.quantize_act(ref.rmsnorm(x, w, EPS))


def _assert_codes(got_q, got_s, want_q, want_s):
    """Scales to float32 rounding; codes equal but for a rounding tie at most one apart."""
    np.testing.assert_allclose(got_s, want_s, rtol=1e-5)
    diff = np.abs(got_q.astype(np.int32) - want_q.astype(np.int32))
    assert diff.max() <= 1 and (diff > 0).mean() < 0.01


@pytest.mark.parametrize("t,k", [(1, 1), (1, 63), (2, 64), (3, 65), (1, 333), (1, 6912)])
def test_rmsnorm_quant(ocl, ref, rng, t, k):
    x, w = acts(rng, t, k), acts(rng, k, scale=1.0)
    dx, dw = ocl.to_device(x), ocl.to_device(w)
    xq, xs = ocl._alloc((t, k), np.int8), ocl._alloc((t,))
    lsz = ocl.runtime.reduce_group("rmsnorm", WG, k)
    _run(
        ocl, "rmsnorm_quant", (lsz * t,), (lsz,), dx.buffer, dw.buffer, xq.buffer, xs.buffer,
        np.int32(k), np.float32(EPS), ocl._local(lsz * _acc(ocl)),
    )  # fmt: skip
    got_q, got_s = ocl.to_host(xq), ocl.to_host(xs)
    # the unfused ops on the device: the same arithmetic, bit for bit
    uq, us = ocl.quantize_act(ocl.rmsnorm(dx, dw, EPS))
    np.testing.assert_array_equal(got_q, ocl.to_host(uq))
    np.testing.assert_array_equal(got_s, ocl.to_host(us))
    _assert_codes(got_q, got_s, *_norm_quant_ref(ref, x, w))


@pytest.mark.parametrize("act", ["silu", "relu2"])
@pytest.mark.parametrize("t,f", [(1, 1), (1, 200), (2, 255), (1, 257)])
def test_act_norm_quant(ocl, ref, rng, act, t, f):
    gu, w = acts(rng, t, 2 * f), acts(rng, f, scale=1.0)
    dgu = ocl.to_device(gu)
    out_f, xq, xs = ocl._alloc((t, f)), ocl._alloc((t, f), np.int8), ocl._alloc((t,))
    lsz = ocl.runtime.reduce_group("rmsnorm", WG, f)
    _run(
        ocl, "act_norm_quant", (lsz * t,), (lsz,), dgu.buffer, out_f.buffer,
        w, xq.buffer, xs.buffer, np.int32(f),
        np.int32(0 if act == "silu" else 1), np.float32(EPS), ocl._local(lsz * _acc(ocl)),
    )  # fmt: skip
    mul = ref.silu_mul if act == "silu" else ref.relu2_mul
    want_f = mul(gu[:, :f], gu[:, f:])
    np.testing.assert_allclose(ocl.to_host(out_f), want_f, rtol=2e-6, atol=1e-6)
    _assert_codes(ocl.to_host(xq), ocl.to_host(xs), *_norm_quant_ref(ref, want_f, w))


@pytest.mark.parametrize("n,k", [(1, 1), (37, 63), (64, 64), (65, 65), (130, 200)])
def test_gemv_i2s_add_and_fused_weights(ocl, ref, rng, n, k):
    """y += x @ W.T through weights stacked by rows (q|k|v) equals the parts' products;
    the parts (views of the stacked weight where aligned, else copies) still compute theirs."""
    parts = [ternary(rng, r, k) for r in (n, max(1, n // 3), 1)]
    on_device = [ocl.load_ternary(p) for p in parts]
    fused = fuse_weights(ocl.runtime, on_device)
    xq, xs = ref.quantize_act(acts(rng, 1, k))
    y0 = acts(rng, 1, fused.rows)
    y = ocl.to_device(y0)
    lanes, wg = ocl.runtime.row_plan("gemv_i2s_add", fused.blocks_per_row)
    _run(
        ocl, "gemv_i2s_add", (-(-fused.rows // (wg // lanes)) * wg, 1), (wg, 1), fused.packed,
        np.int32(fused.blocks_per_row), xq, xs,
        fused.scales, y.buffer, np.int32(fused.rows), np.int32(k), np.int32(lanes),
        ocl._local(wg * 4),
    )  # fmt: skip
    want = y0 + np.concatenate([ref.matmul_i2s(xq, xs, ref.load_ternary(p)) for p in parts], axis=1)
    np.testing.assert_allclose(ocl.to_host(y), want, rtol=1e-6, atol=1e-5)
    for host, dev in zip(parts, on_device, strict=True):
        got = ocl.to_host(ocl.matmul_i2s(xq, xs, dev))
        want = ref.matmul_i2s(xq, xs, ref.load_ternary(host))
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("kv", [np.float32, np.float16])
@pytest.mark.parametrize("style", ["neox", "norm"])
@pytest.mark.parametrize("hq,hkv,d,rot,pos", [(6, 2, 20, 20, 0), (4, 1, 9, 6, 37), (1, 1, 2, 2, 5)])
def test_rope_store(ocl, ref, rng, kv, style, hq, hkv, d, rot, pos):
    """q rotated; k rotated and v stored at row pos of a float32 or float16 cache
    (rounded to nearest even, as numpy's astype)."""
    cap, theta = 41, 10000.0
    qkv = acts(rng, 1, (hq + 2 * hkv) * d)
    kc0, vc0 = acts(rng, cap, hkv, d).astype(kv), acts(rng, cap, hkv, d).astype(kv)
    kc, vc = ocl.to_device(kc0), ocl.to_device(vc0)
    q = ocl._alloc((1, hq * d))
    cs, _ = ocl._rope_table(np.arange(cap), theta, max(rot, 2))
    meta = ocl.to_device(np.array([123, pos], np.int32))
    name = "rope_store_f16" if kv == np.float16 else "rope_store"
    _run(
        ocl, name, (d, hq + 2 * hkv), None, qkv, cs.buffer,
        meta.buffer, np.int32(1), np.int32(0), q.buffer, kc.buffer, vc.buffer, np.int32(hq),
        np.int32(hkv),
        np.int32(d), np.int32(rot), np.int32(1 if style == "neox" else 0),
    )  # fmt: skip
    heads = qkv.reshape(hq + 2 * hkv, d)
    p = np.array([pos])
    want_q = ref.rope(heads[None, :hq], p, theta, style, rot)
    want_k = ref.rope(heads[None, hq : hq + hkv], p, theta, style, rot)
    np.testing.assert_allclose(ocl.to_host(q).reshape(1, hq, d), want_q, rtol=1e-5, atol=1e-5)
    kc1, vc1 = ocl.to_host(kc), ocl.to_host(vc)
    tol = 1e-5 if kv == np.float32 else 1e-3
    np.testing.assert_allclose(kc1[pos], want_k[0].astype(kv), rtol=tol, atol=tol)
    np.testing.assert_array_equal(vc1[pos], heads[hq + hkv :].astype(kv))
    others = np.arange(cap) != pos  # no other row is touched
    np.testing.assert_array_equal(kc1[others], kc0[others])
    np.testing.assert_array_equal(vc1[others], vc0[others])


@pytest.mark.parametrize("kv", [np.float32, np.float16])
@pytest.mark.parametrize(
    "hq,hkv,d,cap,pos,splits",
    [(6, 2, 20, 64, 0, 1), (4, 1, 9, 300, 63, 3), (20, 5, 16, 256, 255, 2), (3, 3, 7, 129, 128, 5)],
)
def test_split_attention_merge_norm_quant(ocl, ref, rng, kv, hq, hkv, d, cap, pos, splits):
    """attn_split over the first pos + 1 keys (empty splits included) of a float32
    or float16 cache, then attn_merge_norm_quant: the reference's attention,
    attn_sub_norm and int8."""
    q = acts(rng, 1, hq, d, scale=1.0)
    kc, vc = acts(rng, cap, hkv, d, scale=1.0).astype(kv), acts(rng, cap, hkv, d).astype(kv)
    w = acts(rng, hq * d, scale=1.0)
    span = -(-cap // splits)
    meta = ocl.to_device(np.array([0, pos], np.int32))
    po, pml = ocl._alloc((hq * splits * d,)), ocl._alloc((hq * splits * 2,))
    rt = ocl.runtime
    lsz = rt.reduce_group("attn_split", WG, span)
    name = "attn_split_f16" if kv == np.float16 else "attn_split"
    _run(
        ocl, name, (lsz * hq, splits), (lsz, 1), q,
        kc, vc, meta.buffer, np.int32(1), np.int32(0), np.int32(0), po.buffer,
        pml.buffer, np.int32(hq), np.int32(hkv), np.int32(d), np.float32(1 / math.sqrt(d)),
        np.int32(span), ocl._local(d * 4), ocl._local(d * 4), ocl._local(lsz * 4),
        ocl._local(lsz * 4),
    )  # fmt: skip
    att, xq, xs = ocl._alloc((1, hq * d)), ocl._alloc((1, hq * d), np.int8), ocl._alloc((1,))
    mlsz = rt.reduce_group("rmsnorm", WG, hq * d)
    _run(
        ocl, "attn_merge_norm_quant", (mlsz,), (mlsz,), po.buffer, pml.buffer, att.buffer,
        w, xq.buffer, xs.buffer, np.int32(hq), np.int32(d),
        np.int32(splits), np.float32(EPS), np.int32(0), np.int32(0), ocl._local(mlsz * _acc(ocl)),
    )  # fmt: skip
    want = ref.attention(q, kc[: pos + 1], vc[: pos + 1], pos).reshape(1, hq * d)
    got = ocl.to_host(att)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # the int8 rows of the device's own merged output: exactly the unfused ops'
    uq, us = ocl.quantize_act(ocl.rmsnorm(ocl.to_device(got), ocl.to_device(w), EPS))
    np.testing.assert_array_equal(ocl.to_host(xq), ocl.to_host(uq))
    np.testing.assert_array_equal(ocl.to_host(xs), ocl.to_host(us))


@pytest.mark.parametrize("kv", [np.float32, np.float16])
@pytest.mark.parametrize(
    "tok,hq,hkv,d,cap,pos,splits", [(2, 4, 2, 10, 40, 17, 3), (1, 3, 1, 7, 9, 8, 1)]
)
def test_a_batched_steps_row_equals_the_same_token_alone(
    ocl, rng, kv, tok, hq, hkv, d, cap, pos, splits
):
    """rope_store, attn_split and attn_merge_norm_quant of one sequence at row ``tok`` of a
    batched step (its position at meta[pos_at], its partials from ``part0``): bit for bit
    the same kernels on that token alone at row 0, the other rows left as they were."""
    rows, heads, stride = tok + 2, hq + 2 * hkv, 5  # room for 5 splits a (row, head)
    qkv = acts(rng, rows, heads * d)
    kc0, vc0 = acts(rng, cap, hkv, d).astype(kv), acts(rng, cap, hkv, d).astype(kv)
    w = acts(rng, hq * d, scale=1.0)
    cs, _ = ocl._rope_table(np.arange(cap), 10000.0, d)
    rt, f16 = ocl.runtime, "_f16" if kv == np.float16 else ""
    span = -(-cap // splits)
    lsz = rt.reduce_group("attn_split", WG, span)
    mlsz = rt.reduce_group("rmsnorm", WG, hq * d)

    def step(qkv_rows, row, n_rows, pos_at, meta, part0):
        kc, vc = ocl.to_device(kc0), ocl.to_device(vc0)
        q = ocl.to_device(np.full((n_rows, hq * d), 5.0, np.float32))
        po = ocl.to_device(np.full(n_rows * hq * stride * d, 9.0, np.float32))
        pml = ocl.to_device(np.full(n_rows * hq * stride * 2, 9.0, np.float32))
        att = ocl.to_device(np.full((n_rows, hq * d), 3.0, np.float32))
        xq = ocl.to_device(np.full((n_rows, hq * d), 7, np.int8))
        xs = ocl.to_device(np.full(n_rows, 2.0, np.float32))
        m = ocl.to_device(np.asarray(meta, np.int32))
        i32 = np.int32
        _run(
            ocl, "rope_store" + f16, (d, heads), None, qkv_rows, cs.buffer, m.buffer, i32(pos_at),
            i32(row), q.buffer, kc.buffer, vc.buffer, i32(hq), i32(hkv), i32(d), i32(d), i32(1),
        )  # fmt: skip
        _run(
            ocl, "attn_split" + f16, (lsz * hq, splits), (lsz, 1), q.buffer, kc.buffer, vc.buffer,
            m.buffer, i32(pos_at), i32(row), i32(part0), po.buffer, pml.buffer, i32(hq), i32(hkv),
            i32(d), np.float32(1 / math.sqrt(d)), i32(span), ocl._local(d * 4), ocl._local(d * 4),
            ocl._local(lsz * 4), ocl._local(lsz * 4),
        )  # fmt: skip
        _run(
            ocl, "attn_merge_norm_quant", (mlsz,), (mlsz,), po.buffer, pml.buffer, att.buffer, w,
            xq.buffer, xs.buffer, i32(hq), i32(d), i32(splits), np.float32(EPS), i32(row),
            i32(part0), ocl._local(mlsz * _acc(ocl)),
        )  # fmt: skip
        return [ocl.to_host(a) for a in (q, att, xq, xs, kc, vc)]

    alone = step(qkv[tok : tok + 1], 0, 1, 1, [0, pos], 0)
    n = rows  # meta: n token ids, then the n positions; this sequence's at n + tok
    meta = [0] * n + [0] * n
    meta[n + tok] = pos
    batched = step(qkv, tok, rows, n + tok, meta, tok * hq * stride)
    assert_row_as_alone(alone, batched, tok, outputs=4)  # q, att, xq, xs; then the caches
