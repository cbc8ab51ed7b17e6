// One row's rmsnorm + int8 quantization by the whole workgroup: norm_quant.comp's, and
// the prologue of the decode layer's shaders (qkv_attend.comp, norm_gemv.comp), so both
// make the same bits on a device whose subgroups have one size. The includer defines
//   NR_COLS, NR_WORDS (ceil(cols / 4) code words), NR_EPS, NR_WEIGHT(k) (the norm's weight),
//   vec4 word_values(uint t, uint w)   the four values of word w (0 past the row's end),
//   NR_STORE(t, w, word)               where code word w of row t goes,
// and includes quant.glsl. Every invocation calls norm_quant_row (it has barriers).
//
// Invocation i holds the output words w = i + j * WG (j < HELD), the four values of each,
// in registers when the row fits (NR_WORDS <= HELD * WG): the row is read once, all the
// loads in flight together. Longer rows compute the values again in each pass (the same
// sums: the words past the end add zeros).
const uint HELD = 8u;  // words (4 values each) an invocation holds

shared float red[gl_WorkGroupSize.x];  // one partial result a subgroup

// Sum and max over the workgroup: each subgroup's, then the subgroups' in order (the same
// result in every invocation).
float workgroup_sum(float v) {
    v = subgroupAdd(v);
    if (subgroupElect()) red[gl_SubgroupID] = v;
    barrier();
    float s = 0.0;
    for (uint i = 0u; i < gl_NumSubgroups; i++) s += red[i];
    barrier();
    return s;
}
float workgroup_max(float v) {
    v = subgroupMax(v);
    if (subgroupElect()) red[gl_SubgroupID] = v;
    barrier();
    float m = 0.0;
    for (uint i = 0u; i < gl_NumSubgroups; i++) m = max(m, red[i]);
    barrier();
    return m;
}

uint codes(vec4 y, uint w, float q) {  // four int8 codes of y * q, a word
    uint word = 0u;
    [[unroll]] for (uint i = 0u; i < 4u; i++) {
        if (4u * w + i < NR_COLS) {
            precise float v = y[i] * q;
            int c = int(clamp(roundEven(v), -128.0, 127.0));
            word |= (uint(c) & 0xFFu) << (8u * i);
        }
    }
    return word;
}

// y = v / sqrt(mean(v^2) + eps) * weight, s = 127 / max|y| (correctly rounded), codes
// round(y * s) four int8 a word through NR_STORE; returns s (in every invocation).
float norm_quant_row(uint t) {
    uint lid = gl_LocalInvocationID.x, wg = gl_WorkGroupSize.x;
    bool held = NR_WORDS <= HELD * wg;
    vec4 v[HELD];
    float s = 0.0;
    if (held) {
        [[unroll]] for (uint j = 0u; j < HELD; j++) {
            uint w = lid + j * wg;
            v[j] = w < NR_WORDS ? word_values(t, w) : vec4(0.0);
            s += dot(v[j], v[j]);
        }
    } else {
        for (uint w = lid; w < NR_WORDS; w += wg) {
            vec4 u = word_values(t, w);
            s += dot(u, u);
        }
    }
    float inv = 1.0 / sqrt(workgroup_sum(s) / float(NR_COLS) + NR_EPS);
    float m = 0.0;
    if (held) {
        [[unroll]] for (uint j = 0u; j < HELD; j++) {
            uint w = lid + j * wg;
            [[unroll]] for (uint i = 0u; i < 4u; i++) {
                uint k = min(4u * w + i, NR_COLS - 1u);  // past the end: v = 0
                v[j][i] = v[j][i] * inv * NR_WEIGHT(k);
            }
            m = max(m, max(max(abs(v[j].x), abs(v[j].y)), max(abs(v[j].z), abs(v[j].w))));
        }
    } else {
        for (uint w = lid; w < NR_WORDS; w += wg) {
            vec4 u = word_values(t, w);
            [[unroll]] for (uint i = 0u; i < 4u; i++) {
                uint k = min(4u * w + i, NR_COLS - 1u);
                m = max(m, abs(u[i] * inv * NR_WEIGHT(k)));
            }
        }
    }
    float q = correctly_rounded_quotient(127.0, max(workgroup_max(m), 1e-5));
    if (held) {
        [[unroll]] for (uint j = 0u; j < HELD; j++) {
            uint w = lid + j * wg;
            if (w < NR_WORDS) NR_STORE(t, w, codes(v[j], w, q));
        }
    } else {
        for (uint w = lid; w < NR_WORDS; w += wg) {
            vec4 u = word_values(t, w);
            [[unroll]] for (uint i = 0u; i < 4u; i++) {
                uint k = min(4u * w + i, NR_COLS - 1u);
                u[i] = u[i] * inv * NR_WEIGHT(k);
            }
            NR_STORE(t, w, codes(u, w, q));
        }
    }
    return q;
}
