// dot16(wword, xbase): the int dot product of one weight word (16 ternary codes, canonical
// I2 packing: code = value + 1, column 4j + i in bits 8j + 2i) with the 16 int8
// activations in words XQ_AT(xbase .. xbase + 3) (the includer defines XQ_AT(i): a buffer or
// shared memory). USE_INT_DOT: SPV_KHR_integer_dot_product (needs
// GL_EXT_spirv_intrinsics). matmul_i2s.comp and the decode layer's shaders.
#ifdef USE_INT_DOT
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4450)
int sdot4x8(int a, int b, spirv_literal int packed_format);

int dot16(uint wword, uint xbase) {
    int acc = 0;
    for (uint j = 0u; j < 4u; j++) {
        uint b = (wword >> (8u * j)) & 0xFFu;
        // four 2-bit codes -> four bytes 0..2 -> four signed bytes -1..1 (no borrows)
        uint c = (b & 3u) | ((b & 0xCu) << 6) | ((b & 0x30u) << 12) | ((b & 0xC0u) << 18);
        uint s = ((c | 0x80808080u) - 0x01010101u) ^ 0x80808080u;
        acc += sdot4x8(int(XQ_AT(xbase + j)), int(s), 0);
    }
    return acc;
}
#else
int dot16(uint wword, uint xbase) {
    int acc = 0;
    for (uint j = 0u; j < 4u; j++) {
        int a = int(XQ_AT(xbase + j));
        for (uint i = 0u; i < 4u; i++) {
            int code = int((wword >> (8u * j + 2u * i)) & 3u) - 1;
            acc += bitfieldExtract(a, int(8u * i), 8) * code;
        }
    }
    return acc;
}
#endif
