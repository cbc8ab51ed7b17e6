"""Each fused shader of ``WebGPURunner`` against the numpy reference, on awkward shapes."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bitnet_core.hal.weights import TernaryWeight
from bitnet_core.providers.reference import ReferenceProvider
from bitnet_core.testing.batching import assert_row_as_alone
from bitnet_webgpu.runner import q8_words

REF = ReferenceProvider()
EPS = 1e-5
U32 = np.uint32


def _f32(v: float) -> np.uint32:
    return np.float32(v).view(U32)


def _read(provider, buf, shape, dtype=np.float32) -> np.ndarray:
    n = math.prod(shape)
    return provider.dev.read(buf, n * np.dtype(dtype).itemsize).view(dtype).reshape(shape).copy()


def _unpack_q8(words: np.ndarray, k: int) -> np.ndarray:
    return words.view(np.int8).reshape(words.shape[0], -1)[:, :k]


def _check_quantized(provider, out, ref_rows: np.ndarray) -> None:
    """int8 rows, scales and sums of ``out`` = quantize_act(ref_rows), up to rounding ties."""
    t, k = ref_rows.shape
    xq_buf, s_buf, sum_buf = out
    kw = q8_words(k)
    got_q = _unpack_q8(_read(provider, xq_buf, (t, kw), U32), k)
    got_s = _read(provider, s_buf, (t,))
    got_sum = _read(provider, sum_buf, (t,), np.int32)
    want_q, want_s = REF.quantize_act(ref_rows)
    np.testing.assert_allclose(got_s, want_s, rtol=1e-5)
    # a code may differ by one where the scaled value sits within float error of a .5 tie
    scaled = ref_rows * want_s[:, None]
    near_tie = np.abs(np.abs(scaled - np.floor(scaled)) - 0.5) < 1e-3 * np.maximum(1, abs(scaled))
    diff = np.abs(got_q.astype(np.int32) - want_q)
    assert (diff <= near_tie).all(), np.argwhere(diff > near_tie)[:5]
    np.testing.assert_array_equal(got_sum, got_q.astype(np.int32).sum(axis=1))


def _q8_out(provider, t: int, k: int) -> tuple:
    dev = provider.dev
    return dev.buffer(t * q8_words(k) * 4), dev.buffer(t * 4), dev.buffer(t * 4)


@pytest.mark.parametrize(
    ("t", "k"), [(1, 1), (1, 15), (2, 16), (3, 17), (1, 255), (2, 257), (1, 2560)]
)
def test_rmsnorm_quant(provider, t, k):
    rng = np.random.default_rng(k)
    x = (rng.standard_normal((t, k)) * 3).astype(np.float32)
    g = rng.uniform(0.5, 2, k).astype(np.float32)
    dev = provider.dev
    out = _q8_out(provider, t, k)
    params = np.array([k, q8_words(k), _f32(EPS), 0], U32)
    dev.dispatch("rmsnorm_quant", params, [dev.upload(x), dev.upload(g), *out], (t, 1, 1))
    _check_quantized(provider, out, REF.rmsnorm(x, g, EPS))


@pytest.mark.parametrize("act", ["silu", "relu2"])
@pytest.mark.parametrize(("t", "f"), [(1, 1), (1, 17), (2, 80), (1, 511), (3, 6912)])
def test_act_norm_quant(provider, act, t, f):
    rng = np.random.default_rng(f)
    gate = (rng.standard_normal((t, f)) * 2).astype(np.float32)
    up = rng.standard_normal((t, f)).astype(np.float32)
    g = rng.uniform(0.5, 2, f).astype(np.float32)
    dev = provider.dev
    out = _q8_out(provider, t, f)
    gu = np.concatenate([gate, up], axis=1)
    params = np.array([f, q8_words(f), 0 if act == "silu" else 1, _f32(EPS)], U32)
    dev.dispatch("act_norm_quant", params, [dev.upload(gu), dev.upload(g), *out], (t, 1, 1))
    want = REF.rmsnorm(getattr(REF, f"{act}_mul")(gate, up), g, EPS)
    _check_quantized(provider, out, want)


@pytest.mark.parametrize("add", [False, True])
@pytest.mark.parametrize(("k", "n"), [(1, 1), (15, 7), (17, 65), (255, 33), (257, 130)])
def test_matmul_i2s_add(provider, add, k, n):
    """The residual epilogue: y += matmul (and y = matmul without ADD)."""
    rng = np.random.default_rng(k * 7 + n)
    x = rng.standard_normal((1, k)).astype(np.float32)
    w = TernaryWeight.from_codes(rng.integers(-1, 2, (n, k)), rng.uniform(0.5, 2, n))
    y0 = rng.standard_normal((1, n)).astype(np.float32)
    xq, xs = provider.quantize_act(provider.to_device(x))
    gw = provider.load_ternary(w)
    dev = provider.dev
    y = dev.upload(y0)
    groups, defines = provider.dev.matmul_grid(n, 1)
    defines |= {"DOT4"} if dev.dot4 else frozenset()
    defines |= {"ADD"} if add else frozenset()
    params = np.array([n, gw.kw16, 1, xq.row_words, groups[0], 0, 0, 0], U32)
    bufs = [gw.words, gw.scales, xq.buffer, xs.buffer, xq.xsum, y]
    dev.dispatch("matmul_i2s", params, bufs, groups, defines)
    rxq, rxs = REF.quantize_act(x)
    want = REF.matmul_i2s(rxq, rxs, REF.load_ternary(w)) + (y0 if add else 0)
    got = _read(provider, y, (1, n))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def _f16_words(a: np.ndarray) -> np.ndarray:
    flat = a.astype(np.float16).reshape(-1)
    if flat.size % 2:
        flat = np.concatenate([flat, np.zeros(1, np.float16)])
    return flat.view(U32)


@pytest.mark.parametrize("kv", ["float32", "float16"])
@pytest.mark.parametrize(
    ("hq", "hkv", "d", "rot", "style", "pos"),
    [(1, 1, 2, 2, "neox", 0), (4, 2, 6, 6, "norm", 37), (5, 1, 16, 8, "neox", 130)],
)
def test_rope_store(provider, kv, hq, hkv, d, rot, style, pos):
    """q rotated; k rotated and v written at the position read from the input buffer."""
    rng = np.random.default_rng(hq * 100 + d)
    cap, theta = pos + 3, 10000.0
    qkv = rng.standard_normal((hq + 2 * hkv) * d).astype(np.float32)
    sentinel = np.full((cap, hkv, d), 7.0, np.float32)
    dev = provider.dev
    f16 = kv == "float16"
    kc = dev.upload(_f16_words(sentinel) if f16 else sentinel)
    vc = dev.upload(_f16_words(sentinel) if f16 else sentinel)
    q = dev.buffer(hq * d * 4)
    params = np.zeros(8, U32)
    params[:5] = (hq, hkv, d, rot, 0 if style == "neox" else 1)
    params[5] = _f32(math.log2(theta))
    params[6:] = (0, 1)  # row 0, its position at inp[1]
    inp = dev.upload(np.array([0, pos, pos + 1, 0], U32))
    groups = (-(-(hq + 2 * hkv) * d // 2 // 64), 1, 1)
    defines = frozenset({"F16"}) if f16 else frozenset()
    dev.dispatch("rope_store", params, [dev.upload(qkv), inp, q, kc, vc], groups, defines)
    rows = qkv.reshape(hq + 2 * hkv, d)
    at = np.array([pos])
    want_q = REF.rope(rows[None, :hq], at, theta, style, rot)[0]
    want_k = REF.rope(rows[None, hq : hq + hkv], at, theta, style, rot)[0]
    want_v = rows[hq + hkv :]
    tol = dict(rtol=1e-5, atol=1e-5 + 2.5e-7 * pos)
    np.testing.assert_allclose(_read(provider, q, (hq, d)), want_q, **tol)
    for buf, want in ((kc, want_k), (vc, want_v)):
        if f16:
            got = _read(provider, buf, (cap, hkv, d), np.float16).astype(np.float32)
            want_cache = sentinel.astype(np.float16).astype(np.float32)
            want_cache[pos] = want.astype(np.float16)
            np.testing.assert_allclose(got, want_cache, rtol=2**-10, atol=1e-3)
        else:
            got = _read(provider, buf, (cap, hkv, d))
            want_cache = sentinel.copy()
            want_cache[pos] = want
            np.testing.assert_allclose(got, want_cache, **tol)


def _merge(m: np.ndarray, sums: np.ndarray, acc: np.ndarray) -> np.ndarray:
    """Host merge of split partials [hq, S], [hq, S], [hq, S, d] -> [hq, d]."""
    w = np.exp(m - m.max(axis=1, keepdims=True))
    return (w[:, :, None] * acc).sum(axis=1) / (w * sums).sum(axis=1)[:, None]


@pytest.mark.parametrize("kv", ["float32", "float16"])
@pytest.mark.parametrize(
    ("cap", "hq", "hkv", "d", "n", "splits"),
    [
        (1, 1, 1, 2, 1, 1),
        (5, 4, 2, 6, 1, 4),  # more splits than keys: empty splits
        (130, 4, 2, 6, 129, 3),
        (300, 8, 1, 64, 257, 2),  # 129 keys a split: three tiles of 64
        (70, 2, 1, 256, 65, 1),  # the largest head_dim
    ],
)
def test_attn_split(provider, kv, cap, hq, hkv, d, n, splits):
    rng = np.random.default_rng(cap + d)
    q = rng.standard_normal((1, hq, d)).astype(np.float32)
    k = rng.standard_normal((cap, hkv, d)).astype(np.float32)
    v = rng.standard_normal((cap, hkv, d)).astype(np.float32)
    f16 = kv == "float16"
    if f16:  # the reference reads the same rounded cache
        k, v = k.astype(np.float16), v.astype(np.float16)
    dev = provider.dev
    parts = [dev.buffer(hq * splits * 4), dev.buffer(hq * splits * 4)]
    parts.append(dev.buffer(hq * splits * d * 4))
    params = np.zeros(8, U32)
    params[:4] = (hq, hkv, d, splits)
    params[4] = _f32(1 / math.sqrt(d))
    params[5:] = (0, 1, 0)  # row 0, its position and length at inp[1], partials from 0
    caches = [dev.upload(_f16_words(a) if f16 else a) for a in (k, v)]
    inp = dev.upload(np.array([0, n - 1, n, 0], U32))
    defines = frozenset({"F16"}) if f16 else frozenset()
    bufs = [dev.upload(q), *caches, inp, *parts]
    dev.dispatch("attn_split", params, bufs, (hq, splits, 1), defines)
    m = _read(provider, parts[0], (hq, splits))
    sums = _read(provider, parts[1], (hq, splits))
    acc = _read(provider, parts[2], (hq, splits, d))
    want = REF.attention(q, k, v, n - 1)[0]
    np.testing.assert_allclose(_merge(m, sums, acc), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("hq", "d", "splits"), [(1, 2, 1), (4, 6, 3), (5, 16, 64), (20, 128, 2)])
def test_attn_combine_norm_quant(provider, hq, d, splits):
    rng = np.random.default_rng(hq * d + splits)
    m = (rng.standard_normal((hq, splits)) * 4).astype(np.float32)
    m[:, -1] = -3.0e38 if splits > 1 else m[:, -1]  # an empty split
    sums = rng.uniform(0.5, 30, (hq, splits)).astype(np.float32)
    sums[:, -1] = 0 if splits > 1 else sums[:, -1]
    acc = rng.standard_normal((hq, splits, d)).astype(np.float32)
    acc[:, -1] = 0 if splits > 1 else acc[:, -1]
    g = rng.uniform(0.5, 2, hq * d).astype(np.float32)
    dev = provider.dev
    out = _q8_out(provider, 1, hq * d)
    params = np.array([hq, d, splits, q8_words(hq * d), _f32(EPS), 0, 0, 0], U32)
    bufs = [dev.upload(m), dev.upload(sums), dev.upload(acc), dev.upload(g), *out]
    dev.dispatch("attn_combine_norm_quant", params, bufs, (1, 1, 1))
    merged = _merge(m.astype(np.float64), sums, acc).astype(np.float32).reshape(1, hq * d)
    _check_quantized(provider, out, REF.rmsnorm(merged, g, EPS))


@pytest.mark.parametrize("kv", ["float32", "float16"])
@pytest.mark.parametrize(
    ("row", "hq", "hkv", "d", "cap", "pos", "splits"),
    [(2, 4, 2, 6, 40, 17, 3), (1, 2, 1, 4, 9, 8, 1)],
)
def test_a_batched_steps_row_equals_the_same_token_alone(
    provider, kv, row, hq, hkv, d, cap, pos, splits
):
    """rope_store, attn_split and attn_combine_norm_quant of one sequence at ``row`` of a
    batched step (position and length at inp[at], partials from ``part0``): bit for bit
    the same shaders on that token alone at row 0, the other rows left as they were."""
    rng = np.random.default_rng(row + d)
    rows, heads, stride = row + 2, hq + 2 * hkv, 5  # room for 5 splits a (row, head)
    qkv = rng.standard_normal((rows, heads * d)).astype(np.float32)
    kv0 = rng.standard_normal((2, cap, hkv, d)).astype(np.float32)
    g = rng.uniform(0.5, 2, hq * d).astype(np.float32)
    dev, f16 = provider.dev, kv == "float16"
    defines = frozenset({"F16"}) if f16 else frozenset()
    kw = q8_words(hq * d)

    def step(qkv_rows, r, n_rows, at, inp, part0):
        kc, vc = (dev.upload(_f16_words(a) if f16 else a) for a in kv0)
        q = dev.upload(np.full((n_rows, hq * d), 5.0, np.float32))
        parts = [dev.upload(np.full(n_rows * hq * stride, 9.0, np.float32)) for _ in range(2)]
        parts.append(dev.upload(np.full(n_rows * hq * stride * d, 9.0, np.float32)))
        xq = dev.upload(np.full((n_rows, kw), 7, U32))
        xs, xsum = dev.upload(np.full(n_rows, 2.0, np.float32)), dev.upload(np.zeros(n_rows, U32))
        inp_buf = dev.upload(np.asarray(inp, U32))
        rope = np.zeros(8, U32)
        rope[:5] = (hq, hkv, d, d, 0)
        rope[5] = _f32(math.log2(10000.0))
        rope[6:] = (r, at)
        groups = (-(-heads * d // 2 // 64), 1, 1)
        dev.dispatch(
            "rope_store", rope, [dev.upload(qkv_rows), inp_buf, q, kc, vc], groups, defines
        )
        sp = np.zeros(8, U32)
        sp[:4] = (hq, hkv, d, splits)
        sp[4] = _f32(1 / math.sqrt(d))
        sp[5:] = (r, at, part0)
        dev.dispatch("attn_split", sp, [q, kc, vc, inp_buf, *parts], (hq, splits, 1), defines)
        combine = np.array([hq, d, splits, kw, _f32(EPS), r, part0, 0], U32)
        bufs = [*parts, dev.upload(g), xq, xs, xsum]
        dev.dispatch("attn_combine_norm_quant", combine, bufs, (1, 1, 1))
        out = [_read(provider, q, (n_rows, hq * d)), _read(provider, xq, (n_rows, kw), U32)]
        out += [_read(provider, xs, (n_rows,)), _read(provider, xsum, (n_rows,), U32)]
        return out + [
            _read(provider, c, (cap * hkv * d // (2 if f16 else 1),), U32) for c in (kc, vc)
        ]

    alone = step(qkv[row : row + 1], 0, 1, 1, [0, pos, pos + 1, 0], 0)
    inp = [0] * rows + [0] * (2 * rows)  # the token ids, then (position, length) pairs
    at = rows + 2 * row
    inp[at : at + 2] = (pos, pos + 1)
    batched = step(qkv, row, rows, at, inp, row * hq * stride)
    assert_row_as_alone(alone, batched, row, outputs=4)  # q, xq, xs, xsum; then the caches
