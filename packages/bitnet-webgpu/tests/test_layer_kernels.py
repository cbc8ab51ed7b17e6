"""The four-launch layer's shaders (``qkv_attend``, ``norm_gemv``) on awkward shapes: against
the numpy reference, and bit for bit against the ten-launch shaders they replace."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bitnet_core.config import BitNetConfig
from bitnet_core.hal.weights import TernaryWeight
from bitnet_core.providers.reference import ReferenceProvider
from bitnet_webgpu.runner import (
    HV,
    LAYER_LANES,
    MAX_SPLITS,
    norm_gemv_launch,
    q8_words,
    qkv_attend_params,
)

REF = ReferenceProvider()
EPS = 1e-5
U32 = np.uint32
#: the layouts: one invocation a row (CPU adapters, ROWS), or lanes a row (GPUs)
LAYOUTS = [(1, frozenset({"ROWS"})), (LAYER_LANES, frozenset()), (4, frozenset())]


def _f32(v: float) -> np.uint32:
    return np.float32(v).view(U32)


def _read(provider, buf, shape, dtype=np.float32) -> np.ndarray:
    n = math.prod(shape)
    return provider.dev.read(buf, n * np.dtype(dtype).itemsize).view(dtype).reshape(shape).copy()


def _defines(provider, layout) -> frozenset[str]:
    return layout | ({"DOT4"} if provider.dev.dot4 else frozenset())


def _ternary(rng, rows: int, k: int) -> TernaryWeight:
    return TernaryWeight.from_codes(rng.integers(-1, 2, (rows, k)), rng.uniform(0.5, 2, rows))


def _reference_matmul(x: np.ndarray, g: np.ndarray, w: TernaryWeight) -> np.ndarray:
    xq, xs = REF.quantize_act(REF.rmsnorm(x[None], g, EPS))
    return REF.matmul_i2s(xq, xs, REF.load_ternary(w))[0]


def _code_tolerance(x: np.ndarray, g: np.ndarray, w: TernaryWeight) -> float:
    """One int8 code of the input, in output units: a code may differ by one where the
    scaled value sits within float error of a rounding tie."""
    _, xs = REF.quantize_act(REF.rmsnorm(x[None], g, EPS))
    return 1.01 * float(np.max(w.unpack()[1])) / float(xs[0])


def _norm_quant(provider, x_buf, g_buf, k: int) -> list:
    """rmsnorm_quant of the ten-launch layer: the int8 row, scale and sum of x."""
    dev = provider.dev
    out = [dev.buffer(q8_words(k) * 4), dev.buffer(4), dev.buffer(4)]
    params = np.array([k, q8_words(k), _f32(EPS), 0], U32)
    dev.dispatch("rmsnorm_quant", params, [x_buf, g_buf, *out], (1, 1, 1))
    return out


def _read_q8(provider, out, k: int) -> list[np.ndarray]:
    return [
        _read(provider, out[0], (q8_words(k),), U32),
        _read(provider, out[1], (1,)),
        _read(provider, out[2], (1,), np.int32),
    ]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(("k", "n"), [(1, 1), (15, 7), (17, 65), (255, 257), (513, 130), (6912, 3)])
def test_norm_gemv_adds_the_matmul_of_the_normalised_input(provider, layout, k, n):
    """y += W rmsnorm(x): the reference within a code; the ten's rmsnorm_quant + matmul_i2s
    ADD bit for bit."""
    lanes, defs = layout
    rng = np.random.default_rng(k * 3 + n)
    x = (rng.standard_normal(k) * 3).astype(np.float32)
    g = rng.uniform(0.5, 2, k).astype(np.float32)
    w = _ternary(rng, n, k)
    y0 = rng.standard_normal(n).astype(np.float32)
    dev, gw = provider.dev, provider.load_ternary(w)
    x_buf, g_buf, y = dev.upload(x), dev.upload(g), dev.upload(y0)
    params, groups, acts = norm_gemv_launch(n, gw.kw16, k, EPS, lanes, None)
    bufs = [x_buf, g_buf, gw.words, gw.scales, y]
    dev.dispatch("norm_gemv", params, bufs, groups, _defines(provider, defs) | acts)
    got = _read(provider, y, (n,))
    want = _reference_matmul(x, g, w) + y0
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=_code_tolerance(x, g, w))
    # the ten launches: rmsnorm_quant, then matmul_i2s ADD
    y10 = dev.upload(y0)
    xq, xs, xsum = _norm_quant(provider, x_buf, g_buf, k)
    mgroups, mdefs = dev.matmul_grid(n, 1)
    mparams = np.array([n, gw.kw16, 1, q8_words(k), mgroups[0], 0, 0, 0], U32)
    mbufs = [gw.words, gw.scales, xq, xs, xsum, y10]
    dev.dispatch("matmul_i2s", mparams, mbufs, mgroups, _defines(provider, mdefs) | {"ADD"})
    np.testing.assert_array_equal(got.view(U32), _read(provider, y10, (n,)).view(U32))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("act", ["silu", "relu2"])
@pytest.mark.parametrize(("k", "f"), [(1, 1), (17, 65), (255, 129), (64, 300)])
def test_norm_gemv_act_multiplies_the_activated_gate_by_up(provider, layout, act, k, f):
    """f = act(gate x) * (up x) of W = gate|up: the reference within a code; normalised
    and quantised, bit for bit the ten's matmul_i2s + act_norm_quant."""
    lanes, defs = layout
    rng = np.random.default_rng(k * 5 + f)
    x = (rng.standard_normal(k) * 3).astype(np.float32)
    g = rng.uniform(0.5, 2, k).astype(np.float32)
    w = _ternary(rng, 2 * f, k)
    dev, gw = provider.dev, provider.load_ternary(w)
    x_buf, g_buf, out = dev.upload(x), dev.upload(g), dev.buffer(f * 4)
    code = 0 if act == "silu" else 1
    params, groups, acts = norm_gemv_launch(2 * f, gw.kw16, k, EPS, lanes, code)
    bufs = [x_buf, g_buf, gw.words, gw.scales, out]
    dev.dispatch("norm_gemv", params, bufs, groups, _defines(provider, defs) | acts)
    got = _read(provider, out, (f,))
    gu = _reference_matmul(x, g, w)
    tol = _code_tolerance(x, g, w)
    want = getattr(REF, f"{act}_mul")(gu[None, :f], gu[None, f:])[0]
    slope = np.abs(gu[f:]) * (1 + np.abs(gu[:f])) + np.abs(gu[:f]) ** 2 + 1  # of act(a) * b
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=tol * float(slope.max()))
    # the ten: gate|up rows by matmul_i2s, then act_norm_quant; the four's f through
    # rmsnorm_quant (the next launch's prologue) gives the same int8 row
    sub = rng.uniform(0.5, 2, f).astype(np.float32)
    sub_buf = dev.upload(sub)
    xq, xs, xsum = _norm_quant(provider, x_buf, g_buf, k)
    gu_buf = dev.buffer(2 * f * 4)
    mgroups, mdefs = dev.matmul_grid(2 * f, 1)
    mparams = np.array([2 * f, gw.kw16, 1, q8_words(k), mgroups[0], 0, 0, 0], U32)
    mbufs = [gw.words, gw.scales, xq, xs, xsum, gu_buf]
    dev.dispatch("matmul_i2s", mparams, mbufs, mgroups, _defines(provider, mdefs))
    ten = [dev.buffer(q8_words(f) * 4), dev.buffer(4), dev.buffer(4)]
    aparams = np.array([f, q8_words(f), code, _f32(EPS)], U32)
    dev.dispatch("act_norm_quant", aparams, [gu_buf, sub_buf, *ten], (1, 1, 1))
    four = _norm_quant(provider, out, sub_buf, f)
    for a, b in zip(_read_q8(provider, four, f), _read_q8(provider, ten, f), strict=True):
        np.testing.assert_array_equal(a.view(U32), b.view(U32))


def _f16_words(a: np.ndarray) -> np.ndarray:
    flat = a.astype(np.float16).reshape(-1)
    if flat.size % 2:
        flat = np.concatenate([flat, np.zeros(1, np.float16)])
    return flat.view(U32)


def _cfg(hq: int, hkv: int, d: int, rot: int, style: str) -> BitNetConfig:
    return BitNetConfig(
        vocab_size=8, hidden_size=hq * d, num_layers=1, num_heads=hq, num_kv_heads=hkv,
        intermediate_size=8, context_length=1024, rope_style=style,
        rope_dim=0 if rot == d else rot,
    )  # fmt: skip


def _ten_attention(provider, cfg, x_buf, g_buf, gw, inp, caches, splits, defines, sub_buf):
    """The ten's rmsnorm_quant, matmul_i2s, rope_store, attn_split, attn_combine_norm_quant:
    the int8 row of the attention output (normalised with sub_buf)."""
    dev = provider.dev
    hq, hkv, d, k = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.hidden_size
    rows = (hq + 2 * hkv) * d
    xq, xs, xsum = _norm_quant(provider, x_buf, g_buf, k)
    qkv = dev.buffer(rows * 4)
    mgroups, mdefs = dev.matmul_grid(rows, 1)
    mparams = np.array([rows, gw.kw16, 1, q8_words(k), mgroups[0], 0, 0, 0], U32)
    mbufs = [gw.words, gw.scales, xq, xs, xsum, qkv]
    dev.dispatch("matmul_i2s", mparams, mbufs, mgroups, _defines(provider, mdefs))
    q = dev.buffer(hq * d * 4)
    rope = np.zeros(8, U32)
    rope[:5] = (hq, hkv, d, cfg.rot_dim, 0 if cfg.rope_style == "neox" else 1)
    rope[5] = _f32(math.log2(cfg.rope_theta))
    rope[6:] = (0, 1)
    rgroups = (-(-(hq + 2 * hkv) * d // 2 // 64), 1, 1)
    dev.dispatch("rope_store", rope, [qkv, inp, q, *caches], rgroups, defines)
    parts = [dev.buffer(hq * splits * 4), dev.buffer(hq * splits * 4)]
    parts.append(dev.buffer(hq * splits * d * 4))
    sp = np.zeros(8, U32)
    sp[:4] = (hq, hkv, d, splits)
    sp[4] = _f32(1 / math.sqrt(d))
    sp[5:] = (0, 1, 0)
    dev.dispatch("attn_split", sp, [q, *caches, inp, *parts], (hq, splits, 1), defines)
    out = [dev.buffer(q8_words(hq * d) * 4), dev.buffer(4), dev.buffer(4)]
    combine = np.array([hq, d, splits, q8_words(hq * d), _f32(EPS), 0, 0, 0], U32)
    dev.dispatch("attn_combine_norm_quant", combine, [*parts, sub_buf, *out], (1, 1, 1))
    return out


@pytest.mark.parametrize("kv", ["float32", "float16"])
@pytest.mark.parametrize("layout", LAYOUTS[:2])
@pytest.mark.parametrize("group", [False, True])
@pytest.mark.parametrize(
    ("hq", "hkv", "d", "rot", "style", "cap", "pos", "splits"),
    [
        (1, 1, 2, 2, "neox", 1, 0, 1),  # the first token
        (4, 2, 6, 6, "norm", 9, 3, 5),  # more splits than keys, not a multiple of four
        (5, 1, 16, 8, "neox", 300, 257, 2),  # partial rope; 129 keys a split: three tiles
        (4, 4, 32, 32, "norm", 200, 130, 64),  # the most splits
        (8, 2, 24, 24, "neox", 40, 33, 3),  # four query heads a kv head
        (2, 1, 256, 256, "neox", 70, 64, 1),  # the largest head_dim
    ],
)
def test_qkv_attend(provider, kv, layout, group, hq, hkv, d, rot, style, cap, pos, splits):
    """Norm, q|k|v rows, rope, the K/V store at ``pos`` and the attention over the cache,
    a query head a workgroup or (``group``) a kv head's query heads a workgroup: the
    reference within tolerance; the caches and the (normalised, int8) output bit for bit
    the ten's chain."""
    lanes, defs = layout
    heads = hq // hkv if group and (hq // hkv + 2) * d <= HV else 1
    cfg = _cfg(hq, hkv, d, rot, style)
    k = cfg.hidden_size
    rng = np.random.default_rng(hq * 1000 + d + pos)
    x = (rng.standard_normal(k) * 2).astype(np.float32)
    g = rng.uniform(0.5, 2, k).astype(np.float32)
    w = _ternary(rng, (hq + 2 * hkv) * d, k)
    cache0 = rng.standard_normal((2, cap, hkv, d)).astype(np.float32)
    f16 = kv == "float16"
    dev, gw = provider.dev, provider.load_ternary(w)
    x_buf, g_buf = dev.upload(x), dev.upload(g)
    inp = dev.upload(np.array([0, pos, pos + 1, 0], U32))
    cache_defs = frozenset({"F16"}) if f16 else frozenset()

    def caches():
        return [dev.upload(_f16_words(c) if f16 else c) for c in cache0]

    four = caches()
    scratch = dev.upload(np.full(hq * d + hq * MAX_SPLITS * (2 + d), 7.0, np.float32))
    params = qkv_attend_params(cfg, splits, lanes, heads)
    bufs = [x_buf, g_buf, gw.words, gw.scales, inp, *four, scratch]
    groups = (hq // heads, 1, 1)
    dev.dispatch("qkv_attend", params, bufs, groups, _defines(provider, defs) | cache_defs)
    att = _read(provider, scratch, (hq, d))

    # the reference: q|k|v of the normalised x, rope, the cache with row pos written
    qkv = _reference_matmul(x, g, w).reshape(hq + 2 * hkv, d)
    at = np.array([pos])
    q = REF.rope(qkv[None, :hq], at, cfg.rope_theta, style, rot)
    kr = REF.rope(qkv[None, hq : hq + hkv], at, cfg.rope_theta, style, rot)[0]
    want_k, want_v = cache0[0].copy(), cache0[1].copy()
    want_k[pos], want_v[pos] = kr, qkv[hq + hkv :]
    if f16:
        want_k, want_v = want_k.astype(np.float16), want_v.astype(np.float16)
    want = REF.attention(q, want_k, want_v, pos)[0]
    np.testing.assert_allclose(att, want, rtol=1e-3, atol=2e-3)
    for buf, c in zip(four, (want_k, want_v), strict=True):
        if f16:
            got = _read(provider, buf, (cap, hkv, d), np.float16).astype(np.float32)
            np.testing.assert_allclose(got, c.astype(np.float32), rtol=2e-3, atol=2e-3)
        else:
            np.testing.assert_allclose(_read(provider, buf, (cap, hkv, d)), c, rtol=1e-4, atol=1e-4)

    # bit for bit the ten: the same caches; att normalised and quantised (the o launch's
    # prologue) equals attn_combine_norm_quant's row
    sub_buf = dev.upload(rng.uniform(0.5, 2, hq * d).astype(np.float32))
    ten = caches()
    ten_out = _ten_attention(provider, cfg, x_buf, g_buf, gw, inp, ten, splits, cache_defs, sub_buf)
    four_out = _norm_quant(provider, scratch, sub_buf, hq * d)
    four_q8, ten_q8 = _read_q8(provider, four_out, hq * d), _read_q8(provider, ten_out, hq * d)
    for a, b in zip(four_q8, ten_q8, strict=True):
        np.testing.assert_array_equal(a.view(U32), b.view(U32))
    words = cap * hkv * d // (2 if f16 else 1)
    for a, b in zip(four, ten, strict=True):
        np.testing.assert_array_equal(
            _read(provider, a, (words,), U32), _read(provider, b, (words,), U32)
        )
