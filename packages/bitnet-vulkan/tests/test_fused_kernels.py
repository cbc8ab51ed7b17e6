"""The fused shaders of ``VulkanRunner`` against the numpy reference, on awkward shapes.

norm_quant (rmsnorm + int8, act(gate) * up + rmsnorm + int8, split-K combine +
rmsnorm + int8), rope_store (rotation and KV append at a position read from a
buffer, float32 and float16 caches), attention_split (partial results of each
split) and the residual epilogue of matmul_i2s. rope_store and attention_split
also at a row offset (``first``: a sequence's rows in a batched step, its
position at ``positions[first]``) and with room for more splits a row (``stride``).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from bitnet_core.hal.weights import TernaryWeight
from bitnet_vulkan.launch import norm_wg
from bitnet_vulkan.runner import NORM_MODES
from bitnet_vulkan.stream import pack_push

RNG = np.random.default_rng(2727)
EPS = 1e-5


@pytest.fixture(scope="module")
def sg(vk):
    if not vk.context.use_subgroup:
        pytest.skip("the fused shaders need subgroup arithmetic")
    return vk


def run(vk, shader, arrays, push, groups, spec):
    pipe = vk.context.pipelines.get(shader, len(arrays), spec)
    vk.stream.dispatch(pipe, [a.buffer for a in arrays], push, groups)


def norm_quant(vk, mode, x, g, rows, cols, dim=1, splits=1):
    xq, xs = vk.empty((rows, cols), np.int8), vk.empty((rows,))
    words = xq.nbytes // rows // 4
    run(
        vk,
        "norm_quant",
        [vk.to_device(x), vk.to_device(g), xq, xs],
        pack_push("IIIfIIII", rows, cols, words, EPS, dim, splits, 0, splits),
        (vk._groups(rows, 1), 1, 1),
        (norm_wg(vk.device_info), NORM_MODES[mode]),
    )
    return vk.to_host(xq), vk.to_host(xs)


def assert_quantized_close(got, want):
    """Same int8 rows up to a rare 1-code difference (an ulp of the norm across a tie)."""
    (gq, gs), (wq, ws) = got, want
    np.testing.assert_allclose(gs, ws, rtol=2e-6)
    diff = np.abs(gq.astype(np.int32) - wq.astype(np.int32))
    assert diff.max(initial=0) <= 1 and (diff > 0).mean() < 0.01


# rows past norm_quant's values in registers (8192 on GPUs, 2048 on CPU devices) too
SHAPES = [(1, 1), (1, 17), (3, 37), (2, 63), (5, 65), (4, 257), (2, 1000), (2, 2100), (1, 8300)]


@pytest.mark.parametrize("rows,cols", SHAPES)
def test_norm_quant_equals_rmsnorm_then_quantize(sg, ref, rows, cols):
    x = (RNG.standard_normal((rows, cols)) * RNG.uniform(0.01, 50)).astype(np.float32)
    g = RNG.uniform(0.2, 2.0, cols).astype(np.float32)
    got = norm_quant(sg, "plain", x, g, rows, cols)
    assert_quantized_close(got, ref.quantize_act(ref.rmsnorm(x, g, EPS)))
    # the provider's own two ops (a subgroup a row: other sums, the same rounding)
    xq, xs = sg.quantize_act(sg.rmsnorm(x, g, EPS))
    assert_quantized_close(got, (sg.to_host(xq), sg.to_host(xs)))


@pytest.mark.parametrize("act", ["silu", "relu2"])
@pytest.mark.parametrize("rows,cols", SHAPES)
def test_norm_quant_of_the_ffn_activation(sg, ref, act, rows, cols):
    gu = (RNG.standard_normal((rows, 2 * cols)) * 3).astype(np.float32)
    g = RNG.uniform(0.2, 2.0, cols).astype(np.float32)
    got = norm_quant(sg, act, gu, g, rows, cols)
    op = ref.silu_mul if act == "silu" else ref.relu2_mul
    f = op(gu[:, :cols], gu[:, cols:])
    assert_quantized_close(got, ref.quantize_act(ref.rmsnorm(f, g, EPS)))


@pytest.mark.parametrize(
    "t,hq,d,splits",
    # the last: more heads x splits than the shader keeps weights for (each value its own)
    [(1, 1, 2, 1), (1, 4, 16, 3), (2, 3, 10, 5), (1, 20, 64, 16), (1, 130, 2, 16)],
)
def test_norm_quant_combines_attention_splits(sg, ref, t, hq, d, splits):
    m = RNG.standard_normal((t, hq, splits)).astype(np.float32) * 4
    l_ = RNG.uniform(0.5, 30, (t, hq, splits)).astype(np.float32)
    acc = RNG.standard_normal((t, hq, splits, d)).astype(np.float32) * l_[..., None]
    if splits > 2:  # an empty split (more splits than cache rows)
        m[:, :, -1], l_[:, :, -1], acc[:, :, -1] = -np.inf, 0.0, 0.0
    parts = np.concatenate([m[..., None], l_[..., None], acc], axis=-1).reshape(-1)
    g = RNG.uniform(0.2, 2.0, hq * d).astype(np.float32)
    got = norm_quant(sg, "combine", parts, g, t, hq * d, d, splits)
    mm = m.astype(np.float64).max(-1, keepdims=True)
    e = np.exp(m - mm)
    o = (acc * e[..., None]).sum(2) / (l_ * e).sum(-1)[..., None]
    want = ref.quantize_act(ref.rmsnorm(o.reshape(t, hq * d).astype(np.float32), g, EPS))
    assert_quantized_close(got, want)


@pytest.mark.parametrize("first,t,hq,d,splits,stride", [(1, 1, 4, 16, 3, 5), (2, 2, 3, 10, 1, 4)])
def test_norm_quant_combines_a_sequences_rows(sg, first, t, hq, d, splits, stride):
    """Rows ``first ..`` of a batched step, ``stride`` records a (row, head): bit for bit
    the combine of the same records stored compactly."""
    rec = RNG.standard_normal((t, hq, splits, d + 2)).astype(np.float32)
    rec[..., 1] = np.abs(rec[..., 1]) + 0.5
    rows = first + t
    wide = RNG.standard_normal((rows, hq, stride, d + 2)).astype(np.float32)  # others' records
    wide[first:, :, :splits] = rec
    g = RNG.uniform(0.2, 2.0, hq * d).astype(np.float32)
    want = norm_quant(sg, "combine", rec.reshape(-1), g, t, hq * d, d, splits)
    xq, xs = sg.to_device(np.full((rows, hq * d), 3, np.int8)), sg.to_device(np.zeros(rows))
    words = xq.nbytes // rows // 4
    run(
        sg,
        "norm_quant",
        [sg.to_device(wide.reshape(-1)), sg.to_device(g), xq, xs],
        pack_push("IIIfIIII", t, hq * d, words, EPS, d, splits, first, stride),
        (sg._groups(t, 1), 1, 1),
        (norm_wg(sg.device_info), NORM_MODES["combine"]),
    )
    got_q, got_s = sg.to_host(xq), sg.to_host(xs)
    assert (got_q[:first] == 3).all() and (got_s[:first] == 0).all()  # other rows untouched
    np.testing.assert_array_equal(got_q[first:], want[0])
    np.testing.assert_array_equal(got_s[first:], want[1])


def cache_array(vk, a):
    """A KV-cache-shaped device array keeping its dtype (float16 uploads go as 2-D tables)."""
    return vk.to_device(a.reshape(a.shape[0], -1)).reshape(a.shape)


def rope_tables(ctx, rot_dim, theta=10000.0):
    half = rot_dim // 2
    inv = theta ** (-np.arange(half, dtype=np.float64) * 2.0 / rot_dim)
    ang = np.arange(ctx, dtype=np.float64)[:, None] * inv[None, :]
    return np.cos(ang).astype(np.float32).reshape(-1), np.sin(ang).astype(np.float32).reshape(-1)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize(
    "t,hq,hkv,d,rot,style,start,first",
    [
        (1, 1, 1, 2, 2, "neox", 0, 0),
        (1, 4, 1, 64, 64, "neox", 37, 0),
        (3, 6, 2, 10, 6, "norm", 5, 0),
        (2, 5, 5, 18, 18, "norm", 61, 0),
        (1, 4, 2, 10, 10, "neox", 9, 3),
        (2, 3, 1, 6, 4, "norm", 30, 1),
    ],
)
def test_rope_store(sg, ref, dtype, t, hq, hkv, d, rot, style, start, first):
    cap, ctx = 64, 64
    qkv = RNG.standard_normal((first + t, (hq + 2 * hkv) * d)).astype(np.float32)
    cos_t, sin_t = rope_tables(ctx, rot)
    sentinel = np.full((cap, hkv, d), 7.0, dtype=dtype)
    kc, vc = cache_array(sg, sentinel), cache_array(sg, sentinel)
    q = sg.to_device(np.full((first + t, hq * d), 5.0, np.float32))
    positions_buf = np.full(first + 1, 40, np.uint32)  # other sequences' positions
    positions_buf[first] = start
    run(
        sg,
        "rope_store",
        [sg.to_device(qkv), sg.to_device(cos_t), sg.to_device(sin_t), q, kc, vc]
        + [sg.to_device(positions_buf)],
        pack_push("IIIIII", t, hq, hkv, d, rot, first),
        (sg._groups(t * (hq + 2 * hkv) * d // 2, 256), 1, 1),
        (256, int(style == "neox"), int(dtype == np.float16)),
    )
    positions = np.arange(start, start + t)
    parts = qkv[first:].reshape(t, hq + 2 * hkv, d)
    want_q = ref.rope(parts[:, :hq], positions, 10000.0, style, rot)
    want_k = ref.rope(parts[:, hq : hq + hkv], positions, 10000.0, style, rot)
    want_v = parts[:, hq + hkv :]
    got_q = sg.to_host(q)
    assert (got_q[:first] == 5).all()  # other sequences' rows untouched
    np.testing.assert_allclose(got_q[first:].reshape(t, hq, d), want_q, rtol=1e-5, atol=1e-6)
    got_k, got_v = sg.to_host(kc), sg.to_host(vc)
    tol = 1e-3 if dtype == np.float16 else 1e-5
    np.testing.assert_allclose(got_k[start : start + t], want_k, rtol=tol, atol=tol)
    np.testing.assert_allclose(got_v[start : start + t], want_v, rtol=tol, atol=tol)
    untouched = np.ones(cap, bool)
    untouched[start : start + t] = False
    assert (got_k[untouched] == 7).all() and (got_v[untouched] == 7).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize(
    "t,hq,hkv,d,start,splits,first,stride",
    [
        (1, 1, 1, 1, 0, 1, 0, 1),
        (1, 4, 1, 64, 40, 3, 0, 3),
        (1, 6, 2, 10, 2, 7, 0, 7),
        (2, 4, 2, 33, 70, 1, 0, 1),
        (1, 2, 2, 257, 129, 4, 0, 4),
        (1, 20, 5, 128, 200, 16, 0, 16),
        (1, 6, 2, 10, 50, 2, 2, 5),
        (3, 4, 4, 12, 7, 1, 1, 3),
    ],
)
def test_attention_split_partials(sg, ref, dtype, t, hq, hkv, d, start, splits, first, stride):
    cap = start + t + 3
    q_all = RNG.standard_normal((first + t, hq, d)).astype(np.float32)
    q = q_all[first:]
    k = RNG.standard_normal((cap, hkv, d)).astype(dtype)
    v = RNG.standard_normal((cap, hkv, d)).astype(dtype)
    rows = first + t
    parts = sg.to_device(np.full(rows * hq * stride * (d + 2), 9.0, np.float32))
    positions_buf = np.full(first + 1, 1, np.uint32)  # other sequences' positions
    positions_buf[first] = start
    wg = max(64, min(1024, 1 << max(-(-d // 4) - 1, 0).bit_length()))
    run(
        sg,
        "attention_split",
        [
            sg.to_device(q_all),
            cache_array(sg, k),
            cache_array(sg, v),
            parts,
            sg.to_device(positions_buf),
        ],
        pack_push("IIIIfIII", t, hq, hkv, d, 1.0 / math.sqrt(d), splits, first, stride),
        (sg._groups(t * hq * splits, 1), 1, 1),
        (wg, int(dtype == np.float16)),
    )
    records = sg.to_host(parts).reshape(rows, hq, stride, d + 2)
    assert (records[:first] == 9).all() and (records[:, :, splits:] == 9).all()  # untouched
    p = records[first:, :, :splits].astype(np.float64)
    m, l_, acc = p[..., 0], p[..., 1], p[..., 2:]
    mm = m.max(-1, keepdims=True)
    e = np.where(l_ > 0, np.exp(m - mm), 0.0)
    got = (acc * e[..., None]).sum(2) / (l_ * e).sum(-1)[..., None]
    want = ref.attention(q, k.astype(np.float32), v.astype(np.float32), start)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize("tokens,rows,cols", [(1, 1, 1), (1, 33, 17), (3, 29, 37), (5, 64, 300)])
def test_matmul_i2s_adds_into_its_output(sg, ref, tokens, rows, cols):
    codes = RNG.integers(-1, 2, (rows, cols)).astype(np.int8)
    tw = TernaryWeight.from_codes(codes, RNG.uniform(0.1, 2.0, rows).astype(np.float32))
    w = sg.load_ternary(tw)
    x = RNG.standard_normal((tokens, cols)).astype(np.float32)
    y0 = RNG.standard_normal((tokens, rows)).astype(np.float32)
    xq, xs = sg.quantize_act(x)
    y = sg.to_device(y0)
    shader, groups, spec = sg._matmul_launch(
        "matmul_i2s_dot" if sg.context.use_int_dot else "matmul_i2s", rows, tokens
    )
    run(
        sg,
        shader,
        [xq, xs, w.codes, w.scales, y],
        pack_push("III", rows, tokens, w.words_per_row),
        groups,
        (*spec, 1),
    )
    rq, rs = ref.quantize_act(x)
    want = y0 + ref.matmul_i2s(rq, rs, ref.load_ternary(tw))
    np.testing.assert_allclose(sg.to_host(y), want, rtol=1e-5, atol=1e-5)
