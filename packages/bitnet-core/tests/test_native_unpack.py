"""The native readers of the files' ternary layouts against the numpy codecs.

``_native.unpack_raw`` (what ``Codec.unpack`` runs for I2_S, TQ2_0, TQ1_0)
and ``TernaryMatrix.from_raw`` (the CPU providers' load, straight into the
kernels' layouts) must read every tensor as ``Codec.unpack_numpy`` does, and
refuse (ValueError) every tensor the codec refuses or reads by another rule,
so that the codec's own error reaches the user. Random codes and scales of
awkward shapes: one row, rows across the thread pool's 16-row chunks, zero
rows, zero-scale blocks that hold codes.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from native_cpu import native_provider

from bitnet_core.errors import BitnetError
from bitnet_core.formats import get_codec
from bitnet_core.hal.weights import TernaryWeight
from bitnet_core.native import load_native
from bitnet_core.providers.reference import ReferenceProvider

MOD, _WHY = load_native()
pytestmark = pytest.mark.skipif(MOD is None, reason=f"no native module: {_WHY}")

FORMATS = ("i2_s", "tq2_0", "tq1_0")
# (rows, blocks of the format's width): one row, one chunk, several chunks and a part
SHAPES = [(1, 1), (3, 2), (16, 3), (37, 1), (70, 5)]


def _rng(*key: object) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def _tensor(fmt: str, rows: int, blocks: int) -> tuple[np.ndarray, int, int]:
    """Raw bytes of a random [rows, blocks * width] tensor in ``fmt``, with an all-zero
    row and, for the block layouts, zero-scale blocks that still hold codes."""
    codec = get_codec(fmt)
    cols = blocks * codec.col_multiple
    rng = _rng(fmt, rows, blocks)
    codes = rng.integers(-1, 2, (rows, cols)).astype(np.int8)
    codes[rows // 2] = 0
    if fmt == "i2_s":
        return codec.pack(codes, np.float32(0.37)), rows, cols
    raw = codec.pack(codes, rng.uniform(0.05, 2.0, rows).astype(np.float32))
    nbytes = 66 if fmt == "tq2_0" else 54
    per_block = raw.reshape(rows * blocks, nbytes)
    dead = rng.random(rows * blocks) < 0.2
    per_block[dead, nbytes - 2 :] = 0  # scale 0: the codec reads the block as zeros
    return raw, rows, cols


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("fmt", FORMATS)
def test_unpack_raw_equals_codec(fmt, shape):
    raw, rows, cols = _tensor(fmt, *shape)
    codec = get_codec(fmt)
    want_codes, want_scales = codec.unpack_numpy(raw, rows, cols)
    for threads in (1, 3):
        codes, scales = MOD.unpack_raw(fmt, raw, rows, cols, threads)
        np.testing.assert_array_equal(codes, want_codes)
        np.testing.assert_array_equal(scales, want_scales)
    codes, scales = codec.unpack(raw, rows, cols)  # the codec's own path: native first
    np.testing.assert_array_equal(codes, want_codes)
    np.testing.assert_array_equal(scales, want_scales)


@pytest.mark.parametrize("layout", ["i2_128", "tq1_160"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("fmt", FORMATS)
def test_from_raw_equals_codec(fmt, shape, layout):
    raw, rows, cols = _tensor(fmt, *shape)
    want_codes, want_scales = get_codec(fmt).unpack_numpy(raw, rows, cols)
    factor = _rng("factor", rows).uniform(0.5, 2.0, rows).astype(np.float32)
    for f, threads in ((None, 1), (factor[:1], 2), (factor, 3)):
        m = MOD.TernaryMatrix.from_raw(fmt, raw, rows, cols, layout, "w", f, threads)
        assert m.layout == layout and m.shape == (rows, cols)
        np.testing.assert_array_equal(m.codes(), want_codes)
        scales = want_scales if f is None else (want_scales * f).astype(np.float32)
        np.testing.assert_array_equal(m.scales, scales)


def _spoil(fmt: str, raw: np.ndarray, rows: int, cols: int, how: str) -> np.ndarray:
    """A copy of ``raw`` with one fault in its last row (the last thread chunk)."""
    bad = raw.copy()
    if fmt == "i2_s":
        if how == "code3":
            bad[(rows - 1) * cols // 4 + 5] = 0xFF
        else:  # the tensor scale
            bad[rows * cols // 4 : rows * cols // 4 + 4] = np.frombuffer(
                np.float32(np.nan).tobytes(), np.uint8
            )
        return bad
    nbytes, blocks = (66, 64) if fmt == "tq2_0" else (54, 52)
    per_block = bad.reshape(rows, -1, nbytes)
    if how == "code3":
        if fmt == "tq1_0":
            pytest.skip("every TQ1_0 byte is a valid set of trits")
        per_block[-1, 0, 3] = 0xFF
    else:  # two live blocks of one row with different scales
        per_block[-1, :, :blocks] = 0  # every weight -1 (TQ2_0: code 0; TQ1_0: all trits 0)
        per_block[-1, 0, blocks:] = np.frombuffer(np.float16(0.5).tobytes(), np.uint8)
        per_block[-1, 1, blocks:] = np.frombuffer(np.float16(0.25).tobytes(), np.uint8)
    return bad


@pytest.mark.parametrize("how", ["code3", "scale"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_refused_rows_get_the_codecs_error(fmt, how):
    """A tensor the codec refuses: the native readers refuse it too, and
    ``Codec.unpack`` raises the numpy codec's own error."""
    raw, rows, cols = _tensor(fmt, 40, 2)
    bad = _spoil(fmt, raw, rows, cols, how)
    codec = get_codec(fmt)
    with pytest.raises(BitnetError) as want:
        codec.unpack_numpy(bad, rows, cols)
    with pytest.raises(ValueError, match="not read natively"):
        MOD.unpack_raw(fmt, bad, rows, cols, 2)
    with pytest.raises(ValueError, match="not read natively"):
        MOD.TernaryMatrix.from_raw(fmt, bad, rows, cols, "i2_128", "w", None, 2)
    with pytest.raises(type(want.value)) as got:
        codec.unpack(bad, rows, cols)
    assert str(got.value) == str(want.value)


@pytest.mark.parametrize("fmt", FORMATS)
def test_short_or_foreign_data_is_refused(fmt):
    raw, rows, cols = _tensor(fmt, 3, 1)
    with pytest.raises(ValueError, match="does not fit"):
        MOD.unpack_raw(fmt, raw[:-40], rows, cols)
    with pytest.raises(ValueError, match="does not fit"):
        MOD.unpack_raw(fmt, raw, rows, cols + 1)
    with pytest.raises(ValueError, match="no native reader"):
        MOD.unpack_raw("qk256", raw, rows, cols)
    with pytest.raises(ValueError, match="scale factor"):
        MOD.TernaryMatrix.from_raw(fmt, raw, rows, cols, "i2_128", "w", np.ones(2, np.float32))


@pytest.mark.parametrize("layout", ["auto", "i2_128", "tq1_160"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_provider_loads_file_layouts_natively(fmt, layout):
    """The CPU provider's load of a file's tensor computes what the reference does."""
    raw, rows, cols = _tensor(fmt, 37, 2)
    w = TernaryWeight("w", rows, cols, fmt, raw, get_codec(fmt))
    assert w.native_source() == (fmt, None)
    prov = native_provider("cpu-scalar", 2, layout=layout)
    x = _rng("x", fmt).standard_normal((3, cols)).astype(np.float32)
    ref = ReferenceProvider()
    np.testing.assert_allclose(
        prov.linear(x, prov.load_ternary(w)), ref.linear(x, ref.load_ternary(w)), rtol=1e-5
    )


@pytest.mark.parametrize("layout", ["i2_128", "tq1_160"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_from_file_equals_from_raw(tmp_path, fmt, layout):
    """The tensor's bytes read from a file at an offset (pread) give the matrix its
    bytes in memory give; a file cut short is refused."""
    raw, rows, cols = _tensor(fmt, 70, 3)
    path = tmp_path / "t.bin"
    path.write_bytes(b"\x7f" * 1000 + raw.tobytes())
    factor = np.float32([1.5])
    want = MOD.TernaryMatrix.from_raw(fmt, raw, rows, cols, layout, "w", factor, 2)
    got = MOD.TernaryMatrix.from_file(fmt, str(path), 1000, rows, cols, layout, "w", factor, 3)
    np.testing.assert_array_equal(got.codes(), want.codes())
    np.testing.assert_array_equal(got.scales, want.scales)
    path.write_bytes(b"\x7f" * 1000 + raw.tobytes()[:-100])
    with pytest.raises(ValueError, match="shorter"):
        MOD.TernaryMatrix.from_file(fmt, str(path), 1000, rows, cols, layout, "w", None, 2)
    with pytest.raises(ValueError, match="cannot read"):
        MOD.TernaryMatrix.from_file(fmt, str(tmp_path / "none"), 0, rows, cols, layout, "w")


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_int8_head_from_file_equals_from_memory(tmp_path, dtype):
    """DenseI8.fill_file (pread, rows on the pool) builds the int8 head fill_rows builds:
    the same logits through the int8 kernel, bit for bit."""
    rng = _rng("head", np.dtype(dtype).name)
    table = rng.standard_normal((300, 96)).astype(dtype)
    table[7] = 0  # an all-zero row
    path = tmp_path / "head.bin"
    path.write_bytes(b"\0" * 64 + table.tobytes())
    want = MOD.DenseI8.empty(*table.shape)
    want.fill_rows(0, table)
    got = MOD.DenseI8.empty(*table.shape)
    got.fill_file(str(path), 64, dtype == np.float16, 3)
    kernels = MOD.Kernels("scalar", 2)
    x = rng.standard_normal((3, 96)).astype(np.float32)
    np.testing.assert_array_equal(
        kernels.matmul_dense_i8(x, got, None), kernels.matmul_dense_i8(x, want, None)
    )
    np.testing.assert_array_equal(
        kernels.matmul_dense_i8(x, got, table), kernels.matmul_dense_i8(x, want, table)
    )
    path.write_bytes(b"\0" * 64 + table.tobytes()[:-10])
    with pytest.raises(ValueError, match="shorter"):
        MOD.DenseI8.empty(*table.shape).fill_file(str(path), 64, dtype == np.float16)


def test_tq2_0_from_file_as_it_is(tmp_path):
    """Layout tq2_0 from a file: the bytes as they are (from_tq2_0's matrix), and the
    tensors from_tq2_0 refuses refused too (the codec then decides)."""
    rng = _rng("tq2_0 as it is")
    codec = get_codec("tq2_0")
    codes = rng.integers(-1, 2, (40, 512)).astype(np.int8)
    raw = codec.pack(codes, rng.uniform(0.1, 2.0, 40).astype(np.float32))
    path = tmp_path / "t.bin"
    path.write_bytes(b"\0" * 10 + raw.tobytes())
    want = MOD.TernaryMatrix.from_tq2_0(raw, 40, 512, "w")
    got = MOD.TernaryMatrix.from_file("tq2_0", str(path), 10, 40, 512, "tq2_0", "w", None, 3)
    assert got.layout == "tq2_0" and not got.in_place
    np.testing.assert_array_equal(got.codes(), want.codes())
    np.testing.assert_array_equal(got.scales, want.scales)
    bad = raw.reshape(40, 2, 66).copy()
    bad[33, 1, 64:66] = 0  # a zero-scale block that holds codes
    path.write_bytes(b"\0" * 10 + bad.tobytes())
    with pytest.raises(ValueError, match="zero-scale block"):
        MOD.TernaryMatrix.from_file("tq2_0", str(path), 10, 40, 512, "tq2_0", "w", None, 3)
    i2_s, rows, cols = _tensor("i2_s", 2, 2)
    path.write_bytes(i2_s.tobytes())
    with pytest.raises(ValueError, match="only TQ2_0"):
        MOD.TernaryMatrix.from_file("i2_s", str(path), 0, rows, cols, "tq2_0", "w")
