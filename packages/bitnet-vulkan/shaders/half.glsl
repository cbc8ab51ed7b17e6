// float32 -> float16 bits rounded to nearest even (numpy's astype(float16)), on every device:
// packHalf2x16's rounding is left to the implementation.
uint half_bits(float v) {
    uint x = floatBitsToUint(v);
    uint sign = (x >> 16) & 0x8000u;
    uint e = (x >> 23) & 0xFFu;
    uint m = x & 0x7FFFFFu;
    if (e == 0xFFu) return sign | 0x7C00u | (m != 0u ? 0x200u : 0u);  // inf, nan
    int ex = int(e) - 112;  // the float16 exponent field
    if (ex >= 31) return sign | 0x7C00u;
    uint h, rem, halfway;
    if (ex > 0) {
        h = (uint(ex) << 10) | (m >> 13);
        rem = m & 0x1FFFu;
        halfway = 0x1000u;
    } else {  // a float16 subnormal (or zero)
        if (ex < -10) return sign;
        m |= 0x800000u;
        uint shift = uint(14 - ex);
        h = m >> shift;
        rem = m & ((1u << shift) - 1u);
        halfway = 1u << (shift - 1u);
    }
    if (rem > halfway || (rem == halfway && (h & 1u) == 1u)) h += 1u;  // a carry rounds up to inf
    return sign | h;
}

uint pack_halves(float a, float b) { return half_bits(a) | (half_bits(b) << 16); }
