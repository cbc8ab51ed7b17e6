#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
// rmsnorm fused with the int8 activation quantization of the next ternary matmul, one
// subgroup a row (no barriers). The row's values v[k], k < cols, depend on MODE:
//   0: v = x[t, k]                                    (rmsnorm + quantize)
//   1: v = silu(x[t, k]) * x[t, cols + k]             (gate|up rows: act * up, ffn_sub_norm)
//   2: v = relu2(x[t, k]) * x[t, cols + k]
//   3: v = split-K attention combined: x holds, per (t, head, split), [m, l, acc[dim]]
//      (running max, sum of exp, unnormalized output); v = sum acc e^(m - M) / sum l e^(m - M)
//      at record ((t * heads + head) * stride + split) (stride >= splits)
// Rows first .. first + rows - 1 (a batched step combines each sequence's own splits).
// then y = v * (1 / sqrt(mean(v^2) + eps)) * weight (as rmsnorm.comp), s[t] = 127 / max|y|
// correctly rounded and xq = round(y * s) four int8 a word (as quantize_act.comp).
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

float silu(float v) { return v / (1.0 + exp(-v)); }
float relu2(float v) { float r = max(v, 0.0); return r * r; }

float value(uint t, uint k) {
    if (MODE == 0u) return x[t * p.cols + k];
    if (MODE == 1u) return silu(x[t * 2u * p.cols + k]) * x[t * 2u * p.cols + p.cols + k];
    if (MODE == 2u) return relu2(x[t * 2u * p.cols + k]) * x[t * 2u * p.cols + p.cols + k];
    uint h = k / p.dim, d = k - h * p.dim;
    uint rec = p.dim + 2u;
    uint base = (t * (p.cols / p.dim) + h) * p.stride * rec;
    float m = -1.0 / 0.0;
    for (uint s = 0u; s < p.splits; s++) m = max(m, x[base + s * rec]);
    float l = 0.0, a = 0.0;
    for (uint s = 0u; s < p.splits; s++) {
        uint r = base + s * rec;
        float e = x[r] == m ? 1.0 : exp(x[r] - m);  // empty splits: m = -inf, l = acc = 0
        l += x[r + 1u] * e;
        a += x[r + 2u + d] * e;
    }
    return a / l;
}

void main() {
    uint lane = gl_SubgroupInvocationID, lanes = gl_SubgroupSize;
    for (uint r = gl_WorkGroupID.x * gl_NumSubgroups + gl_SubgroupID; r < p.rows;
         r += gl_NumWorkGroups.x * gl_NumSubgroups) {
        uint t = p.first + r;
        float s = 0.0;
        for (uint k = lane; k < p.cols; k += lanes) { float v = value(t, k); s += v * v; }
        float inv = 1.0 / sqrt(subgroupAdd(s) / float(p.cols) + p.eps);
        float m = 0.0;
        for (uint k = lane; k < p.cols; k += lanes) m = max(m, abs(value(t, k) * inv * weight[k]));
        float q = correctly_rounded_quotient(127.0, max(subgroupMax(m), 1e-5));
        if (subgroupElect()) xs[t] = q;
        for (uint w = lane; w < p.xq_words; w += lanes) {
            uint word = 0u;
            for (uint i = 0u; i < 4u; i++) {
                uint k = 4u * w + i;
                if (k < p.cols) {
                    precise float v = (value(t, k) * inv * weight[k]) * q;
                    int c = int(clamp(roundEven(v), -128.0, 127.0));
                    word |= (uint(c) & 0xFFu) << (8u * i);
                }
            }
            xq[t * p.xq_words + w] = word;
        }
    }
}
