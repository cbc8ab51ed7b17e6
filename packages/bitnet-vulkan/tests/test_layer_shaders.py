"""One token's decode layer in four dispatches (``qkv_attend.comp``, ``norm_gemv.comp``)
against the numpy reference, on awkward shapes: rows not a multiple of a workgroup's,
inputs not a multiple of 16 columns or longer than the norm holds in registers, head dims
of 2 to 32, one to sixteen splits (some empty), several chunks a split, float32 and float16
caches, grouped query heads (one head of each group writes the cache). ``norm_gemv_add``
is also bit for bit the ten dispatches' ``norm_quant`` + ``matmul_i2s`` (ADD), and the
``_dot`` variants (integer dot products) the plain ones'.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from bitnet_core.hal.weights import TernaryWeight
from bitnet_vulkan.launch import norm_wg, pow2_at_least
from bitnet_vulkan.layer import LayerPlan
from bitnet_vulkan.runner import ATTENTION_SLOTS, NORM_MODES
from bitnet_vulkan.stream import pack_push

RNG = np.random.default_rng(4848)
EPS = 1e-5
THETA = 10000.0


@pytest.fixture(scope="module")
def sg(vk):
    if not vk.context.use_subgroup:
        pytest.skip("the layer's shaders need subgroup arithmetic")
    return vk


def plan(vk, head_dim: int = 2) -> LayerPlan:
    """The runner's plan for this device (``VulkanRunner.__init__``'s sizes)."""
    wg = norm_wg(vk.device_info)
    attn_wg = pow2_at_least(-(-head_dim // ATTENTION_SLOTS), 64, 1024)
    sgs = vk.device_info.subgroup_size
    return LayerPlan(wg, attn_wg, head_dim, wg // sgs, bool(vk.context.use_int_dot))


def run(vk, shader, arrays, push, groups, spec):
    pipe = vk.context.pipelines.get(shader, len(arrays), spec)
    vk.stream.dispatch(pipe, [a.buffer for a in arrays], push, groups)


def ternary(rows: int, cols: int) -> TernaryWeight:
    codes = RNG.integers(-1, 2, (rows, cols)).astype(np.int8)
    return TernaryWeight.from_codes(codes, RNG.uniform(0.1, 2.0, rows).astype(np.float32))


def norm_gemv(vk, name, x, g, tw, y0, rows, relu2=0):
    p = plan(vk)
    w = vk.load_ternary(tw)
    cols = x.size
    y = vk.to_device(y0)
    run(
        vk,
        p.shader(name),
        [vk.to_device(x), vk.to_device(g), w.codes, w.scales, y],
        pack_push("IIfII", cols, -(-cols // 4), EPS, rows, w.words_per_row),
        (vk._groups(rows, p.rows_per_group), 1, 1),
        p.gemv_spec(w.words_per_row, relu2),
    )
    return vk.to_host(y)


def reference_gemv(ref, x, g, tw):
    xq, xs = ref.quantize_act(ref.rmsnorm(x[None], g, EPS))
    return ref.matmul_i2s(xq, xs, ref.load_ternary(tw))[0], xs[0]


def code_tolerance(tw, xs) -> float:
    """Two activation codes off (an ulp of the norm across a rounding tie) in any output."""
    return 2.0 * float(np.max(tw.unpack()[1])) / float(xs)


# (rows, cols): cols past the 512 words the norm holds in registers on CPU devices too
GEMV_SHAPES = [(1, 1), (3, 17), (33, 37), (64, 300), (100, 1000), (7, 2100), (9, 8300)]


@pytest.mark.parametrize("rows,cols", GEMV_SHAPES)
def test_norm_gemv_add(sg, ref, rows, cols):
    x = (RNG.standard_normal(cols) * RNG.uniform(0.01, 50)).astype(np.float32)
    g = RNG.uniform(0.2, 2.0, cols).astype(np.float32)
    tw = ternary(rows, cols)
    y0 = RNG.standard_normal(rows).astype(np.float32)
    got = norm_gemv(sg, "norm_gemv_add", x, g, tw, y0, rows)
    want, xs = reference_gemv(ref, x, g, tw)
    np.testing.assert_allclose(got, y0 + want, rtol=1e-5, atol=code_tolerance(tw, xs))

    # the ten dispatches' chain: norm_quant, then matmul_i2s adding into y (the same bits)
    xq, xsd = sg.empty((1, cols), np.int8), sg.empty((1,))
    words = xq.nbytes // 4
    run(
        sg,
        "norm_quant",
        [sg.to_device(x), sg.to_device(g), xq, xsd],
        pack_push("IIIfIIII", 1, cols, words, EPS, 1, 1, 0, 1),
        (1, 1, 1),
        (norm_wg(sg.device_info), NORM_MODES["plain"]),
    )
    w = sg.load_ternary(tw)
    y = sg.to_device(y0)
    shader, groups, spec = sg._matmul_launch(plan(sg).shader("matmul_i2s"), rows, 1)
    push = pack_push("III", rows, 1, w.words_per_row)
    run(sg, shader, [xq, xsd, w.codes, w.scales, y], push, groups, (*spec, 1))
    np.testing.assert_array_equal(got, sg.to_host(y))


@pytest.mark.parametrize("act", ["silu", "relu2"])
@pytest.mark.parametrize("rows,cols", GEMV_SHAPES)
def test_norm_gemv_act(sg, ref, act, rows, cols):
    x = (RNG.standard_normal(cols) * 3).astype(np.float32)
    g = RNG.uniform(0.2, 2.0, cols).astype(np.float32)
    tw = ternary(2 * rows, cols)  # gate rows, then up rows
    y0 = np.full(rows + 3, 7.0, np.float32)  # past the rows: untouched
    got = norm_gemv(sg, "norm_gemv_act", x, g, tw, y0, rows, int(act == "relu2"))
    gu, xs = reference_gemv(ref, x, g, tw)
    op = ref.silu_mul if act == "silu" else ref.relu2_mul
    want = op(gu[None, :rows], gu[None, rows:])[0]
    tol = code_tolerance(tw, xs) * (1.0 + float(np.abs(gu).max()))
    np.testing.assert_allclose(got[:rows], want, rtol=1e-5, atol=tol)
    assert (got[rows:] == 7.0).all()


def rope_tables(ctx: int, rot: int) -> tuple[np.ndarray, np.ndarray]:
    half = rot // 2
    inv = THETA ** (-np.arange(half, dtype=np.float64) * 2.0 / rot)
    ang = np.arange(ctx, dtype=np.float64)[:, None] * inv[None, :]
    return np.cos(ang).astype(np.float32).reshape(-1), np.sin(ang).astype(np.float32).reshape(-1)


def cache_array(vk, a):
    """A KV-cache-shaped device array keeping its dtype (float16 uploads go as 2-D tables)."""
    return vk.to_device(a.reshape(a.shape[0], -1)).reshape(a.shape)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize(
    "hidden,hq,hkv,d,rot,style,pos,splits",
    [
        (16, 1, 1, 2, 2, "neox", 0, 1),  # the first token: the current key only
        (40, 4, 2, 10, 6, "norm", 5, 3),  # 40 columns: 3 weight words, 10 code words
        (96, 6, 2, 16, 16, "neox", 70, 16),  # 71 keys in 16 splits of 5: the last empty
        (64, 2, 2, 32, 32, "norm", 150, 1),  # one split of 3 chunks of 64 keys
        (48, 3, 1, 6, 4, "neox", 129, 2),  # three heads share a kv head
    ],
)
def test_qkv_attend(sg, ref, dtype, hidden, hq, hkv, d, rot, style, pos, splits):
    cap, ctx = pos + 5, pos + 5
    x = (RNG.standard_normal(hidden) * 4).astype(np.float32)
    g = RNG.uniform(0.2, 2.0, hidden).astype(np.float32)
    tw = ternary((hq + 2 * hkv) * d, hidden)  # q | k | v rows
    w = sg.load_ternary(tw)
    k_old = RNG.standard_normal((cap, hkv, d)).astype(dtype)
    v_old = RNG.standard_normal((cap, hkv, d)).astype(dtype)
    kc, vc = cache_array(sg, k_old), cache_array(sg, v_old)
    cos_t, sin_t = rope_tables(ctx, rot)
    att = sg.to_device(np.full(hq * d + 3, 9.0, np.float32))
    parts = sg.empty((hq * splits * d,))
    p = plan(sg, d)
    push = pack_push(
        "IIfIIIIIfI", hidden, -(-hidden // 4), EPS, w.words_per_row, hq, hkv, d, rot,
        1.0 / math.sqrt(d), splits,
    )  # fmt: skip
    run(
        sg,
        p.shader("qkv_attend"),
        [sg.to_device(x), sg.to_device(g), w.codes, w.scales, sg.to_device(cos_t)]
        + [sg.to_device(sin_t), kc, vc, sg.to_device(np.array([pos], np.uint32)), parts, att],
        push,
        (hq, 1, 1),
        p.qkv_spec(int(style == "neox"), int(dtype == np.float16), w.words_per_row),
    )
    qkv, xs = reference_gemv(ref, x, g, tw)
    heads = qkv.reshape(hq + 2 * hkv, d)
    q = ref.rope(heads[None, :hq], [pos], THETA, style, rot)
    k = ref.rope(heads[None, hq : hq + hkv], [pos], THETA, style, rot)[0]
    v = heads[hq:][hkv:]
    tol = code_tolerance(tw, xs) * 4
    got_k, got_v = sg.to_host(kc), sg.to_host(vc)
    ftol = 2e-3 if dtype == np.float16 else 0.0
    np.testing.assert_allclose(got_k[pos].astype(np.float32), k, rtol=ftol, atol=tol + ftol)
    np.testing.assert_allclose(got_v[pos].astype(np.float32), v, rtol=ftol, atol=tol + ftol)
    others = np.arange(cap) != pos  # every other row untouched
    np.testing.assert_array_equal(got_k[others], k_old[others])
    np.testing.assert_array_equal(got_v[others], v_old[others])
    keys, values = got_k.astype(np.float32), got_v.astype(np.float32)
    want = ref.attention(q, keys, values, pos).reshape(-1)  # over the cache as written
    got = sg.to_host(att)
    np.testing.assert_allclose(got[: hq * d], want, rtol=1e-4, atol=tol)
    assert (got[hq * d :] == 9.0).all()


@pytest.mark.parametrize("name", ["norm_gemv_add", "norm_gemv_act"])
def test_the_integer_dot_product_variant_gives_the_same_bits(vk_matmul, ref, name):
    """``_dot`` (SPV_KHR_integer_dot_product) against the plain shader on a provider with
    the feature on: exact int32 sums either way, so the same outputs bit for bit."""
    if not (vk_matmul.context.use_subgroup and vk_matmul.context.use_int_dot):
        pytest.skip("needs subgroup arithmetic and integer dot products on")
    x = (RNG.standard_normal(300) * 3).astype(np.float32)
    g = RNG.uniform(0.2, 2.0, 300).astype(np.float32)
    tw, y0 = ternary(140, 300), RNG.standard_normal(70).astype(np.float32)
    w = vk_matmul.load_ternary(tw)
    p = plan(vk_matmul)
    outs = []
    for shader in (name, name + "_dot"):
        y = vk_matmul.to_device(y0)
        run(
            vk_matmul,
            shader,
            [vk_matmul.to_device(x), vk_matmul.to_device(g), w.codes, w.scales, y],
            pack_push("IIfII", 300, 75, EPS, 70, w.words_per_row),
            (vk_matmul._groups(70, p.rows_per_group), 1, 1),
            p.gemv_spec(w.words_per_row, 0),
        )
        outs.append(vk_matmul.to_host(y))
    np.testing.assert_array_equal(outs[0], outs[1])
    want, xs = reference_gemv(ref, x, g, tw)
    if name == "norm_gemv_add":
        np.testing.assert_allclose(outs[1], y0 + want[:70], rtol=1e-5, atol=code_tolerance(tw, xs))
