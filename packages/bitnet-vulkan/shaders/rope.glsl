// The rotary embedding of element d of the vector at ROPE_SRC(row ..) at position pos
// (rope_store.comp, qkv_attend.comp). The includer defines ROPE_SRC(i) (the vector's
// source) and ROPE_ROT (rot_dim), and has the float tables cos_t and sin_t
// [context, rot_dim / 2], computed on the host in float64 as the reference does.
// NEOX pairs (i, i + half), NORM pairs (2i, 2i + 1); dims >= rot_dim pass through.
float rotated(uint row, uint d, uint pos) {
    if (d >= ROPE_ROT) return ROPE_SRC(row + d);
    uint half_dim = ROPE_ROT / 2u;
    uint i; float a, b; bool first;
    if (NEOX) {
        first = d < half_dim;
        i = first ? d : d - half_dim;
        a = ROPE_SRC(row + i); b = ROPE_SRC(row + i + half_dim);
    } else {
        first = (d & 1u) == 0u;
        i = d >> 1;
        a = ROPE_SRC(row + 2u * i); b = ROPE_SRC(row + 2u * i + 1u);
    }
    float c = cos_t[pos * half_dim + i], s = sin_t[pos * half_dim + i];
    return first ? a * c - b * s : b * c + a * s;
}
