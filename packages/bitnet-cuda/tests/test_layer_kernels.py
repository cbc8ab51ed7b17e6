"""One token's decode layer in four kernels (issue 48), on the CUDA emulator.

``qkv_attend``, ``norm_gemv_add`` and ``norm_gemv_act`` each against numpy on awkward
shapes and, bit for bit, against the ten kernels they replace; ``CudaRunner``'s logits,
caches and greedy tokens with four launches a layer equal the ten's over many decode
steps across cache growth; the launches a step as ``bitnet bench --profile`` counts
them. Then each fault planted in the kernel source (the residual add skipped, the
barrier after the norm prologue removed, the cache never written) and caught.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
from cuda_emulator import SEEDS, EmulatedCudaProvider, missing
from cuda_emulator.cupy_emulator import EmulatedCuPy

from bitnet_core.cli.commands.bench import bench_once, step_profile
from bitnet_core.hal.weights import TernaryWeight
from bitnet_core.model import KVCacheConfig, Model, random_weights
from bitnet_core.providers.reference import ReferenceProvider
from bitnet_core.testing.strict import strict_config
from bitnet_cuda import kernels
from bitnet_cuda.runner import (
    ATTN_THREADS,
    COMBINE_THREADS,
    LAYER_MAX_KP,
    NORM_THREADS,
    ROPE_THREADS,
    CudaRunner,
    padded_cols,
)

if missing():
    pytest.skip(missing(), allow_module_level=True)

i32, f32 = np.int32, np.float32
EPS = f32(1e-5)
REF = ReferenceProvider()


def _ternary(p: EmulatedCudaProvider, rng: np.random.Generator, n: int, k: int):
    """Random ternary rows [n, k] with per-row scales: the codes and the device weight."""
    codes = rng.integers(-1, 2, (n, k)).astype(np.int8)
    scales = rng.uniform(0.5, 2.0, n).astype(np.float32)
    return codes, scales, p.load_ternary(TernaryWeight.from_codes(codes, scales))


def _int8(x: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, float]:
    """numpy's quantize_act(rmsnorm(x, g)): the int8 codes and the scale."""
    q, s = REF.quantize_act(REF.rmsnorm(x[None], g, float(EPS)))
    return q[0].astype(np.int64), float(np.asarray(s).ravel()[0])


def _ten_int8(p: EmulatedCudaProvider, x: np.ndarray, g) -> tuple:
    """The ten's rmsnorm_quant of one row: device xq, scale, sum."""
    k = x.size
    xq = p.cp.zeros((1, padded_cols(k)), dtype=np.int8)
    xs, xsum = p.cp.zeros((1,), dtype=np.float32), p.cp.zeros((1,), dtype=np.int32)
    args = (p.to_device(x), g, xq, xs, xsum, i32(k), i32(xq.shape[1]), EPS)
    p._k("rmsnorm_quant")((1,), (NORM_THREADS,), args)
    return xq, xs, xsum


@pytest.mark.parametrize("n,k,rows", [(1, 64, 16), (37, 100, 16), (70, 8200, 8), (130, 257, 48)])
def test_norm_gemv_add_equals_the_ten_and_numpy(n: int, k: int, rows: int) -> None:
    """x += W rmsnorm(xin) in int8: the rows of a block past n, inputs not a multiple of 64
    and longer than a block's registers hold (8200: the norm's loops)."""
    rng = np.random.default_rng(n * 1000 + k)
    p = EmulatedCudaProvider()
    xin = (rng.standard_normal(k) * 3).astype(np.float32)
    g = rng.uniform(0.2, 2.0, k).astype(np.float32)
    codes, scales, w = _ternary(p, rng, n, k)
    y0 = rng.standard_normal(n).astype(np.float32)
    y = p.to_device(y0[None].copy())
    kw4 = i32(int(w.words.shape[1]) // 4)
    args = (p.to_device(xin), p.to_device(g), w.words, w.scales, y, i32(n), i32(k), kw4)
    p._k("norm_gemv_add")((-(-n // rows),), (NORM_THREADS,), (*args, i32(rows), EPS))
    ten = p.to_device(y0[None].copy())
    p.launch_i2s(w.words, w.scales, *_ten_int8(p, xin, p.to_device(g)), ten, 1, add=True)
    np.testing.assert_array_equal(p.to_host(y), p.to_host(ten))
    q, s = _int8(xin, g)
    want = y0 + (codes.astype(np.int64) @ q) * scales / s
    np.testing.assert_allclose(p.to_host(y)[0], want, rtol=1e-4, atol=2 * scales.max() / s)


@pytest.mark.parametrize("act", [0, 1], ids=["silu", "relu2"])
@pytest.mark.parametrize("nf,k,rows", [(1, 64, 16), (45, 130, 16), (200, 72, 24)])
def test_norm_gemv_act_equals_the_ten_and_numpy(act: int, nf: int, k: int, rows: int) -> None:
    """f = act(gate) * up of gate|up times rmsnorm(xin) in int8, as the ten's gate|up GEMV
    then act_norm_quant's values."""
    rng = np.random.default_rng(nf + k + act)
    p = EmulatedCudaProvider()
    xin = (rng.standard_normal(k) * 2).astype(np.float32)
    g = rng.uniform(0.2, 2.0, k).astype(np.float32)
    codes, scales, w = _ternary(p, rng, 2 * nf, k)
    f = p.cp.zeros((1, nf), dtype=np.float32)
    kw4 = i32(int(w.words.shape[1]) // 4)
    args = (p.to_device(xin), p.to_device(g), w.words, w.scales, f, i32(nf), i32(k), kw4)
    p._k("norm_gemv_act")((-(-nf // rows),), (NORM_THREADS,), (*args, i32(rows), i32(act), EPS))
    gu = p.cp.zeros((1, 2 * nf), dtype=np.float32)
    p.launch_i2s(w.words, w.scales, *_ten_int8(p, xin, p.to_device(g)), gu, 1)
    ten = p.cp.zeros((1, nf), dtype=np.float32)
    fq = p.cp.zeros((1, padded_cols(nf)), dtype=np.int8)
    out = (ten, p.to_device(np.ones(nf, np.float32)), fq, p.cp.zeros((1,), dtype=np.float32))
    out += (p.cp.zeros((1,), dtype=np.int32),)
    tail = (i32(nf), i32(fq.shape[1]), i32(act), EPS)
    p._k("act_norm_quant")((1,), (NORM_THREADS,), (gu, *out, *tail))
    np.testing.assert_array_equal(p.to_host(f), p.to_host(ten))
    q, s = _int8(xin, g)
    v = (codes.astype(np.int64) @ q) * scales / s
    gate, up = v[:nf], v[nf:]
    want = (gate / (1 + np.exp(-gate)) if act == 0 else np.maximum(gate, 0) ** 2) * up
    np.testing.assert_allclose(p.to_host(f)[0], want, rtol=1e-4, atol=1e-3 * np.abs(want).max())


def _rope(v: np.ndarray, p: int, rot: int, style: int) -> np.ndarray:
    """numpy's rotary embedding of one head's row at position p (style 0 neox, 1 pairs)."""
    out = v.astype(np.float64).copy()
    half = rot // 2
    for i in range(half):
        a, b = (i, i + half) if style == 0 else (2 * i, 2 * i + 1)
        ang = p * 10000.0 ** (-(2 * i) / rot)
        out[a] = v[a] * math.cos(ang) - v[b] * math.sin(ang)
        out[b] = v[b] * math.cos(ang) + v[a] * math.sin(ang)
    return out


QKV_CASES = [  # hq, hkv, d, rot, style, splits, position, KV dtype
    (6, 2, 40, 40, 0, 1, 0, "float32"),
    (6, 2, 40, 16, 1, 5, 37, "float16"),
    (4, 4, 64, 64, 0, 3, 20, "float32"),
    (8, 1, 32, 32, 1, 7, 3, "float32"),  # more splits than keys: empty ones
    (3, 3, 48, 32, 0, 64, 90, "float16"),
]


@pytest.mark.parametrize("hq,hkv,d,rot,style,splits,pos,kv", QKV_CASES)
def test_qkv_attend_equals_the_ten_and_numpy(hq, hkv, d, rot, style, splits, pos, kv) -> None:
    """A block a query head: the norm, its q|k|v rows, rope, the K/V store (once a kv
    head), the attention's splits and merge; the attention output and the caches as the
    ten's (rmsnorm_quant, GEMV, rope_store, attn_split, attn_combine_norm_quant) bit for
    bit, and as numpy's attention. The cache rows past the position hold NaN: never read."""
    rng = np.random.default_rng(hq * 100 + splits + pos)
    p = EmulatedCudaProvider()
    k, cap, dt = 72, pos + 9, np.dtype(kv)
    x = (rng.standard_normal(k) * 2).astype(np.float32)
    g = rng.uniform(0.2, 2.0, k).astype(np.float32)
    rows = (hq + 2 * hkv) * d
    codes, scales, w = _ternary(p, rng, rows, k)
    cache = np.full((2, cap, hkv, d), np.nan, np.float32)
    cache[:, :pos] = rng.standard_normal((2, pos, hkv, d))
    cache = cache.astype(dt)
    kc, vc = p.to_device(cache[0].copy()), p.to_device(cache[1].copy())
    position = p.to_device(np.array([pos], np.int32))
    parts = [p.cp.zeros((hq * splits * s,), dtype=np.float32) for s in (1, 1, d)]
    att = p.cp.zeros((1, hq * d), dtype=np.float32)
    scale, suffix = f32(1.0 / math.sqrt(d)), "_f16" if kv == "float16" else ""
    rope = (i32(hq), i32(hkv), i32(d), i32(rot), i32(style), f32(math.log2(10000.0)))
    head = (p.to_device(x), p.to_device(g), w.words, w.scales, i32(k))
    args = (*head, i32(int(w.words.shape[1]) // 4), position, kc, vc, *parts, att)
    p._k(f"qkv_attend{suffix}")((hq,), (NORM_THREADS,), (*args, *rope, i32(splits), scale, EPS))

    # the ten
    qkv = p.cp.zeros((1, rows), dtype=np.float32)
    p.launch_i2s(w.words, w.scales, *_ten_int8(p, x, p.to_device(g)), qkv, 1)
    q = p.cp.zeros((1, hq, d), dtype=np.float32)
    kt, vt = p.to_device(cache[0].copy()), p.to_device(cache[1].copy())
    p._k(f"rope_store{suffix}")(
        (1, hq + 2 * hkv), (ROPE_THREADS,), (qkv, position, q, kt, vt, *rope)
    )
    tparts = [p.cp.zeros((hq * splits * s,), dtype=np.float32) for s in (1, 1, d)]
    geometry = (i32(hq), i32(hkv), i32(d), i32(splits), scale)
    split_args = (q, kt, vt, position, *tparts, *geometry)
    p._k(f"attn_split{suffix}")((hq, splits), (ATTN_THREADS,), split_args)
    tatt = p.cp.zeros((1, hq * d), dtype=np.float32)
    kp = padded_cols(hq * d)
    out = (tatt, p.to_device(np.ones(hq * d, np.float32)), p.cp.zeros((1, kp), dtype=np.int8))
    out += (p.cp.zeros((1,), dtype=np.float32), p.cp.zeros((1,), dtype=np.int32))
    out += (p.cp.zeros((1,), dtype=np.int32),)
    sizes = (i32(hq), i32(d), i32(splits), i32(kp), EPS)
    p._k("attn_combine_norm_quant")((hq, 1), (COMBINE_THREADS,), (*tparts, *out, *sizes))
    np.testing.assert_array_equal(p.to_host(att), p.to_host(tatt))
    for got, want in ((kc, kt), (vc, vt)):  # the NaN rows past pos compare equal too
        np.testing.assert_array_equal(p.to_host(got), p.to_host(want))

    # numpy
    qn, s = _int8(x, g)
    v = ((codes.astype(np.int64) @ qn) * scales / s).reshape(hq + 2 * hkv, d)
    keys = p.to_host(kc).astype(np.float64)[: pos + 1]
    values = p.to_host(vc).astype(np.float64)[: pos + 1]
    tol = dict(rtol=2e-3, atol=2e-3) if kv == "float16" else dict(rtol=1e-4, atol=1e-4)
    for j in range(hkv):
        np.testing.assert_allclose(keys[pos, j], _rope(v[hq + j], pos, rot, style), **tol)
        np.testing.assert_allclose(values[pos, j], v[hq + hkv + j], **tol)
    got = p.to_host(att).reshape(hq, d)
    for h in range(hq):
        j = h // (hq // hkv)
        score = keys[:, j] @ _rope(v[h], pos, rot, style) / math.sqrt(d)
        e = np.exp(score - score.max())
        np.testing.assert_allclose(got[h], e @ values[:, j] / e.sum(), rtol=1e-4, atol=1e-4)


def _runner(weights, four: bool, kv: str = "float32", block: int = 16) -> CudaRunner:
    runner = CudaRunner(
        EmulatedCudaProvider(), weights, kv_cache=KVCacheConfig(dtype=kv, block_size=block)
    )
    runner.use_graphs, runner.layer_kernels = True, four
    return runner


@pytest.mark.parametrize(("activation", "kv"), [("silu", "float32"), ("relu2", "float16")])
def test_four_launch_decode_equals_the_ten_bit_for_bit(activation: str, kv: str) -> None:
    """The graph-captured decode step with four kernels a layer: the ten's logits bit for
    bit at every step, across the cache's growth (16 rows a block: new arrays, new
    graphs, more splits), and the same caches after."""
    weights = random_weights(strict_config(activation), seed=11)
    ten, four = _runner(weights, False, kv), _runner(weights, True, kv)
    with ten.new_cache() as a, four.new_cache() as b:
        logits = ten.forward([5, 6, 7], a)
        np.testing.assert_array_equal(four.forward([5, 6, 7], b), logits)
        shapes = set()
        for _ in range(45):
            tok = int(np.argmax(logits))
            logits = ten.forward([tok], a)
            np.testing.assert_array_equal(four.forward([tok], b), logits)
            shapes.add(b.k[0].shape[0])
        assert len(shapes) >= 3
        for i in range(len(four.layers)):
            for x, y in zip(a.layer(i), b.layer(i), strict=True):
                np.testing.assert_array_equal(np.asarray(x)[: a.length], np.asarray(y)[: b.length])


def test_greedy_on_the_device_with_four_launches_equals_the_ten() -> None:
    """decode_greedy's k-token graph with the four-launch layer: the ten's tokens, and the
    next step's logits bit for bit (the caches agree)."""
    weights = random_weights(strict_config("relu2"), seed=12)
    ten, four = _runner(weights, False), _runner(weights, True)
    with ten.new_cache() as a, four.new_cache() as b:
        token = int(np.argmax(ten.forward([1, 2, 3], a)))
        four.forward([1, 2, 3], b)
        got, want = [], []
        for _ in range(4):  # the k = 5 graph captured, then replayed
            want += ten.decode_greedy(want[-1] if want else token, a, 5)
            got += four.decode_greedy(got[-1] if got else token, b, 5)
        assert got == want and a.length == b.length
        np.testing.assert_array_equal(four.forward([got[-1]], b), ten.forward([want[-1]], a))


@pytest.mark.parametrize("layer,per_layer", [(None, 4), ("0", 10)], ids=["four", "ten"])
def test_bench_profile_counts_four_launches_a_layer(monkeypatch, layer, per_layer) -> None:
    """``bitnet bench --profile``'s count (``launches_per_step``, bench_once and
    step_profile of the bench command) on the emulated device: 4 a layer + 3
    (embedding, output norm, head) by default, 10 a layer + 3 with
    ``BITNET_CUDA_LAYER=0`` (each kernel of a replayed graph counted)."""
    if layer is not None:
        monkeypatch.setenv("BITNET_CUDA_LAYER", layer)
    weights = random_weights(strict_config("silu"), seed=13)
    runner = CudaRunner(EmulatedCudaProvider(), weights)
    runs = [bench_once(Model(runner), 5, 6, np.random.default_rng(0))]
    profile = step_profile(runs, traced=True)
    assert profile["launches_per_step"] == per_layer * weights.config.num_layers + 3


def test_rows_wider_than_shared_memory_keep_the_ten() -> None:
    """An int8 row past LAYER_MAX_KP (a block's shared copy of its input) keeps the ten."""
    cfg = strict_config("silu")
    assert CudaRunner(EmulatedCudaProvider(), random_weights(cfg, seed=1)).layer_kernels
    wide = dataclasses.replace(cfg, intermediate_size=LAYER_MAX_KP + 1)
    assert not CudaRunner(EmulatedCudaProvider(), random_weights(wide, seed=1)).layer_kernels


# --- planted faults -------------------------------------------------------------------
RESIDUAL = "if (lane == 0) y[row] = y[row] + i2s_value(dot, xsum, wscale[row], xscale);"
BARRIER = "__syncthreads();  // thread 0's scale and sum (the codes were ordered by block_sum)"
STORE = "if (h % (hq / hkv) == 0) {  // the kv group's first head stores its key and value"


def _planted(tmp_path: Path, old: str, new: str) -> Path:
    src = kernels.SOURCE.read_text()
    assert src.count(old) == 1, old
    path = tmp_path / "bitnet_kernels.cu"
    path.write_text(src.replace(old, new))
    return path


def _decode_logits(runner: CudaRunner, steps: int) -> list[np.ndarray]:
    out = []
    with runner.new_cache() as cs:
        logits = runner.forward([3, 1, 4], cs)
        for _ in range(steps):
            logits = runner.forward([int(np.argmax(logits)) % 50], cs)
            out.append(logits)
    return out


@pytest.mark.parametrize(
    "old,new",
    [
        (RESIDUAL, RESIDUAL.replace("y[row] + ", "")),
        (STORE, STORE.replace("h % (hq / hkv) == 0", "false")),
    ],
    ids=["residual-skipped", "cache-never-written"],
)
def test_planted_layer_faults_are_caught(monkeypatch, tmp_path, old: str, new: str) -> None:
    """The four-launch step against the ten with the residual add of o and down skipped,
    or the K/V rows never stored (each step still attends to its own key, from shared
    memory: only the steps after see the hole): the logits differ."""
    weights = random_weights(strict_config("relu2"), seed=14)
    want = _decode_logits(_runner(weights, False), 4)
    monkeypatch.setattr(kernels, "SOURCE", _planted(tmp_path, old, new))
    got = _decode_logits(_runner(weights, True), 4)
    assert not all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))
    monkeypatch.undo()
    for a, b in zip(_decode_logits(_runner(weights, True), 4), want, strict=True):
        np.testing.assert_array_equal(a, b)


def _gemv_add(code: str, seed: int) -> np.ndarray:
    """norm_gemv_add of a fixed random problem, blocks and threads ordered by ``seed``."""
    p = EmulatedCudaProvider()
    cp = p.cp
    fn = EmulatedCuPy().RawModule(code=code).get_function("norm_gemv_add")
    rng = np.random.default_rng(5)
    n, k, rows = 64, 700, 16
    _, _, w = _ternary(p, rng, n, k)
    words, wscale, kw4 = w.words, w.scales, int(w.words.shape[1]) // 4
    xin = cp.asarray(rng.standard_normal(k).astype(np.float32))
    g = cp.asarray(rng.uniform(0.5, 1.5, k).astype(np.float32))
    y = cp.zeros((n,), dtype=np.float32)
    SEEDS.restart(seed)
    args = (xin, g, words, wscale, y, i32(n), i32(k), i32(kw4), i32(rows), EPS)
    fn((n // rows,), (NORM_THREADS,), args)
    return y.get()


def test_a_missing_barrier_after_the_norm_prologue_is_caught(tmp_path) -> None:
    """The __syncthreads() between the norm prologue (thread 0 writes the row's scale and
    sum to shared memory) and the GEMV removed: warps that run ahead of thread 0 read
    the scale before it is written (shared memory starts as NaN). The same bits at every
    seed with the barrier; wrong results at each seed without."""
    good = [_gemv_add(kernels.SOURCE.read_text(), seed) for seed in (1, 2, 3)]
    assert all(np.array_equal(good[0], y) for y in good) and np.isfinite(good[0]).all()
    planted = _planted(tmp_path, BARRIER, "").read_text()
    caught = [s for s in (1, 2, 3) if not np.array_equal(_gemv_add(planted, s), good[0])]
    assert caught == [1, 2, 3]


def _attend(code: str, seed: int) -> np.ndarray:
    """qkv_attend's output for a fixed random problem (6 query heads on 2 kv heads, the
    cache rows from the position on NaN), blocks and threads ordered by ``seed``."""
    p = EmulatedCudaProvider()
    fn = EmulatedCuPy().RawModule(code=code).get_function("qkv_attend")
    rng = np.random.default_rng(9)
    hq, hkv, d, k, pos, splits = 6, 2, 40, 72, 20, 3
    _, _, w = _ternary(p, rng, (hq + 2 * hkv) * d, k)
    cache = np.full((2, pos + 4, hkv, d), np.nan, np.float32)
    cache[:, :pos] = rng.standard_normal((2, pos, hkv, d))
    x = (rng.standard_normal(k) * 2).astype(np.float32)
    g = rng.uniform(0.2, 2.0, k).astype(np.float32)
    parts = [p.cp.zeros((hq * splits * s,), dtype=np.float32) for s in (1, 1, d)]
    att = p.cp.zeros((1, hq * d), dtype=np.float32)
    head = (p.to_device(x), p.to_device(g), w.words, w.scales, i32(k))
    caches = (p.to_device(cache[0].copy()), p.to_device(cache[1].copy()))
    args = (*head, i32(int(w.words.shape[1]) // 4), p.to_device(np.array([pos], np.int32)))
    args += (*caches, *parts, att, i32(hq), i32(hkv), i32(d), i32(d), i32(0))
    SEEDS.restart(seed)
    fn((hq,), (NORM_THREADS,), (*args, f32(13.3), i32(splits), f32(1 / math.sqrt(d)), EPS))
    return att.get()


def test_a_head_reading_the_key_another_block_writes_is_caught(tmp_path) -> None:
    """An inter-block race: the current key and value read from the cache row the kv
    group's first head writes in the same launch, instead of the block's own shared
    copy: a block that runs before the writer reads NaN. Unplanted, the same bits at
    every seed; planted, wrong at the seeds whose block order shows it (3 of these 4;
    blocks one at a time in index order, the writer first, would hide it)."""
    good = [_attend(kernels.SOURCE.read_text(), seed) for seed in (1, 2, 3, 4)]
    assert all(np.array_equal(good[0], a) for a in good) and np.isfinite(good[0]).all()
    planted = _planted(tmp_path, "const bool cur = s == keys.cur;", "const bool cur = false;")
    caught = [
        s for s in (1, 2, 3, 4) if not np.array_equal(_attend(planted.read_text(), s), good[0])
    ]
    assert len(caught) >= 2, caught
