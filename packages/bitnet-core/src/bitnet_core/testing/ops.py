"""Op-level conformance cases: every op of ``KernelProvider`` against the numpy reference.

Each ``OpCase`` builds random inputs (seeded from its id, so a failure
reproduces), runs the op on the provider under test and on
``ReferenceProvider``, and compares within the op's tolerance
(``bitnet_core.testing.tolerances``). Shapes are chosen to be awkward: size
1, odd sizes, sizes one off the block sizes kernels like (4, 32, 128, 256)
and a few of the real model's sizes (2560, 6912, 20 query / 5 KV heads).

Before every op the kit *poisons* the provider's allocator: it uploads and
frees NaN-filled buffers of the output's size, so a pooling allocator (CuPy,
PyOpenCL) hands the op a NaN-filled buffer and an element the kernel forgets
to write shows up as NaN. KV caches are NaN-filled on purpose too.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..formats.absmax import quantize_act_ref
from ..hal.bf16 import BF16Array
from ..hal.weights import TernaryWeight
from ..providers.reference import ReferenceProvider
from .tolerances import (
    DOT_RTOL,
    DOT_RTOL_F16_STORAGE,
    TOLERANCES,
    ConformanceFailure,
    assert_close,
    dot_bound,
    quant_ties,
    rope_atol,
)

REFERENCE = ReferenceProvider()
#: embedding/output table dtypes checked (``bfloat16`` as the provider gets it from a
#: BF16 file: kept where it lists ``table_dtypes``, widened to float32 otherwise)
TABLE_DTYPES = ("float16", "float32", "bfloat16")


@dataclass(frozen=True)
class OpCase:
    """One check: ``check(provider, rng, **params)`` raises ``ConformanceFailure`` on a mismatch."""

    op: str
    id: str
    check: Callable[..., None] = field(repr=False)
    params: dict[str, Any] = field(default_factory=dict, repr=False)
    large: bool = False

    def run(self, provider: Any) -> None:
        rng = np.random.default_rng(zlib.crc32(self.id.encode()))
        self.check(provider, rng, **self.params)


# --- helpers -------------------------------------------------------------------


def upload(p: Any, array: np.ndarray) -> Any:
    """``p.to_device`` of a private copy (a host provider may alias the array)."""
    return p.to_device(np.array(array, copy=True))


def download(p: Any, array: Any) -> np.ndarray:
    return np.asarray(p.to_host(array))


def poison(p: Any, shape: tuple[int, ...], count: int = 2) -> None:
    """Upload and free NaN buffers of ``shape`` so a pooled output starts as NaN."""
    bufs = [p.to_device(np.full(shape, np.nan, dtype=np.float32)) for _ in range(count)]
    del bufs


def random_codes(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    """Ternary codes, about a third zeros, with an all +1, all -1 and all 0 row when rows allow."""
    codes = rng.integers(-1, 2, size=(rows, cols), dtype=np.int8)
    for r, v in zip(range(rows - 1, 0, -1), (1, -1, 0), strict=False):
        codes[r] = v
    return codes


def random_weight(
    rng: np.random.Generator, rows: int, cols: int, per_tensor: bool = False
) -> TernaryWeight:
    codes = random_codes(rng, rows, cols)
    scales = (
        np.float32(rng.uniform(0.5, 2.0))
        if per_tensor
        else rng.uniform(0.25, 4.0, size=rows).astype(np.float32)
    )
    return TernaryWeight.from_codes(codes, scales, name=f"w{rows}x{cols}")


def activations(rng: np.random.Generator, *shape: int) -> np.ndarray:
    """Random float32 activations with outlier rows (huge, tiny, zero) when there are rows."""
    x = rng.standard_normal(shape).astype(np.float32)
    if shape[0] >= 3:
        x[1] *= 1e3
        x[2] *= 1e-4
    if shape[0] >= 4:
        x[3] = 0.0
    return x


# --- memory --------------------------------------------------------------------


def check_roundtrip(p: Any, rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> None:
    if np.dtype(dtype).kind == "f":
        a = rng.standard_normal(shape).astype(dtype)
    else:
        info = np.iinfo(dtype)
        a = rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dtype)
    got = download(p, upload(p, a))
    if got.dtype.kind != a.dtype.kind:
        raise ConformanceFailure(f"to_host(to_device({a.dtype})) came back as {got.dtype}")
    assert_close(f"to_host(to_device({dtype} {shape}))", got, a)


def check_empty(p: Any, rng: np.random.Generator, shape: tuple[int, ...]) -> None:
    got = download(p, p.empty(shape))
    if got.shape != shape:
        raise ConformanceFailure(f"empty{shape} has shape {got.shape}")
    if got.dtype != np.float32:
        raise ConformanceFailure(f"empty{shape} defaults to {got.dtype}, expected float32")


def check_reshape(p: Any, rng: np.random.Generator, t: int, h: int, d: int) -> None:
    """The engine views ``[T, H*D]`` as ``[T, H, D]`` and back with the ``reshape`` op
    (row-major, like numpy), on the outputs of other ops, and feeds the views to ops."""
    x = rng.standard_normal((t, h * d)).astype(np.float32)
    reshape = getattr(p, "reshape", None) or (lambda a, shape: a.reshape(shape))
    dev = p.silu(upload(p, x))  # an op's output, as the engine reshapes them
    try:
        three = reshape(dev, (t, h, d))
        two = reshape(three, (t, h * d))
    except AttributeError as exc:
        raise ConformanceFailure(
            f"device arrays cannot be reshaped ({exc}): implement the protocol's "
            "reshape(array, shape) op (a row-major view)"
        ) from exc
    flat = download(p, dev)  # the values themselves must not change: exact
    assert_close(
        f"reshape [{t}, {h * d}] -> [{t}, {h}, {d}]", download(p, three), flat.reshape(t, h, d)
    )
    assert_close(f"reshape [{t}, {h}, {d}] -> [{t}, {h * d}]", download(p, two), flat)
    # an op on the view sees the view's shape
    want = REFERENCE.silu(x)
    out = download(p, p.rope(three, np.arange(t), 10000.0, "neox", d - d % 2))
    assert_close(
        "rope of a reshaped array",
        out,
        REFERENCE.rope(want.reshape(t, h, d), np.arange(t), 10000.0, "neox", d - d % 2),
        bound=np.full(out.shape, rope_atol(t) * float(np.abs(want).max())),
    )


# --- ops -----------------------------------------------------------------------


def random_table(rng: np.random.Generator, rows: int, cols: int, std: float, dtype: str) -> Any:
    """A float32 / float16 table, or a ``BF16Array`` for ``dtype="bfloat16"``."""
    values = rng.standard_normal((rows, cols)) * std
    return BF16Array.from_float(values) if dtype == "bfloat16" else values.astype(dtype)


def upload_table(p: Any, table: Any) -> Any:
    """An embedding/output table on ``p`` as model loading puts it there (``host_dense_for``:
    bfloat16 kept where ``table_dtypes`` lists it, widened to float32 else)."""
    from ..sdk.weights import host_dense_for

    host = host_dense_for(p, table)
    return p.to_device(BF16Array(host.bits.copy()) if isinstance(host, BF16Array) else host.copy())


def check_embedding(
    p: Any, rng: np.random.Generator, vocab: int, dim: int, n_ids: int, dtype: str
) -> None:
    table = random_table(rng, vocab, dim, 0.5, dtype)
    ids = rng.integers(0, vocab, size=n_ids).astype(np.int32 if n_ids % 2 else np.int64)
    ids[0] = vocab - 1
    if n_ids > 1:
        ids[-1] = 0
    want = REFERENCE.embedding(np.asarray(table), ids)
    poison(p, want.shape)
    got = download(p, p.embedding(upload_table(p, table), ids))
    tol = TOLERANCES["embedding_f32" if dtype == "float32" else "embedding_f16"]
    assert_close(f"embedding({dtype} table {table.shape}, {n_ids} ids)", got, want, tol=tol)


def check_rmsnorm(p: Any, rng: np.random.Generator, t: int, d: int, eps: float) -> None:
    x = activations(rng, t, d)
    w = rng.uniform(0.1, 2.0, size=d).astype(np.float32)
    want = REFERENCE.rmsnorm(x, w, eps)
    poison(p, want.shape)
    got = download(p, p.rmsnorm(upload(p, x), upload(p, w), eps))
    assert_close(f"rmsnorm([{t}, {d}], eps={eps})", got, want, tol=TOLERANCES["rmsnorm"])


def _quant_input(rng: np.random.Generator, t: int, k: int, ties: bool) -> np.ndarray:
    if ties:  # amax = 127 so scale = 1 exactly and x * scale hits k + 0.5 exactly
        x = (rng.integers(-127, 127, size=(t, k)) + 0.5).astype(np.float32)
        x[:, 0] = 127.0
        return x
    x = activations(rng, t, k)
    if t >= 5:
        x[4] = 0.0
        x[4, k // 2] = -3.0  # a single non-zero: it must map to -127
    if t >= 6:
        x[5] = 1e-8  # below the 1e-5 floor of amax
    return x


def check_quantize_act(p: Any, rng: np.random.Generator, t: int, k: int, ties: bool) -> None:
    x = _quant_input(rng, t, k, ties)
    want_q, want_s = quantize_act_ref(x)
    poison(p, (t, k))
    q_dev, s_dev = p.quantize_act(upload(p, x))
    got_q, got_s = download(p, q_dev), download(p, s_dev)
    what = f"quantize_act([{t}, {k}]{' ties' if ties else ''})"
    assert_close(f"{what} scale", got_s, want_s, tol=TOLERANCES["quantize_act_scale"])
    if got_q.dtype.kind not in "iu":
        raise ConformanceFailure(f"{what}: codes have dtype {got_q.dtype}, expected int8")
    allowed = np.zeros(x.shape) if ties else quant_ties(x, want_s).astype(np.float64)
    assert_close(f"{what} codes", got_q, want_q, bound=allowed)


def _quantized(rng: np.random.Generator, t: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    xq, xs = quantize_act_ref(activations(rng, t, k))
    if t >= 5:  # extreme codes: what saturating int8/int16 tricks get wrong
        xq[4] = -128
        xq[4, ::2] = 127
    return xq, xs


def check_matmul_i2s(
    p: Any, rng: np.random.Generator, t: int, k: int, n: int, per_tensor: bool
) -> None:
    xq, xs = _quantized(rng, t, k)
    weight = random_weight(rng, n, k, per_tensor)
    want = REFERENCE.matmul_i2s(xq, xs, REFERENCE.load_ternary(weight))
    w_dev = p.load_ternary(weight)
    poison(p, want.shape)
    got = download(p, p.matmul_i2s(upload(p, xq), upload(p, xs), w_dev))
    assert_close(f"matmul_i2s(T={t}, K={k}, N={n})", got, want, tol=TOLERANCES["matmul_i2s"])


def check_linear(p: Any, rng: np.random.Generator, t: int, k: int, n: int) -> None:
    x = activations(rng, t, k)
    weight = random_weight(rng, n, k)
    ref_w = REFERENCE.load_ternary(weight)
    want = REFERENCE.linear(x, ref_w)
    _, xs = quantize_act_ref(x)
    # each activation code that may sit on either side of a tie moves y by scales[n] / s[t]
    ties = quant_ties(x, xs).astype(np.float64) @ np.abs(ref_w.codes.astype(np.float64)).T
    bound = TOLERANCES["matmul_i2s"].bound(want) + ties * ref_w.scales[None, :] / xs[:, None]
    w_dev = p.load_ternary(weight)
    poison(p, want.shape)
    got = download(p, p.linear(upload(p, x), w_dev))
    assert_close(f"linear(T={t}, K={k}, N={n})", got, want, bound=bound * (1 + 1e-6))


def check_matmul_ternary_float(p: Any, rng: np.random.Generator, t: int, k: int, n: int) -> None:
    x = activations(rng, t, k)
    weight = random_weight(rng, n, k)
    ref_w = REFERENCE.load_ternary(weight)
    want = REFERENCE.matmul_ternary_float(x, ref_w)
    bound = dot_bound(x, ref_w.codes) * ref_w.scales[None, :] + 1e-30
    w_dev = p.load_ternary(weight)
    poison(p, want.shape)
    got = download(p, p.matmul_ternary_float(upload(p, x), w_dev))
    assert_close(f"matmul_ternary_float(T={t}, K={k}, N={n})", got, want, bound=bound)


def check_matmul_dense(
    p: Any, rng: np.random.Generator, t: int, k: int, n: int, dtype: str
) -> None:
    x = activations(rng, t, k)
    table = random_table(rng, n, k, 0.05, dtype)
    want = REFERENCE.matmul_dense(x, np.asarray(table))
    rtol = DOT_RTOL_F16_STORAGE if dtype == "float32" else DOT_RTOL
    bound = dot_bound(x, np.asarray(table), rtol) + 1e-30
    t_dev = upload_table(p, table)
    poison(p, want.shape)
    got = download(p, p.matmul_dense(upload(p, x), t_dev))
    assert_close(f"matmul_dense(T={t}, K={k}, N={n}, {dtype})", got, want, bound=bound)


def check_rope(
    p: Any,
    rng: np.random.Generator,
    t: int,
    h: int,
    d: int,
    rot_dim: int,
    style: str,
    theta: float,
    max_pos: int,
) -> None:
    x = rng.standard_normal((t, h, d)).astype(np.float32)
    positions = rng.integers(0, max_pos + 1, size=t).astype(np.int32)
    positions[0] = max_pos
    want = REFERENCE.rope(x, positions, theta, style, rot_dim)
    bound = np.full(x.shape, rope_atol(max_pos) * float(np.abs(x).max()))
    bound[..., rot_dim:] = 0.0  # the dimensions past rot_dim pass through unchanged
    poison(p, want.shape)
    got = download(p, p.rope(upload(p, x), positions.copy(), theta, style, rot_dim))
    assert_close(
        f"rope([{t}, {h}, {d}], rot_dim={rot_dim}, {style}, theta={theta}, pos<={max_pos})",
        got,
        want,
        bound=bound,
    )


def check_attention(
    p: Any,
    rng: np.random.Generator,
    cache_len: int,
    hq: int,
    hkv: int,
    d: int,
    steps: tuple[tuple[int, int], ...],
    q_scale: float = 1.0,
    store_only: int = 0,
) -> None:
    """A sequence of (start, T) steps: kv_store K and V, then attention, like a real decode.

    Run once per KV cache dtype the provider declares (``kv_dtypes``: a float16
    cache is checked against the reference on the same float16 cache). The
    first ``store_only`` steps only fill the cache (a long prefill is costly for numpy).
    """
    from ..sdk.kv_cache import provider_kv_dtypes

    for kv_dtype in provider_kv_dtypes(p):
        _check_attention_steps(
            p, rng, (cache_len, hkv, d), hq, steps, q_scale, store_only, kv_dtype
        )


def _check_attention_steps(
    p: Any,
    rng: np.random.Generator,
    shape: tuple[int, int, int],
    hq: int,
    steps: tuple[tuple[int, int], ...],
    q_scale: float,
    store_only: int,
    kv_dtype: str,
) -> None:
    cache_len, hkv, d = shape
    ref_k = np.full(shape, np.nan, dtype=kv_dtype)
    ref_v = np.full(shape, np.nan, dtype=kv_dtype)
    k_dev, v_dev = upload(p, ref_k), upload(p, ref_v)
    for step, (start, t) in enumerate(steps):
        k = rng.standard_normal((t, hkv, d)).astype(np.float32)
        v = rng.standard_normal((t, hkv, d)).astype(np.float32)
        q = (rng.standard_normal((t, hq, d)) * q_scale).astype(np.float32)
        REFERENCE.kv_store(ref_k, k, start)
        REFERENCE.kv_store(ref_v, v, start)
        p.kv_store(k_dev, upload(p, k), start)
        p.kv_store(v_dev, upload(p, v), start)
        what = f"{kv_dtype} cache [{cache_len}, {hkv}, {d}], step (start={start}, T={t})"
        for name, dev, ref in (("k", k_dev, ref_k), ("v", v_dev, ref_v)):
            assert_close(f"kv_store {name} {what}", download(p, dev), ref)
        if step < store_only:
            continue
        want = REFERENCE.attention(q, ref_k, ref_v, start)
        poison(p, want.shape)
        got = download(p, p.attention(upload(p, q), k_dev, v_dev, start))
        assert_close(
            f"attention(q [{t}, {hq}, {d}], {what}, q*{q_scale})",
            got,
            want,
            tol=TOLERANCES["attention"],
        )


def _elementwise_input(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    flat = x.reshape(-1)
    specials = np.array([0.0, -0.0, 100.0, -100.0, 20.0, -20.0], dtype=np.float32)
    flat[: min(flat.size, specials.size)] = specials[: flat.size]
    return x


def check_unary(p: Any, rng: np.random.Generator, op: str, shape: tuple[int, ...]) -> None:
    x = _elementwise_input(rng, shape)
    want = getattr(REFERENCE, op)(x)
    poison(p, want.shape)
    got = download(p, getattr(p, op)(upload(p, x)))
    assert_close(f"{op}({list(shape)})", got, want, tol=TOLERANCES[op])


def check_binary(p: Any, rng: np.random.Generator, op: str, shape: tuple[int, ...]) -> None:
    a = _elementwise_input(rng, shape)
    b = rng.standard_normal(shape).astype(np.float32)
    want = getattr(REFERENCE, op)(a, b)
    poison(p, want.shape)
    got = download(p, getattr(p, op)(upload(p, a), upload(p, b)))
    assert_close(f"{op}({list(shape)})", got, want, tol=TOLERANCES[op])


# --- weights in the file formats, and the quantizers ----------------------------


def _codec_weight(name: str, codes: np.ndarray, scales: np.ndarray) -> TernaryWeight | None:
    """``codes`` packed by codec ``name`` (per-row scales, else one per tensor); None if it can't."""
    from ..formats import get_codec

    codec = get_codec(name)
    rows, cols = codes.shape
    for s in (scales, np.float32(scales[0])):
        try:
            raw = codec.pack(codes, s)
            got, _ = codec.unpack(raw, rows, cols)
        except Exception:
            continue
        if np.array_equal(got, codes):
            return TernaryWeight(f"{name}-weight", rows, cols, codec.name, raw, codec)
    return None


def format_shapes() -> dict[str, tuple[int, int]]:
    """The formats whose packed bytes stand alone (``[rows, cols]`` each can hold)."""
    try:
        from ..formats import CODEC_NAMES, get_codec
    except ImportError:
        return {}
    out = {}
    for name in CODEC_NAMES:
        multiple = get_codec(name).col_multiple
        shape = (67, 2 * multiple if multiple > 1 else 259)
        probe = np.ones((1, shape[1]), dtype=np.int8)
        if _codec_weight(name, probe, np.ones(1, np.float32)) is not None:
            out[name] = shape
    return out


def check_load_ternary(p: Any, rng: np.random.Generator, fmt: str, n: int, k: int) -> None:
    """A weight in a file format (``weight.format``, ``weight.raw``) through matmul_i2s."""
    codes = random_codes(rng, n, k)
    scales = np.float16(rng.uniform(0.25, 4.0, size=n)).astype(np.float32)
    weight = _codec_weight(fmt, codes, scales)
    xq, xs = _quantized(rng, 5, k)
    want = REFERENCE.matmul_i2s(xq, xs, REFERENCE.load_ternary(weight))
    w_dev = p.load_ternary(weight)
    poison(p, want.shape)
    got = download(p, p.matmul_i2s(upload(p, xq), upload(p, xs), w_dev))
    assert_close(
        f"matmul_i2s of a {fmt} weight [{n}, {k}]", got, want, tol=TOLERANCES["matmul_i2s"]
    )


# --- the catalogue ---------------------------------------------------------------

#: (T, K, N) of the matrix products: size 1, odd, one off 4/32/128/256, the 2B model's.
MATMUL_SHAPES: tuple[tuple[int, int, int, bool], ...] = (
    (1, 1, 1, False),
    (1, 3, 5, False),
    (3, 31, 17, False),
    (2, 33, 1, False),
    (5, 127, 129, False),
    (6, 255, 257, False),
    (1, 257, 2, False),
    (17, 4, 3, False),
    (7, 1031, 67, False),
    (64, 129, 255, False),
    (1, 2560, 6912, True),
    (3, 6912, 2560, True),
)


def op_cases() -> list[OpCase]:
    """Every op-level case, ``large`` ones flagged."""
    cases: list[OpCase] = []

    def add(name: str, id_: str, check: Callable[..., None], large: bool = False, **params):
        cases.append(OpCase(name, f"{name}-{id_}", check, params, large))

    for dtype in ("float32", "float16", "int8", "int32"):
        for shape in ((1,), (7,), (3, 5), (2, 3, 5), (1031,)):
            add("to_device", f"{dtype}-{'x'.join(map(str, shape))}", check_roundtrip,
                shape=shape, dtype=dtype)  # fmt: skip
    for shape in ((1,), (3, 5), (2, 1, 7)):
        add("empty", "x".join(map(str, shape)), check_empty, shape=shape)
    for t, h, d in ((1, 1, 2), (3, 4, 16), (5, 3, 10)):
        add("reshape", f"T{t}-H{h}-D{d}", check_reshape, t=t, h=h, d=d)

    for vocab, dim, n_ids in (
        (1, 1, 1),
        (7, 33, 5),
        (1000, 129, 64),
        (32003, 17, 3),
        (300, 2560, 9),
    ):
        for dtype in TABLE_DTYPES:
            add("embedding", f"V{vocab}-D{dim}-n{n_ids}-{dtype}", check_embedding,
                large=vocab > 10000, vocab=vocab, dim=dim, n_ids=n_ids, dtype=dtype)  # fmt: skip

    for t, d, eps in ((1, 1, 1e-6), (1, 7, 1e-5), (5, 33, 1e-6), (6, 257, 1e-5), (2, 2560, 1e-5),
                      (3, 4097, 1e-6)):  # fmt: skip
        add("rmsnorm", f"T{t}-D{d}-eps{eps:g}", check_rmsnorm, t=t, d=d, eps=eps)

    for t, k in ((1, 1), (1, 5), (6, 31), (7, 129), (4, 257), (2, 2560), (64, 1031)):
        add("quantize_act", f"T{t}-K{k}", check_quantize_act, t=t, k=k, ties=False)
    for t, k in ((1, 7), (3, 300)):
        add("quantize_act", f"ties-T{t}-K{k}", check_quantize_act, t=t, k=k, ties=True)

    for t, k, n, large in MATMUL_SHAPES:
        add("matmul_i2s", f"T{t}-K{k}-N{n}", check_matmul_i2s, large=large,
            t=t, k=k, n=n, per_tensor=False)  # fmt: skip
    for t, k, n in ((1, 129, 33), (5, 2560, 7)):
        add("matmul_i2s", f"per-tensor-T{t}-K{k}-N{n}", check_matmul_i2s,
            t=t, k=k, n=n, per_tensor=True)  # fmt: skip
    for fmt, (n, k) in format_shapes().items():
        add("load_ternary", f"{fmt}-N{n}-K{k}", check_load_ternary, fmt=fmt, n=n, k=k)
    for t, k, n, large in MATMUL_SHAPES:
        add("linear", f"T{t}-K{k}-N{n}", check_linear, large=large, t=t, k=k, n=n)
        add("matmul_ternary_float", f"T{t}-K{k}-N{n}", check_matmul_ternary_float,
            large=large, t=t, k=k, n=n)  # fmt: skip
    for t, k, n, large in ((1, 1, 1, False), (3, 33, 1000, False), (2, 257, 4099, False),
                           (1, 2560, 8195, True)):  # fmt: skip
        for dtype in TABLE_DTYPES:
            add("matmul_dense", f"T{t}-K{k}-N{n}-{dtype}", check_matmul_dense, large=large,
                t=t, k=k, n=n, dtype=dtype)  # fmt: skip

    rope_cases = (
        (1, 1, 2, 2, "neox", 10000.0, 0),
        (1, 1, 2, 2, "norm", 10000.0, 5),
        (3, 2, 8, 8, "norm", 10000.0, 2),
        (5, 3, 64, 64, "neox", 10000.0, 4095),
        (2, 4, 128, 64, "neox", 500000.0, 100),
        (4, 2, 9, 6, "norm", 10000.0, 37),
        (3, 5, 10, 4, "neox", 10000.0, 17),
        (7, 20, 128, 128, "neox", 500000.0, 8191),
    )
    for t, h, d, rot, style, theta, max_pos in rope_cases:
        add("rope", f"T{t}-H{h}-D{d}-rot{rot}-{style}-pos{max_pos}", check_rope,
            t=t, h=h, d=d, rot_dim=rot, style=style, theta=theta, max_pos=max_pos)  # fmt: skip

    attention_cases = (
        (1, 1, 1, 1, ((0, 1),), 1.0, False),
        (16, 4, 2, 5, ((0, 7), (7, 1), (8, 1)), 1.0, False),
        (64, 20, 5, 128, ((0, 13), (13, 1)), 1.0, False),
        (300, 8, 1, 64, ((0, 257), (257, 1), (258, 3)), 1.0, False),
        (33, 6, 6, 3, ((0, 33),), 1.0, False),
        (
            40,
            4,
            4,
            16,
            ((0, 9), (9, 2)),
            30.0,
            False,
        ),  # large scores: softmax must subtract the max
        (2100, 20, 5, 128, ((0, 2047), (2047, 1), (2048, 1)), 1.0, True),
    )
    for s, hq, hkv, d, steps, q_scale, large in attention_cases:
        store_only = 1 if large else 0
        id_ = f"S{s}-Hq{hq}-Hkv{hkv}-D{d}-" + "-".join(f"{a}+{b}" for a, b in steps)
        add("attention", id_ + (f"-q*{q_scale:g}" if q_scale != 1 else ""), check_attention,
            large=large, cache_len=s, hq=hq, hkv=hkv, d=d, steps=steps, q_scale=q_scale,
            store_only=store_only)  # fmt: skip

    shapes = ((1, 1), (3, 7), (5, 6912), (2, 3, 5))
    for op in ("silu", "relu2"):
        for shape in shapes:
            add(op, "x".join(map(str, shape)), check_unary, op=op, shape=shape)
    for op in ("silu_mul", "relu2_mul", "add", "mul"):
        for shape in shapes:
            add(op, "x".join(map(str, shape)), check_binary, op=op, shape=shape)
    return cases
