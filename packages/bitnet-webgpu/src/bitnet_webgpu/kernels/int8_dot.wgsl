// Included by the ternary matmuls (#include int8_dot): the dot product of four
// int8 (a, signed) with four unsigned bytes (b, the weight codes 0..2).
fn dot4(a: u32, b: u32) -> i32 {
#ifdef DOT4
    return dot4I8Packed(a, b);
#else
    var s = 0;
    for (var i = 0u; i < 4u; i++) {
        let av = extractBits(i32(a), 8u * i, 8u);
        let bv = i32((b >> (8u * i)) & 0xffu);
        s += av * bv;
    }
    return s;
#endif
}
