"""The SDK's named weight packings: the documented bit positions, round trips, padding."""

from __future__ import annotations

import numpy as np
import pytest

from bitnet_core.errors import QuantizationError
from bitnet_core.hal.weights import pack_i2
from bitnet_core.sdk.packing import PACKINGS, pack_lanes, pack_rows, unpack_lanes


@pytest.mark.parametrize("cols", [1, 3, 15, 16, 17, 63, 64, 65, 130])
@pytest.mark.parametrize("multiple", [16, 64])
def test_i2_lanes_puts_column_16w_4a_b_at_byte_b_bits_2a(cols, multiple):
    codes = np.random.default_rng(cols).integers(-1, 2, (3, cols)).astype(np.int8)
    words = pack_lanes(codes, multiple)
    assert words.dtype == np.uint32 and words.shape == (3, -(-cols // multiple) * multiple // 16)
    for r in range(3):
        for c in range(words.shape[1] * 16):
            w, a, b = c // 16, (c % 16) // 4, c % 4
            want = int(codes[r, c]) + 1 if c < cols else 1  # padding: the code of 0
            assert (int(words[r, w]) >> (8 * b + 2 * a)) & 3 == want
    np.testing.assert_array_equal(unpack_lanes(words, cols), codes)
    np.testing.assert_array_equal(unpack_lanes(words.view(np.uint8), cols), codes)  # as bytes


@pytest.mark.parametrize("cols", [1, 4, 5, 16, 33])
def test_i2_rows_is_canonical_i2_padded_with_zero_codes_to_words(cols):
    codes = np.random.default_rng(cols).integers(-1, 2, (2, cols)).astype(np.int8)
    packed = pack_rows(codes)
    assert packed.shape == (2, 4 * -(-cols // 16))
    np.testing.assert_array_equal(
        packed[:, : -(-cols // 4)][:, : cols // 4], pack_i2(codes)[:, : cols // 4]
    )
    np.testing.assert_array_equal(PACKINGS["i2_rows"].unpack(packed, cols), codes)
    assert (packed[:, -(-cols // 4) :] == 0x55).all()  # whole padding bytes: four zero codes


def test_packings_reject_codes_outside_ternary():
    bad = np.array([[0, 2]], np.int8)
    for packing in PACKINGS.values():
        with pytest.raises(QuantizationError):
            packing.pack(bad)
