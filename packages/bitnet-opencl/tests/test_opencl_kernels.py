"""OpenCL-specific kernel checks beyond the conformance suite: both matmul paths
(GEMV for decode, tiled GEMM for prefill) at their boundaries, exactness where
the device has float64, the packed weight layout, and the build without float64."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from ocl_helpers import acts, ternary

from bitnet_core.sdk.packing import pack_lanes, unpack_lanes
from bitnet_opencl import OpenCLProvider
from bitnet_opencl.kernels import Features
from bitnet_opencl.provider import GEMV_MAX_TOKENS
from bitnet_opencl.runtime import Runtime
from bitnet_opencl.weights import padded_cols


def pack_blocks(codes):
    return pack_lanes(codes, 64).view(np.uint8)


def unpack_blocks(packed, cols):
    return unpack_lanes(packed.view(np.uint32), cols)


def _i2s(p, ref, rng, t, n, k):
    w = ternary(rng, n, k)
    xq, xs = ref.quantize_act(acts(rng, t, k))
    got = p.to_host(p.matmul_i2s(p.to_device(xq), p.to_device(xs), p.load_ternary(w)))
    return got, ref.matmul_i2s(xq, xs, ref.load_ternary(w))


@pytest.mark.parametrize("k", [1, 63, 64, 65, 127, 128, 129, 2560 + 7])
@pytest.mark.parametrize("t", [1, GEMV_MAX_TOKENS, GEMV_MAX_TOKENS + 1, 32, 33])
def test_matmul_i2s_paths_are_exact(ocl, ref, rng, t, k):
    """GEMV (t <= 8) and GEMM (t > 8), K around the 64-code blocks: integer sums are
    exact, and with float64 the epilogue is the reference's bit for bit."""
    got, want = _i2s(ocl, ref, rng, t, 37, k)
    if ocl.runtime.features.fp64:
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)


def test_quantize_act_matches_exactly(ocl, ref, rng):
    """Scales are the correctly rounded 127/amax; codes round half to even."""
    x = acts(rng, 7, 333)
    x[3] = 0.0
    x[4, :8] = [127.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 126.5]
    x[4, 8:] = 0.25
    xq, xs = ocl.quantize_act(ocl.to_device(x))
    rq, rs = ref.quantize_act(x)
    np.testing.assert_array_equal(ocl.to_host(xs), rs)
    np.testing.assert_array_equal(ocl.to_host(xq), rq)


def test_packed_layout_round_trips(rng):
    for cols in (1, 5, 64, 65, 200):
        w = ternary(rng, 3, cols)
        packed = pack_blocks(w.codes())
        assert packed.shape == (3, padded_cols(cols) // 4) and packed.shape[1] % 16 == 0
        codes = unpack_blocks(packed, padded_cols(cols))
        np.testing.assert_array_equal(codes[:, :cols], w.codes())
        assert not codes[:, cols:].any()  # padding is the code of 0


def test_packed_layout_lines_up_four_columns_a_byte():
    """(word >> 2i) & 0x03030303 holds columns 4i..4i+3 of the word's 16, in byte order."""
    codes = np.array([[-1, 0, 1, 1] * 4 + [0] * 48], dtype=np.int8)
    codes[0, 4:8] = [1, 1, -1, 0]
    word = int(pack_blocks(codes)[0, :4].view("<u4")[0])
    for i in range(4):
        lanes = (word >> (2 * i)) & 0x03030303
        got = [((lanes >> (8 * j)) & 3) - 1 for j in range(4)]
        assert got == codes[0, 4 * i : 4 * i + 4].tolist()


def test_resident_weight_bytes(ocl, rng):
    w = ocl.load_ternary(ternary(rng, 10, 2560))
    assert w.shape == (10, 2560)
    assert w.nbytes == 10 * 2560 // 4 + 10 * 4  # 2 bits a weight plus the scales


def test_float32_build_quantize_act(ocl_no_fp64, ref, rng):
    x = acts(rng, 9, 517)
    xq, xs = ocl_no_fp64.quantize_act(ocl_no_fp64.to_device(x))
    rq, rs = ref.quantize_act(x)
    np.testing.assert_array_equal(ocl_no_fp64.to_host(xs), rs)  # the fma-corrected division
    np.testing.assert_array_equal(ocl_no_fp64.to_host(xq), rq)


@pytest.mark.parametrize("t", [1, 20])
def test_float32_build_matmul_and_norm(ocl_no_fp64, ref, rng, t):
    got, want = _i2s(ocl_no_fp64, ref, rng, t, 21, 300)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)
    x, w = acts(rng, t, 300), acts(rng, 300, scale=1.0)
    got = ocl_no_fp64.to_host(ocl_no_fp64.rmsnorm(ocl_no_fp64.to_device(x), w, 1e-5))
    np.testing.assert_allclose(got, ref.rmsnorm(x, w, 1e-5), rtol=2e-5, atol=1e-6)


def test_attention_long_context(ocl, ref, rng):
    """More keys than one work-group's chunk: the online softmax across chunks."""
    cap, start, t = 300, 290, 3
    kc, vc = acts(rng, cap, 2, 24), acts(rng, cap, 2, 24)
    q = acts(rng, t, 4, 24, scale=0.3)
    got = ocl.to_host(ocl.attention(ocl.to_device(q), ocl.to_device(kc), ocl.to_device(vc), start))
    np.testing.assert_allclose(got, ref.attention(q, kc, vc, start), rtol=1e-4, atol=2e-5)


def test_linear_reuses_the_quantized_input(ocl, ref, rng, monkeypatch):
    """q/k/v of one input quantize it once; a new input (or a cache write) quantizes again."""
    x = ocl.to_device(acts(rng, 2, 96))
    ws = [ternary(rng, n, 96) for n in (7, 9, 11)]
    calls = []
    real = ocl.quantize_act
    monkeypatch.setattr(ocl, "quantize_act", lambda a: calls.append(1) or real(a))
    for w in ws:
        got = ocl.to_host(ocl.linear(x, ocl.load_ternary(w)))
        want = ref.linear(ocl.to_host(x), ref.load_ternary(w))
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)
    assert len(calls) == 1
    ocl.linear(ocl.to_device(acts(rng, 2, 96)), ocl.load_ternary(ws[0]))
    assert len(calls) == 2


@pytest.fixture(scope="module")
def ocl_packed(ocl):
    """The 4-codes-a-byte decode (the dp4a path of NVIDIA / dot8 devices) with an
    emulated dot product, so that path runs here too."""
    p = OpenCLProvider(device=ocl.device_info.address)
    p.probe(explicit=True)
    feats = ocl.runtime.features
    p._rt = Runtime(ocl.runtime.cl, ocl.device_info, Features(fp64=feats.fp64, packed_dot=True))
    assert "-DUSE_PACKED_DOT=1" in p.runtime.features.options()
    return p


@pytest.mark.parametrize("t,k", [(1, 65), (3, 2560), (20, 200)])
def test_packed_dot_path(ocl_packed, ref, rng, t, k):
    got, want = _i2s(ocl_packed, ref, rng, t, 19, k)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)
    w, x = ternary(rng, 13, k), acts(rng, t, k)
    got = ocl_packed.to_host(ocl_packed.matmul_ternary_float(x, ocl_packed.load_ternary(w)))
    want = ref.matmul_ternary_float(x, ref.load_ternary(w))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@pytest.mark.parametrize(
    "positions", [[0, 1, 2], [700, 701], [5, 3, 9], [4, 4], [300], [1999, 2000, 2001]]
)
def test_rope_position_tables(ocl, ref, rng, positions):
    """Ascending runs index one growing table; other position sets get their own."""
    pos = np.array(positions)
    x = acts(rng, len(positions), 3, 16)
    for style in ("neox", "norm"):
        got = ocl.to_host(ocl.rope(ocl.to_device(x), pos, 10000.0, style, 12))
        want = ref.rope(x, pos, 10000.0, style, 12)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(x).max())


@given(
    codes=hnp.arrays(
        np.int8,
        st.tuples(st.integers(1, 4), st.integers(1, 150)),
        elements=st.integers(-1, 1),
    )
)
@settings(max_examples=60, deadline=None)
def test_packed_layout_property(codes):
    np.testing.assert_array_equal(unpack_blocks(pack_blocks(codes), codes.shape[1]), codes)


@pytest.mark.parametrize("start,t", [(255, 2), (1000, 1), (700, 3), (511, 1)])
def test_attention_split_keys(ocl, ref, rng, start, t):
    """Long contexts split the keys over work-groups (including a split that is
    empty for the first query) and merge the partial softmaxes."""
    cap = start + t
    kc, vc = acts(rng, cap, 2, 40), acts(rng, cap, 2, 40)
    q = acts(rng, t, 4, 40, scale=0.3)
    got = ocl.to_host(ocl.attention(ocl.to_device(q), ocl.to_device(kc), ocl.to_device(vc), start))
    np.testing.assert_allclose(got, ref.attention(q, kc, vc, start), rtol=1e-4, atol=2e-5)
