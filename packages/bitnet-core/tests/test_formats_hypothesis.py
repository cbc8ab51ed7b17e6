"""Property tests of every codec: round trips, and arbitrary bytes never crash an unpacker."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bitnet_core.errors import BitnetError
from bitnet_core.formats import CODEC_NAMES, get_codec, quantize

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def ternary_case(draw):
    name = draw(st.sampled_from(CODEC_NAMES))
    codec = get_codec(name)
    rows = draw(st.integers(1, 9))
    if codec.col_multiple > 1:
        cols = codec.col_multiple * draw(st.integers(1, 3))
    else:
        cols = draw(st.integers(1, 80))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    codes = rng.integers(-1, 2, size=(rows, cols)).astype(np.int8)
    zero_rows = draw(st.lists(st.integers(0, rows - 1), max_size=rows))
    codes[zero_rows] = 0
    scale = draw(st.floats(1e-3, 1e3, allow_nan=False))
    return name, codes, np.float32(scale)


@SETTINGS
@given(ternary_case())
def test_every_codec_round_trips(case):
    name, codes, scale = case
    codec = get_codec(name)
    raw = codec.pack(codes, scale)
    assert raw.size == codec.nbytes(*codes.shape)
    if name == "qk256":
        codec = codec.with_scales(scale)
    got, scales = codec.unpack(raw, *codes.shape)
    np.testing.assert_array_equal(got, codes)
    live = codes.any(axis=1)
    if name in ("tq2_0", "tq1_0", "bitnet32", "f16"):
        expected = np.float32(np.float16(scale))
        np.testing.assert_array_equal(scales[live], expected)
    elif name != "bf16":
        np.testing.assert_array_equal(scales[live], scale)


@st.composite
def garbage_case(draw):
    name = draw(st.sampled_from(CODEC_NAMES))
    codec = get_codec(name)
    rows = draw(st.integers(0, 6))
    cols = draw(st.integers(0, 3)) * max(codec.col_multiple, 1) or draw(st.integers(0, 40))
    need = codec.nbytes(max(rows, 0), max(cols, 0)) if rows > 0 and cols > 0 else 0
    extra = draw(st.integers(-8, 8))
    data = draw(st.binary(min_size=max(need + extra, 0), max_size=max(need + extra, 0)))
    return name, rows, cols, np.frombuffer(data, dtype=np.uint8)


@SETTINGS
@given(garbage_case())
def test_unpacking_arbitrary_bytes_gives_codes_or_a_clear_error(case):
    name, rows, cols, raw = case
    codec = get_codec(name)
    if name == "qk256":
        codec = codec.with_scales(1.0)
    try:
        codes, scales = codec.unpack(raw, rows, cols)
    except BitnetError:
        return
    assert codes.shape == (rows, cols) and codes.dtype == np.int8
    assert scales.shape == (rows,)
    assert codes.size == 0 or (codes.min() >= -1 and codes.max() <= 1)


@SETTINGS
@given(
    st.sampled_from(["i2s", "tl1", "tl2"]),
    st.integers(1, 6),
    st.integers(1, 50),
    st.integers(0, 2**32 - 1),
)
def test_quantize_round_trips_ternary_rows(qtype, rows, cols, seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(-1, 2, (rows, cols)).astype(np.float32) * rng.uniform(0.01, 9, (rows, 1))
    x = x.astype(np.float32)
    np.testing.assert_array_equal(quantize(x, qtype).dequantize(), x)
