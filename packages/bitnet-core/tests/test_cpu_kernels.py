"""The native CPU providers against the numpy reference, on awkward shapes.

Every available native provider (cpu-avx512 / cpu-avx2 / cpu-neon / cpu-scalar)
runs every op it overrides with 1 and 2 threads; integer paths must match the
reference exactly, float paths to float rounding.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from native_cpu import NAME_THREADS, PROVIDER_CLASSES, native_provider

from bitnet_core.errors import ConfigError, ShapeError, UnsupportedOperationError
from bitnet_core.hal.weights import TernaryWeight
from bitnet_core.native import cpu_features
from bitnet_core.providers.cpu_native import ALL_PROVIDERS, LAYOUTS, NativeCpuProvider
from bitnet_core.providers.reference import ReferenceProvider

REF = ReferenceProvider()


@pytest.fixture(params=NAME_THREADS, ids=lambda p: f"{p[0]}-t{p[1]}")
def prov(request) -> NativeCpuProvider:
    return native_provider(*request.param)


def _ternary(rng, n: int, k: int) -> TernaryWeight:
    codes = rng.integers(-1, 2, size=(n, k)).astype(np.int8)
    return TernaryWeight.from_codes(codes, rng.uniform(0.3, 2.0, n).astype(np.float32), "w")


# (T, K, N): K = 1, odd, below / above / not a multiple of the 128 and 160 blocks; T = 1 and > 1
MATMUL_SHAPES = [
    (1, 1, 1),
    (1, 3, 5),
    (2, 127, 33),
    (1, 129, 7),
    (5, 161, 130),
    (4, 640, 17),
    (9, 1000, 65),
    (1, 1536, 300),
    (3, 2560, 97),
    (8, 2560, 40),  # prefill tiles of 8 tokens; K past the 16 blocks summed in int16
    (17, 4099, 19),
]


def _act(rng, t: int, k: int) -> np.ndarray:
    x = rng.standard_normal((t, k)).astype(np.float32) * rng.uniform(0.01, 10.0)
    if k > 2:
        x[0, k // 2] = 0.5 * np.abs(x[0]).max()  # a tie for round-half-even: q = 63.5 -> 64
    return x


@pytest.mark.parametrize("shape", MATMUL_SHAPES, ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_matmul_i2s_and_linear_exact(prov, shape, layout):
    t, k, n = shape
    rng = np.random.default_rng(zlib.crc32(f"{t},{k},{n},{layout}".encode()))
    prov._layout = layout
    w = _ternary(rng, n, k)
    ref_w = REF.load_ternary(w)
    nat_w = prov.load_ternary(w)
    assert nat_w.layout == ("i2_128" if layout == "auto" else layout) and nat_w.shape == (n, k)
    np.testing.assert_array_equal(nat_w.codes(), w.codes())
    x = _act(rng, t, k)
    xq, xs = REF.quantize_act(x)
    want = REF.matmul_i2s(xq, xs, ref_w)
    np.testing.assert_array_equal(prov.matmul_i2s(xq, xs, nat_w), want)
    np.testing.assert_array_equal(prov.linear(x, nat_w), REF.linear(x, ref_w))
    np.testing.assert_allclose(
        prov.matmul_ternary_float(x, nat_w),
        REF.matmul_ternary_float(x, ref_w),
        rtol=1e-5,
        atol=1e-5 * np.abs(x).max() * np.sqrt(k),
    )


def _tq2_weight(rng, n: int, k: int) -> TernaryWeight:
    from bitnet_core.formats import get_codec

    codec = get_codec("tq2_0")
    codes = rng.integers(-1, 2, size=(n, k)).astype(np.int8)
    codes[0, :256] = 0  # an all-zero block: stored with scale 0
    raw = codec.pack(codes, rng.uniform(0.3, 2.0, n).astype(np.float32))
    return TernaryWeight("w", n, k, "tq2_0", raw, codec)


@pytest.mark.parametrize(
    "shape",
    [
        (1, 256, 1),
        (3, 512, 7),
        (1, 1536, 33),
        (6, 768, 130),
        (11, 4352, 9),
        (8, 1536, 37),  # a batched decode step of 8 sequences: one 8-token tile, odd rows
        (9, 4352, 67),  # 8 + 1 tokens, two int16 panels, a 64-row group and 3 rows more
        (16, 2048, 65),
    ],
    ids=str,
)
def test_tq2_0_bytes_kept_as_they_are(prov, shape):
    t, k, n = shape
    rng = np.random.default_rng(k + n)
    w = _tq2_weight(rng, n, k)
    nat_w = prov.load_ternary(w)
    assert nat_w.layout == "tq2_0" and nat_w.nbytes == w.raw.nbytes  # not repacked
    assert nat_w.in_place == (not prov.native_module().huge_page_weights())  # copied to huge pages
    np.testing.assert_array_equal(nat_w.codes(), w.codes())
    np.testing.assert_array_equal(nat_w.scales, w.scales())
    ref_w = REF.load_ternary(w)
    x = _act(rng, t, k)
    xq, xs = REF.quantize_act(x)
    np.testing.assert_array_equal(prov.matmul_i2s(xq, xs, nat_w), REF.matmul_i2s(xq, xs, ref_w))
    np.testing.assert_array_equal(prov.linear(x, nat_w), REF.linear(x, ref_w))


@pytest.mark.parametrize("k", [256, 1536, 4352])
def test_tq2_0_rows_do_not_depend_on_batch(prov, k):
    """A token's outputs are the same bits whether it goes alone (the decode GEMV) or
    with 1 to 16 others (the 8-token tiles and the 4/3/2/1-token rest): what a batched
    server step needs of the ternary matmuls on the file's TQ2_0 bytes."""
    rng = np.random.default_rng(k + 1)
    nat_w = prov.load_ternary(_tq2_weight(rng, 67, k))
    x = _act(rng, 17, k)
    alone = np.concatenate([prov.linear(x[t : t + 1], nat_w) for t in range(17)])
    for t in (2, 3, 5, 8, 9, 16, 17):
        np.testing.assert_array_equal(prov.linear(x[:t], nat_w), alone[:t])


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("code,xval", [(1, 127), (1, -128), (-1, 127), (-1, -128), (0, -128)])
@pytest.mark.parametrize("t", [1, 9])  # decode GEMV, prefill tiles
def test_matmul_i2s_extreme_sums(prov, layout, code, xval, t):
    """Every product at its largest magnitude: the kernels' int16 partial sums must not wrap."""
    k, n = 4096, 5
    prov._layout = layout
    w = TernaryWeight.from_codes(np.full((n, k), code, np.int8), np.ones(n, np.float32), "w")
    xq = np.full((t, k), xval, np.int8)
    xs = np.ones(t, np.float32)
    got = prov.matmul_i2s(xq, xs, prov.load_ternary(w))
    np.testing.assert_array_equal(got, REF.matmul_i2s(xq, xs, REF.load_ternary(w)))
    np.testing.assert_array_equal(got, np.full((t, n), float(code * xval * k), np.float32))


@pytest.mark.parametrize(
    "where,why",
    [
        ((0, 1), "code 3"),  # byte 0 of row 0's second block: its first field 0b11
        ((199, 1), "code 3"),  # the last row, second block: a later chunk of rows
        ((130, "scale0"), "a zero-scale block with non-zero codes"),
        ((71, "scale2"), "rows with more than one scale"),
    ],
    ids=str,
)
def test_tq2_0_rows_checked_in_every_chunk(prov, where, why):
    """from_tq2_0 copies and checks rows in parallel chunks of 64: a bad block in any
    row is found (then the codec decides), and a good matrix equals the codec's."""
    rng = np.random.default_rng(11)
    w = _tq2_weight(rng, 200, 512)
    mod = prov.native_module()
    good = mod.TernaryMatrix.from_tq2_0(w.raw, 200, 512, "w")
    np.testing.assert_array_equal(good.codes(), w.codes())
    np.testing.assert_array_equal(good.scales, w.scales())
    raw = np.array(w.raw, dtype=np.uint8).reshape(200, 2 * 66)
    row, what = where
    if what == "scale0":  # a live block's scale set to 0
        raw[row, 64:66] = 0
    elif what == "scale2":  # the second block's scale differs from the first's
        raw[row, 66 : 66 + 64] = 0x56  # live codes (a +1 in each byte's first field)
        raw[row, 66 + 64 : 66 + 66] = np.frombuffer(np.float16(0.123).tobytes(), np.uint8)
    else:
        raw[row, what * 66] = 0x57  # fields 3, 1, 1, 1
    with pytest.raises(ValueError, match=why):
        mod.TernaryMatrix.from_tq2_0(raw.reshape(-1), 200, 512, "w")


def test_tq2_0_unusual_blocks_go_through_the_codec(prov):
    rng = np.random.default_rng(5)
    w = _tq2_weight(rng, 4, 512)
    raw = w.raw.copy()
    raw[66 + 64 : 66 + 66] = (
        0  # row 0, block 1: scale 0 with non-zero codes (the codec zeroes them)
    )
    w2 = TernaryWeight("w", 4, 512, "tq2_0", raw, w.codec)
    nat_w = prov.load_ternary(w2)
    assert nat_w.layout == "i2_128"
    x = _act(rng, 2, 512)
    np.testing.assert_array_equal(prov.linear(x, nat_w), REF.linear(x, REF.load_ternary(w2)))


@pytest.mark.parametrize("shape", [(1, 1), (1, 7), (3, 33), (8, 1000), (17, 1536), (2, 4099)])
def test_quantize_act_exact(prov, shape):
    rng = np.random.default_rng(shape[1])
    x = _act(rng, *shape)
    x[-1] = 0.0  # an all-zero token: the 1e-5 floor
    xq, xs = prov.quantize_act(x)
    rq, rs = REF.quantize_act(x)
    np.testing.assert_array_equal(xq, rq)
    np.testing.assert_array_equal(xs, rs)


def test_quantize_act_rounds_half_to_even(prov):
    # amax 127 -> scale 1: the products are the values themselves
    x = np.array([[127.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5, 126.5, -126.5]], np.float32)
    xq, _ = prov.quantize_act(np.tile(x, (1, 3)))  # 30 values: the SIMD body and its tail
    np.testing.assert_array_equal(xq[0, :10], [127, 0, 2, 2, 0, -2, -2, 4, 126, -126])
    np.testing.assert_array_equal(xq, REF.quantize_act(np.tile(x, (1, 3)))[0])


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize(
    "shape",
    [
        (1, 1, 1),
        (1, 13, 9),
        (1, 1536, 67),
        (1, 100, 130),
        (1, 45, 6),
        (2, 1536, 67),
        (7, 100, 130),
        (4, 33, 5),
    ],
)
def test_matmul_dense(prov, shape, dtype):
    t, k, n = shape
    rng = np.random.default_rng(k * n)
    table = rng.standard_normal((n, k)).astype(dtype)
    x = rng.standard_normal((t, k)).astype(np.float32)
    want = REF.matmul_dense(x, table)
    got = prov.matmul_dense(x, prov.to_device(table))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.sqrt(k))


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("k", [5, 40, 100, 1000, 1536])
def test_matmul_dense_rows_do_not_depend_on_batch(prov, k, dtype):
    """A row's logits are the same bits whether it goes alone (decode) or with other rows
    (prefill, a batched server step of up to 17 sequences): every float head kernel sums
    a row in one order (k = 1000: columns past the last 32 and the last 8)."""
    rng = np.random.default_rng(k)
    table = prov.to_device(rng.standard_normal((37, k)).astype(dtype))
    x = rng.standard_normal((17, k)).astype(np.float32)
    alone = np.concatenate([prov.matmul_dense(x[t : t + 1], table) for t in range(17)])
    for t in (2, 3, 5, 8, 9, 16, 17):
        np.testing.assert_array_equal(prov.matmul_dense(x[:t], table), alone[:t])


@pytest.mark.parametrize(
    "shape", [(1, 5, 3), (1, 1536, 129), (1, 70, 41), (3, 1536, 129), (6, 70, 40)]
)
def test_matmul_dense_int8_head(prov, shape):
    t, k, n = shape
    rng = np.random.default_rng(k)
    table = rng.standard_normal((n, k)).astype(np.float16)
    x = rng.standard_normal((t, k)).astype(np.float32)
    prov._int8_head = True
    want = REF.matmul_dense(x, table)
    got = prov.matmul_dense(x, table)
    # int8 weights and activations: an approximation, about 1% of the largest logit
    assert np.abs(got - want).max() <= 0.03 * np.abs(want).max() + 1e-6
    assert prov.matmul_dense(x, table) is not got  # cached table, fresh result
    assert len(prov._i8_tables) == 1


# (T, K, N): decode's rows in fours and the rows after them, a row's last 32 columns
# alone; the 2-row x 4-token tiles of several tokens, an odd row left in a 16-row
# block, tokens after the groups of four
@pytest.mark.parametrize(
    "shape", [(1, 1536, 131), (1, 64, 9), (1, 96, 7), (5, 96, 130), (4, 64, 9), (11, 40, 37)]
)
def test_matmul_dense_int8_head_equals_scalar(prov, shape):
    """Every instruction set's int8 head computes the scalar kernel's numbers bit for
    bit (same integer sums, same float64 finish)."""
    t, k, n = shape
    rng = np.random.default_rng(n)
    table = rng.standard_normal((n, k)).astype(np.float16)
    x = rng.standard_normal((t, k)).astype(np.float32)
    scalar = native_provider("cpu-scalar", 1)
    prov._int8_head = scalar._int8_head = True
    np.testing.assert_array_equal(prov.matmul_dense(x, table), scalar.matmul_dense(x, table))


def _near_tie_table(rng, n: int, k: int, dtype) -> np.ndarray:
    """A head whose rows come in near-ties: row pairs that differ by a little noise, so
    the int8 copy's rounding reorders their logits for many inputs."""
    base = rng.standard_normal((n // 2 + 1, k))
    table = np.repeat(base, 2, axis=0)[:n] + 1e-3 * rng.standard_normal((n, k))
    return table.astype(dtype)


def _int8_bound(table: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[T, N] twice: the bound dense_i8_checked uses on |int8 logit - exact logit|, the
    smaller of the elementwise bound s_r (|x|_1 + l1_r / xs) / 2 and the Cauchy-Schwarz
    bound |a_r|_2 |x|_2 + s_r |q_r|_2 |b|_2 (w_r = s_r q_r + a_r, x = xq / xs + b); and
    the slack it adds for float rounding."""
    w32 = table.astype(np.float32)
    s = np.abs(w32).max(axis=1) / np.float32(127)
    s[s == 0] = 1
    q = np.clip(np.rint(w32 / s[:, None]), -127, 127)
    a = w32.astype(np.float64) - s[:, None].astype(np.float64) * q
    xs = np.float32(127) / np.maximum(np.abs(x).max(axis=1), np.float32(1e-5))
    xq = np.clip(np.rint(x * xs[:, None]), -128, 127)
    x = x.astype(np.float64)
    b = x - xq / xs[:, None].astype(np.float64)
    x_l1, x_l2, b_l2 = np.abs(x).sum(axis=1), np.linalg.norm(x, axis=1), np.linalg.norm(b, axis=1)
    q_l1, q_l2, a_l2 = np.abs(q).sum(axis=1), np.linalg.norm(q, axis=1), np.linalg.norm(a, axis=1)
    elementwise = 0.5 * s * (x_l1[:, None] + q_l1 / xs[:, None])
    cauchy_schwarz = a_l2 * x_l2[:, None] + s * q_l2 * b_l2[:, None]
    return np.minimum(elementwise, cauchy_schwarz), 0.02 * elementwise


# (T, K, N): one token and several; K below, at and off the 32-column block; N odd, and
# below / above the 4-row tiles and the 16-row blocks
CHECKED_SHAPES = [(1, 5, 3), (1, 64, 90), (3, 70, 41), (8, 257, 130), (1, 1536, 1001), (5, 96, 16)]


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("shape", CHECKED_SHAPES)
def test_matmul_dense_int8_checked(prov, shape, dtype):
    """The checked int8 head: every token's argmax is the exact head's, and every
    logit is either the exact head's (bit for bit) or the int8 head's, the latter only
    where its bound rules the row out of the maximum."""
    t, k, n = shape
    rng = np.random.default_rng(n * k)
    table = _near_tie_table(rng, n, k, dtype)
    x = rng.standard_normal((t, k)).astype(np.float32)
    exact = prov.matmul_dense(x, table)  # the op is exact under the default (auto)
    prov._int8_head = True
    approx = prov.matmul_dense(x, table)
    prov._int8_head = "checked"
    got = prov.matmul_dense(x, table)
    np.testing.assert_array_equal(got.argmax(axis=1), exact.argmax(axis=1))
    redone = got == exact
    assert np.array_equal(got[~redone], approx[~redone])
    bound, slack = _int8_bound(table, x)
    assert (np.abs(approx - exact) <= bound * 1.001 + 1e-6).all()
    # a row left at its int8 value is below the maximum by the bound
    floor = (approx - bound).max(axis=1, keepdims=True)
    assert (approx + bound < floor)[~redone].all()
    # and only rows within the bound and its slack of the maximum are recomputed
    wide = (bound + slack) * 1.001 + 1e-6
    outside = approx + wide < (approx - wide).max(axis=1, keepdims=True)
    assert np.array_equal(got[outside], approx[outside])


def test_matmul_dense_int8_checked_where_int8_alone_errs(prov):
    """On near-tied rows the int8 head alone picks another token for some inputs (so
    the test can fail); the checked head picks the exact head's every time."""
    rng = np.random.default_rng(0)
    table = _near_tie_table(rng, 512, 256, np.float16)
    x = rng.standard_normal((64, 256)).astype(np.float32)
    exact = prov.matmul_dense(x, table).argmax(axis=1)
    prov._int8_head = True
    assert (prov.matmul_dense(x, table).argmax(axis=1) != exact).any()
    prov._int8_head = "checked"
    np.testing.assert_array_equal(prov.matmul_dense(x, table).argmax(axis=1), exact)


def test_matmul_dense_int8_checked_bounds_rows_not_filled_yet():
    """A table's rows not filled yet stand for anything within half a scale (1) of zero,
    and the checked head bounds them so: the exact maximum there is found, though every
    filled row's scale is far smaller (the rows' largest bound covers the unfilled ones)."""
    from bitnet_core import _native as native

    rng = np.random.default_rng(4)
    n, k = 64, 32
    table = (rng.standard_normal((n, k)) * 1e-3).astype(np.float32)
    x = rng.standard_normal((1, k)).astype(np.float32)
    table[40] = 0.4 * np.sign(x[0])  # unfilled below, and the largest exact logit
    dense = native.DenseI8.empty(n, k)
    dense.fill_rows(0, table[:32])
    kernels = native.Kernels("avx2" if "avx2" in native.compiled_isas() else "scalar", 2)
    got = kernels.matmul_dense_i8(x, dense, table)
    assert got.argmax() == 40  # its int8 value is 0: only the exact one is the maximum
    np.testing.assert_allclose(got[0, 40], 0.4 * np.abs(x).sum(), rtol=1e-5)


def test_matmul_dense_int8_checked_rows_do_not_depend_on_batch(prov):
    rng = np.random.default_rng(2)
    table = _near_tie_table(rng, 301, 160, np.float16)
    x = rng.standard_normal((9, 160)).astype(np.float32)
    prov._int8_head = "checked"
    alone = np.concatenate([prov.matmul_dense(x[i : i + 1], table) for i in range(9)])
    np.testing.assert_array_equal(prov.matmul_dense(x, table), alone)


def test_head_modes(monkeypatch):
    prov = PROVIDER_CLASSES["cpu-scalar"](threads=1)
    for value, mode in (("", "auto"), ("auto", "auto"), ("0", "exact"), ("1", "int8")):
        monkeypatch.setenv("BITNET_CPU_INT8_HEAD", value)
        assert prov.head_mode == mode
    monkeypatch.setenv("BITNET_CPU_INT8_HEAD", "Checked")
    assert prov.head_mode == "checked"
    monkeypatch.setenv("BITNET_CPU_INT8_HEAD", "maybe")
    with pytest.raises(ConfigError, match="BITNET_CPU_INT8_HEAD"):
        prov.head_mode  # noqa: B018
    monkeypatch.delenv("BITNET_CPU_INT8_HEAD")
    # auto: a model head of 16 MiB and more is checked (up to 32768 columns), below exact
    big = np.lib.stride_tricks.as_strided(np.zeros(1, np.float16), (8192, 1024), (0, 0))
    assert prov.head_mode_for(big) == "checked"
    assert prov.head_mode_for(big[:8191]) == "exact"
    wide = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), (128, 32769), (0, 0))
    assert prov.head_mode_for(wide) == "exact"
    assert PROVIDER_CLASSES["cpu-scalar"](int8_head=False).head_mode_for(big) == "exact"


@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (5, 1536), (2, 2561)])
def test_rmsnorm(prov, shape):
    rng = np.random.default_rng(shape[1])
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal(shape[1]).astype(np.float32)
    np.testing.assert_allclose(
        prov.rmsnorm(x, w, 1e-6), REF.rmsnorm(x, w, 1e-6), rtol=1e-6, atol=1e-7
    )


@pytest.mark.parametrize("style", ["neox", "norm"])
@pytest.mark.parametrize(
    "shape,rot", [((1, 1, 2), 2), ((3, 4, 64), 64), ((5, 3, 96), 32), ((2, 2, 10), 6)]
)
def test_rope(prov, style, shape, rot):
    rng = np.random.default_rng(shape[2])
    x = rng.standard_normal(shape).astype(np.float32)
    pos = rng.integers(0, 5000, shape[0])
    want = REF.rope(x, pos, 10000.0, style, rot)
    np.testing.assert_allclose(prov.rope(x, pos, 10000.0, style, rot), want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    "t,hq,hkv,d,start",
    [
        (1, 1, 1, 1, 0),
        (1, 4, 2, 64, 0),
        (1, 8, 2, 96, 37),
        (5, 6, 3, 7, 0),
        (4, 4, 4, 64, 9),
        (9, 16, 4, 128, 200),
        # decode over several 32-row chunks (split attention): heads not a multiple
        # of 4, head dims with a tail, one-row last chunks, exactly one chunk
        (1, 5, 5, 20, 130),
        (1, 20, 5, 128, 300),
        (1, 3, 1, 9, 32),
        (1, 6, 2, 96, 31),
    ],
)
def test_attention(prov, t, hq, hkv, d, start):
    rng = np.random.default_rng(t * 1000 + d)
    cap = start + t + 3
    q = rng.standard_normal((t, hq, d)).astype(np.float32)
    k = rng.standard_normal((cap, hkv, d)).astype(np.float32)
    v = rng.standard_normal((cap, hkv, d)).astype(np.float32)
    k[start + t :] = 1e4  # never read: beyond the causal window
    want = REF.attention(q, k, v, start)
    np.testing.assert_allclose(prov.attention(q, k, v, start), want, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize(
    "t,hq,hkv,d,start,window",
    [
        (1, 4, 2, 64, 0, 4),  # decode inside the window
        (1, 5, 5, 20, 130, 40),  # decode past it: the cache from the window's first row
        (1, 3, 1, 9, 32, 1),  # a window of one row
        (9, 16, 4, 128, 200, 100),  # a prompt chunk past the window
        (12, 4, 1, 24, 0, 5),  # a prompt longer than the window (blocks of 4 queries)
        (7, 6, 3, 7, 2, 9),  # queries crossing the window's edge inside a block
        (8, 4, 2, 32, 3, 64),  # all inside the window: plain attention
    ],
)
def test_attention_window(prov, t, hq, hkv, d, start, window, dtype):
    """``attention_window`` (Gemma3's local layers, the fused pass's windowed attention)
    against the numpy reference; rows no query may see hold 1e4, which would dominate."""
    from bitnet_core.hal.extra_ops import attention_window_ref

    rng = np.random.default_rng(t * 1000 + d + window)
    cap = start + t + 3
    q = rng.standard_normal((t, hq, d)).astype(np.float32)
    k = rng.standard_normal((cap, hkv, d)).astype(dtype)
    v = rng.standard_normal((cap, hkv, d)).astype(dtype)
    k[start + t :] = 1e4
    k[: max(0, start + 1 - window)] = 1e4  # before the first query's window
    got = prov.attention_window(q, k, v, start, window)
    want = attention_window_ref(q, k, v, start, window)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)
    if start + t <= window:  # nothing out of reach: the plain attention, bit for bit
        np.testing.assert_array_equal(got, prov.attention(q, k, v, start))
    with pytest.raises(ShapeError, match="window"):
        prov.attention_window(q, k, v, start, -1)


def test_gelu_mul(prov):
    """Gemma3's ``gelu_tanh(gate) * up`` (float64 inside) against the numpy reference."""
    from bitnet_core.hal.extra_ops import gelu_mul_ref

    rng = np.random.default_rng(4)
    g = (rng.standard_normal((7, 301)) * 4).astype(np.float32)
    u = rng.standard_normal((7, 301)).astype(np.float32)
    np.testing.assert_allclose(prov.gelu_mul(g, u), gelu_mul_ref(g, u), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("t,start", [(1, 0), (1, 150), (6, 70)])
def test_attention_on_float16_caches(prov, t, start):
    """A float16 cache gives exactly what float32 caches of the same values give."""
    rng = np.random.default_rng(start)
    cap = start + t + 2
    q = rng.standard_normal((t, 6, 40)).astype(np.float32)
    k16 = rng.standard_normal((cap, 3, 40)).astype(np.float16)
    v16 = rng.standard_normal((cap, 3, 40)).astype(np.float16)
    got = prov.attention(q, k16, v16, start)
    np.testing.assert_array_equal(
        got, prov.attention(q, k16.astype(np.float32), v16.astype(np.float32), start)
    )
    np.testing.assert_allclose(got, REF.attention(q, k16, v16, start), rtol=2e-5, atol=2e-6)
    with pytest.raises(ShapeError, match="same dtype"):
        prov.attention(q, k16, v16.astype(np.float32), start)


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize(
    "hq,hkv,d", [(4, 4, 64), (6, 3, 20), (8, 2, 9), (2, 1, 7), (16, 16, 96), (5, 5, 40)]
)
def test_prompt_attention_does_not_depend_on_how_the_prompt_is_split(prov, dtype, hq, hkv, d):
    """Prompt attention takes its query tokens four at a time (each K/V row read once
    for the four); a token's output has the same bits whether it was one of four or
    alone (pieces of 2, 3 and 5 tokens put it in other blocks, or in none)."""
    rng = np.random.default_rng(hq * 10 + d)
    start, t = 5, 13
    q = rng.standard_normal((t, hq, d)).astype(np.float32)
    k = rng.standard_normal((start + t, hkv, d)).astype(dtype)
    v = rng.standard_normal((start + t, hkv, d)).astype(dtype)
    whole = prov.attention(q, k, v, start)
    pieces, at = [], 0
    for n in (2, 3, 5, 3):
        pieces.append(prov.attention(q[at : at + n], k, v, start + at))
        at += n
    np.testing.assert_array_equal(np.concatenate(pieces), whole)
    np.testing.assert_allclose(whole, REF.attention(q, k, v, start), rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize(
    "hq,hkv,d,start",
    [(8, 4, 24, 70), (12, 4, 36, 33), (20, 5, 128, 100), (16, 2, 20, 64), (8, 1, 9, 5)],
)
def test_grouped_heads_equal_their_own_copies(prov, dtype, hq, hkv, d, start):
    """Decode attention of query heads that share a KV head (read once for the group)
    gives, bit for bit, what it gives with the KV heads repeated, one for each query head."""
    rng = np.random.default_rng(hq * 100 + d)
    cap = start + 3
    q = rng.standard_normal((1, hq, d)).astype(np.float32)
    k = rng.standard_normal((cap, hkv, d)).astype(dtype)
    v = rng.standard_normal((cap, hkv, d)).astype(dtype)
    group = hq // hkv
    got = prov.attention(q, k, v, start)
    alone = prov.attention(q, np.repeat(k, group, axis=1), np.repeat(v, group, axis=1), start)
    np.testing.assert_array_equal(got, alone)
    np.testing.assert_allclose(got, REF.attention(q, k, v, start), rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("start", [2100, 5, 70])
@pytest.mark.parametrize("name", sorted(PROVIDER_CLASSES))
def test_decode_attention_does_not_depend_on_threads(name, start):
    """A long context's 66 cache chunks, spread over however many threads, give the
    same bits on 1, 2 and 3 threads, and the reference's numbers; so do a short
    context's one or three chunks (fewer chunks than threads)."""
    rng = np.random.default_rng(5)
    hq, hkv, d = 16, 8, 60
    q = rng.standard_normal((1, hq, d)).astype(np.float32)
    k = rng.standard_normal((start + 1, hkv, d)).astype(np.float16)
    v = rng.standard_normal((start + 1, hkv, d)).astype(np.float16)
    outs = [native_provider(name, t).attention(q, k, v, start) for t in (1, 2, 3)]
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[0], outs[2])
    np.testing.assert_allclose(outs[0], REF.attention(q, k, v, start), rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("shape", [(1,), (1, 7), (3, 4096), (2, 3, 5)])
def test_gated_activations(prov, shape):
    rng = np.random.default_rng(len(shape))
    g = (rng.standard_normal(shape) * 6).astype(np.float32)
    u = rng.standard_normal(shape).astype(np.float32)
    np.testing.assert_allclose(prov.silu_mul(g, u), REF.silu_mul(g, u), rtol=2e-6, atol=1e-7)
    np.testing.assert_allclose(prov.relu2_mul(g, u), REF.relu2_mul(g, u), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("n", [1, 5, 64, 6913])
def test_relu2_mul_equals_the_scalar_kernel_bit_for_bit(prov, n):
    """Every provider's relu(g)^2 * u is the scalar kernel's float64 arithmetic, bit for
    bit, on special values too (NaN and -0 gates give +0, as the scalar compare does)."""
    rng = np.random.default_rng(n)
    g = (rng.standard_normal(n) * 6).astype(np.float32)
    u = rng.standard_normal(n).astype(np.float32)
    special = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 1e-20, 3.4e38, -3.4e38, 2.0]
    g[: len(special)] = np.array(special, np.float32)[:n]
    u[rng.integers(0, n, size=max(1, n // 8))] = np.inf
    want = native_provider("cpu-scalar", 1).relu2_mul(g, u)
    np.testing.assert_array_equal(prov.relu2_mul(g, u).view(np.uint32), want.view(np.uint32))


def test_shape_errors_are_clear(prov):
    rng = np.random.default_rng(0)
    w = prov.load_ternary(_ternary(rng, 4, 10))
    with pytest.raises(ShapeError, match="do not match"):
        prov.linear(np.zeros((1, 11), np.float32), w)
    with pytest.raises(ShapeError):
        prov.matmul_i2s(np.zeros((2, 10), np.int8), np.ones(3, np.float32), w)
    with pytest.raises(ShapeError):
        prov.matmul_dense(np.zeros((1, 3), np.float32), np.zeros((2, 4), np.float16))
    with pytest.raises(ShapeError):
        prov.attention(
            np.zeros((2, 3, 4), np.float32),
            np.zeros((1, 3, 4), np.float32),
            np.zeros((1, 3, 4), np.float32),
            0,
        )
    with pytest.raises(ShapeError):
        prov.rope(np.zeros((1, 1, 4), np.float32), np.zeros(1), 1e4, "neox", 6)
    with pytest.raises(UnsupportedOperationError):
        prov.rope(np.zeros((1, 1, 4), np.float32), np.zeros(1), 1e4, "spiral", 4)
    with pytest.raises(ShapeError):
        prov.linear(np.zeros((1, 10), np.float32), REF.load_ternary(_ternary(rng, 4, 10)))


def test_probe_reasons_match_the_cpu():
    feats = cpu_features()
    for cls in ALL_PROVIDERS:
        avail = cls().probe()
        if avail.available:
            continue
        assert avail.reason, cls.name
        if cls.name == "cpu-avx512" and not feats.get("avx512f"):
            assert "CPU lacks" in avail.reason and "avx512f" in avail.reason
        if cls.name == "cpu-neon" and not feats.get("neon"):
            assert "arm64" in avail.reason
    assert PROVIDER_CLASSES["cpu-scalar"]().probe().available
    if feats.get("avx2") and feats.get("fma") and feats.get("f16c"):
        assert PROVIDER_CLASSES["cpu-avx2"]().probe().available


def test_threads_setting(monkeypatch):
    monkeypatch.setenv("BITNET_THREADS", "3")
    assert PROVIDER_CLASSES["cpu-scalar"]().threads == 3
    monkeypatch.setenv("BITNET_THREADS", "zero")
    with pytest.raises(ConfigError):
        _ = PROVIDER_CLASSES["cpu-scalar"]().threads
    assert not PROVIDER_CLASSES["cpu-scalar"]().probe().available
    monkeypatch.delenv("BITNET_THREADS")
    prov = PROVIDER_CLASSES["cpu-scalar"]()
    import os

    assert prov.threads == len(os.sched_getaffinity(0))
    prov.set_threads(1)
    assert prov.threads == 1
    monkeypatch.setenv("BITNET_CPU_LAYOUT", "nope")
    with pytest.raises(ConfigError):
        _ = PROVIDER_CLASSES["cpu-scalar"]().layout


def test_registered_and_ranked(clean_registry):
    names = [r.name for r in clean_registry.records()]
    for name in PROVIDER_CLASSES:
        assert name in names
    from bitnet_core.hal.selection import select

    best = select("cpu")
    assert best.provider.name != "cpu-reference"  # a native provider is always available


@pytest.mark.parametrize("k", [100, 4101])
def test_gated_rows_do_not_depend_on_batch(prov, k):
    """A row's silu/relu2 products are the same bits alone or among other rows (a
    batched server step): the vector/scalar split falls at the same place of a row."""
    rng = np.random.default_rng(k)
    g = (rng.standard_normal((9, k)) * 6).astype(np.float32)
    u = rng.standard_normal((9, k)).astype(np.float32)
    for op in (prov.silu_mul, prov.relu2_mul):
        alone = np.concatenate([op(g[t : t + 1], u[t : t + 1]) for t in range(9)])
        np.testing.assert_array_equal(op(g, u), alone)
