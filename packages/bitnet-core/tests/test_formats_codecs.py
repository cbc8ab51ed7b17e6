"""Ternary codecs: round trips, byte identity with gguf-py and the layouts' sources."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType, quants

from bitnet_core.errors import QuantizationError, ShapeError, UnsupportedModelError
from bitnet_core.formats import CODEC_NAMES, get_codec
from bitnet_core.hal.weights import TernaryWeight

ROWS = (1, 3, 7, 13)


def _cols_for(name: str) -> tuple[int, ...]:
    multiple = get_codec(name).col_multiple
    if multiple == 1:
        return (1, 5, 33, 257, 300)
    return (multiple, 3 * multiple)


def _random(rows: int, cols: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    codes = rng.integers(-1, 2, size=(rows, cols)).astype(np.int8)
    scales = rng.uniform(0.01, 3.0, rows).astype(np.float32)
    return codes, scales


def _bound(name: str, scales: np.ndarray):
    codec = get_codec(name)
    return codec.with_scales(scales) if name == "qk256" else codec


def _stored(name: str, s: np.ndarray) -> np.ndarray:
    """What a layout keeps of a scale: f16 for block formats, f32 otherwise."""
    if name in ("tq2_0", "tq1_0", "bitnet32", "f16"):
        return s.astype(np.float16).astype(np.float32)
    if name == "bf16":
        from bitnet_core.hal.bf16 import bf16_to_f32, f32_to_bf16

        return bf16_to_f32(f32_to_bf16(s))
    return s


@pytest.mark.parametrize("name", CODEC_NAMES)
def test_round_trip_awkward_shapes(name):
    for i, rows in enumerate(ROWS):
        for cols in _cols_for(name):
            codes, scales = _random(rows, cols, seed=i * 1000 + cols)
            if name == "i2_s":
                scales[:] = scales[0]  # one scale per tensor
            codec = get_codec(name)
            raw = codec.pack(codes, scales)
            assert raw.dtype == np.uint8 and raw.size == codec.nbytes(rows, cols)
            got_codes, got_scales = _bound(name, scales).unpack(raw, rows, cols)
            assert got_codes.dtype == np.int8
            np.testing.assert_array_equal(got_codes, codes)
            live = codes.any(axis=1)  # an all-zero row may come back with scale 0
            np.testing.assert_array_equal(got_scales[live], _stored(name, scales)[live])


@pytest.mark.parametrize("name", CODEC_NAMES)
def test_rows_of_zeros_and_zero_blocks(name):
    codes, scales = _random(5, 3 * max(get_codec(name).col_multiple, 32), seed=7)
    codes[1] = 0
    codes[3, : codes.shape[1] // 3] = 0  # one zero block in a live row
    if name == "i2_s":
        scales[:] = scales[0]
    raw = get_codec(name).pack(codes, scales)
    got, got_s = _bound(name, scales).unpack(raw, *codes.shape)
    np.testing.assert_array_equal(got, codes)
    live = codes.any(axis=1)
    np.testing.assert_array_equal(got_s[live], _stored(name, scales)[live])


@pytest.mark.parametrize(
    "name,qtype", [("tq2_0", GGMLQuantizationType.TQ2_0), ("tq1_0", GGMLQuantizationType.TQ1_0)]
)
@pytest.mark.parametrize("rows", [1, 2, 5, 11])
def test_tq_byte_identical_to_gguf_quants(name, qtype, rows):
    codes, scales = _random(rows, 768, seed=rows)
    codes[0, 256:512] = 0  # an all-zero block: gguf writes d = 0 there
    x = codes.astype(np.float32) * scales[:, None]
    ours = get_codec(name).pack(codes, scales)
    ref = quants.quantize(x, qtype)
    assert ref.tobytes() == ours.tobytes()
    np.testing.assert_array_equal(
        get_codec(name).dequantize(ours, rows, 768), quants.dequantize(ref, qtype)
    )


def test_tq_unpacks_gguf_quantized_arbitrary_bytes_layout():
    """gguf-py dequantize and our unpack agree on every byte pattern of qs (TQ1_0 has no invalid code)."""
    rng = np.random.default_rng(3)
    blocks = rng.integers(0, 256, size=(6, 54), dtype=np.uint8)
    blocks[:, 52:54] = np.array([0.5], dtype=np.float16).view(np.uint8)
    deq = quants.dequantize(blocks.reshape(6, 54), GGMLQuantizationType.TQ1_0).reshape(6, 256)
    codes, s = get_codec("tq1_0").unpack(blocks.reshape(-1), 6, 256)
    np.testing.assert_array_equal(codes.astype(np.float32) * s[:, None], deq)


def _bitnet_cpp_quantize_i2_s(x: np.ndarray) -> bytes:
    """A line-by-line transcription of bitnet.cpp's ``quantize_i2_s`` (x86, QK_I2_S = 128)."""
    src = x.reshape(-1).astype(np.float64)
    n = src.size
    i2_scale = np.max(np.abs(src))
    q8 = [1 if abs(v) < 1e-6 else (2 if v * i2_scale > 0 else 0) for v in src]
    dst = bytearray(n // 4 + 32)
    for i in range(n // 128):
        for j in range(128):
            group_idx, group_pos = j // 32, j % 32
            dst[i * 32 + group_pos] |= (q8[i * 128 + j] << (6 - 2 * group_idx)) & 0xFF
    dst[n // 4 : n // 4 + 4] = np.array([i2_scale], dtype="<f4").tobytes()
    return bytes(dst)


def test_i2_s_matches_bitnet_cpp_quantizer():
    codes, _ = _random(3, 256, seed=11)
    scale = np.float32(0.37)
    x = codes.astype(np.float32) * scale
    ours = get_codec("i2_s").pack(codes, scale)
    assert ours.tobytes() == _bitnet_cpp_quantize_i2_s(x)


def test_i2_s_needs_one_scale_per_tensor():
    codes, scales = _random(4, 128, seed=1)
    with pytest.raises(QuantizationError, match="one scale per tensor"):
        get_codec("i2_s").pack(codes, scales)


def test_block_scales_must_agree_within_a_row():
    codes, _ = _random(2, 512, seed=2)
    raw = get_codec("tq2_0").pack(codes, np.float32(1.0))
    blocks = raw.reshape(-1, 66).copy()
    blocks[1, 64:66] = np.array([2.0], dtype=np.float16).view(np.uint8)  # row 0, block 1
    with pytest.raises(UnsupportedModelError, match="row 0 has different per-block scales"):
        get_codec("tq2_0").unpack(blocks.reshape(-1), 2, 512)


@pytest.mark.parametrize("name", ["tq2_0", "i2_s", "qk256", "bitnet32", "i2"])
def test_two_bit_code_3_is_rejected(name):
    codec = get_codec(name)
    cols = max(codec.col_multiple, 4)
    raw = np.full(codec.nbytes(2, cols), 0xFF, dtype=np.uint8)
    with pytest.raises(QuantizationError):
        _bound(name, np.ones(2, np.float32)).unpack(raw, 2, cols)


def test_qk256_layout_and_missing_scales():
    codes = np.zeros((1, 256), np.int8)
    codes[0, :4] = [-1, 0, 1, 1]
    raw = get_codec("qk256").pack(codes, 1.0)
    assert raw[0] == (0 | 1 << 2 | 2 << 4 | 2 << 6)  # weight 4i+k in bits 2k, code value+1
    assert raw.size == 64
    with pytest.raises(QuantizationError, match="no scales bound"):
        get_codec("qk256").unpack(raw, 1, 256)


def test_bitnet32_layout():
    codes = np.zeros((1, 40), np.int8)
    codes[0, 32] = 1  # second block, first weight
    raw = get_codec("bitnet32").pack(codes, np.float32(0.5))
    assert raw.size == 20  # two 10-byte blocks (the row is padded to 64)
    assert raw[10] == 2 | 1 << 2 | 1 << 4 | 1 << 6
    assert raw[18:20].view(np.float16)[0] == 0.5


def test_tl2_folds_sign():
    codes = np.array([[1, 1, 1, -1, -1, -1, 0]], np.int8)
    raw = get_codec("tl2").pack(codes, 1.0)
    # triples: (1,1,1) t=26 -> 0 with sign; (-1,-1,-1) t=0; (0,0,0) padded t=13
    assert raw[0] == 0 and raw[1] == 13 and raw[2] == 0b001
    np.testing.assert_array_equal(get_codec("tl2").unpack(raw, 1, 7)[0], codes)


def test_unknown_codec_and_bad_input():
    with pytest.raises(QuantizationError, match="unknown ternary format"):
        get_codec("q4_0")
    with pytest.raises(QuantizationError, match="multiple of 256"):
        get_codec("tq2_0").pack(np.zeros((2, 100), np.int8), 1.0)
    with pytest.raises(QuantizationError, match="ternary codes"):
        get_codec("tl1").pack(np.full((2, 4), 2, np.int8), 1.0)
    with pytest.raises(ShapeError):
        get_codec("tl1").pack(np.zeros((0, 4), np.int8), 1.0)
    with pytest.raises(QuantizationError, match="cannot hold"):
        get_codec("tq1_0").unpack(np.zeros(10, np.uint8), 1, 256)


def test_codecs_plug_into_ternary_weight():
    codes, scales = _random(3, 256, seed=5)
    codec = get_codec("tq1_0")
    w = TernaryWeight("w", 3, 256, codec.name, codec.pack(codes, scales), codec)
    np.testing.assert_array_equal(w.codes(), codes)
    np.testing.assert_array_equal(w.packed_i2(), TernaryWeight.from_codes(codes, 1).packed_i2())


def test_aliases():
    assert get_codec("I2S").name == "i2_s"
    assert get_codec("BitNet32-F16").name == "bitnet32"
