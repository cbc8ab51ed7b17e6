#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_control_flow_attributes : require
// rmsnorm fused with the int8 activation quantization of the next ternary matmul, one
// workgroup a row. The row's values v[k], k < cols, depend on MODE:
//   0: v = x[t, k]                                    (rmsnorm + quantize)
//   1: v = silu(x[t, k]) * x[t, cols + k]             (gate|up rows: act * up, ffn_sub_norm)
//   2: v = relu2(x[t, k]) * x[t, cols + k]
//   3: v = split-K attention combined: x holds, per (t, head, split), [m, l, acc[dim]]
//      (running max, sum of exp, unnormalized output); v = sum acc e^(m - M) / sum l e^(m - M)
//      at record ((t * heads + head) * stride + split) (stride >= splits)
// Rows first .. first + rows - 1 (a batched step combines each sequence's own splits).
// then y = v * (1 / sqrt(mean(v^2) + eps)) * weight (as rmsnorm.comp), s[t] = 127 / max|y|
// correctly rounded and xq = round(y * s) four int8 a word (as quantize_act.comp).
//
// The row's norm and codes: norm_row.glsl (a workgroup a row, values held in registers;
// a subgroup a row with a pass of dependent loads for each of the sum of squares, the max
// and the codes took 104 us a row on an H100, 77% of a 2B-4T decode step).
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint MODE = 0;

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer Wt { float weight[]; };
layout(std430, binding = 2) writeonly buffer XQ { uint xq[]; };
layout(std430, binding = 3) writeonly buffer XS { float xs[]; };
layout(push_constant) uniform P {
    uint rows; uint cols; uint xq_words; float eps; uint dim; uint splits;
    uint first; uint stride;
} p;

#include "quant.glsl"
#include "act.glsl"

// MODE 3: each (head, split)'s weight e^(m - M) / sum l e^(m - M) of the row, when
// heads x splits fit (else each value computes its own)
const uint MAX_WEIGHTS = 2048u;
shared float split_weight[MAX_WEIGHTS];
bool weights_shared() { return MODE == 3u && (p.cols / p.dim) * p.splits <= MAX_WEIGHTS; }

// The split records of row t's head h start at x[head_base(t, h)], p.dim + 2 floats each.
uint head_base(uint t, uint h) { return (t * (p.cols / p.dim) + h) * p.stride * (p.dim + 2u); }

// The largest running max M of the head's splits at base.
float head_max(uint base) {
    float m = -1.0 / 0.0;
    for (uint s = 0u; s < p.splits; s++) m = max(m, x[base + s * (p.dim + 2u)]);
    return m;
}

// e^(m - M) of the split record at r (empty splits: m = M = -inf gives 1, their l and acc
// being 0).
float split_scale(uint r, float m) { return x[r] == m ? 1.0 : exp(x[r] - m); }

// Row t's split weights into split_weight (an invocation a head).
void split_weights(uint t) {
    uint heads = p.cols / p.dim, rec = p.dim + 2u;
    barrier();  // the previous row's weights are no longer read
    for (uint h = gl_LocalInvocationID.x; h < heads; h += gl_WorkGroupSize.x) {
        uint base = head_base(t, h);
        float m = head_max(base);
        float l = 0.0;
        for (uint s = 0u; s < p.splits; s++)
            l += x[base + s * rec + 1u] * split_scale(base + s * rec, m);
        for (uint s = 0u; s < p.splits; s++)
            split_weight[h * p.splits + s] = split_scale(base + s * rec, m) / l;
    }
    barrier();
}

float value(uint t, uint k) {
    if (MODE == 0u) return x[t * p.cols + k];
    if (MODE == 1u) return silu(x[t * 2u * p.cols + k]) * x[t * 2u * p.cols + p.cols + k];
    if (MODE == 2u) return relu2(x[t * 2u * p.cols + k]) * x[t * 2u * p.cols + p.cols + k];
    uint h = k / p.dim, d = k - h * p.dim;
    uint rec = p.dim + 2u;
    uint base = head_base(t, h);
    if (weights_shared()) {
        float a = 0.0;
        for (uint s = 0u; s < p.splits; s++)
            a += split_weight[h * p.splits + s] * x[base + s * rec + 2u + d];
        return a;
    }
    float m = head_max(base);
    float l = 0.0, a = 0.0;
    for (uint s = 0u; s < p.splits; s++) {
        uint r = base + s * rec;
        float e = split_scale(r, m);
        l += x[r + 1u] * e;
        a += x[r + 2u + d] * e;
    }
    return a / l;
}

vec4 word_values(uint t, uint w) {  // the four values of word w (0 past the row's end)
    vec4 v = vec4(0.0);
    [[unroll]] for (uint i = 0u; i < 4u; i++) {
        uint k = 4u * w + i;
        if (k < p.cols) v[i] = value(t, k);
    }
    return v;
}

#define NR_COLS p.cols
#define NR_WORDS p.xq_words
#define NR_EPS p.eps
#define NR_WEIGHT(k) weight[k]
#define NR_STORE(t, w, word) xq[(t) * p.xq_words + (w)] = (word)
#include "norm_row.glsl"

void main() {
    for (uint r = gl_WorkGroupID.x; r < p.rows; r += gl_NumWorkGroups.x) {
        uint t = p.first + r;
        if (weights_shared()) split_weights(t);
        float q = norm_quant_row(t);
        if (gl_LocalInvocationID.x == 0u) xs[t] = q;
    }
}
