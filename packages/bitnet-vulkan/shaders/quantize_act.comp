#version 450
#extension GL_GOOGLE_include_directive : require
// Per-row absmax int8 quantization (BitNet b1.58 activations).
// s[t] = 127 / max(max|x[t]|, 1e-5) (correctly rounded, as numpy's float32 division),
// xq[t, k] = clamp(roundEven(x[t, k] * s[t]), -128, 127), four int8 a uint word,
// rows padded with zeros to `xq_words` words (a multiple of 4: 16 columns).
// One workgroup per row, or with USE_SUBGROUP one subgroup per row (no barriers).
layout(local_size_x_id = 0) in;
#ifdef USE_SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer XQ { uint xq[]; };
layout(std430, binding = 2) writeonly buffer XS { float xs[]; };
layout(push_constant) uniform P { uint rows; uint cols; uint xq_words; } p;


#include "quant.glsl"

uint quantize_word(uint base, uint w, float q) {
    uint word = 0u;
    for (uint i = 0u; i < 4u; i++) {
        uint k = 4u * w + i;
        if (k < p.cols) {
            precise float v = x[base + k] * q;
            int c = int(clamp(roundEven(v), -128.0, 127.0));
            word |= (uint(c) & 0xFFu) << (8u * i);
        }
    }
    return word;
}

#ifdef USE_SUBGROUP
void main() {
    uint lane = gl_SubgroupInvocationID, lanes = gl_SubgroupSize;
    for (uint t = gl_WorkGroupID.x * gl_NumSubgroups + gl_SubgroupID; t < p.rows;
         t += gl_NumWorkGroups.x * gl_NumSubgroups) {
        uint base = t * p.cols;
        float m = 0.0;
        for (uint k = lane; k < p.cols; k += lanes) m = max(m, abs(x[base + k]));
        float q = correctly_rounded_quotient(127.0, max(subgroupMax(m), 1e-5));
        if (subgroupElect()) xs[t] = q;
        for (uint w = lane; w < p.xq_words; w += lanes) xq[t * p.xq_words + w] = quantize_word(base, w, q);
    }
}
#else
shared float red[gl_WorkGroupSize.x];

void main() {
    uint lid = gl_LocalInvocationID.x;
    for (uint t = gl_WorkGroupID.x; t < p.rows; t += gl_NumWorkGroups.x) {
        uint base = t * p.cols;
        float m = 0.0;
        for (uint k = lid; k < p.cols; k += gl_WorkGroupSize.x) m = max(m, abs(x[base + k]));
        red[lid] = m;
        barrier();
        for (uint s = gl_WorkGroupSize.x / 2; s > 0; s >>= 1) {
            if (lid < s) red[lid] = max(red[lid], red[lid + s]);
            barrier();
        }
        float amax = max(red[0], 1e-5);
        barrier();
        float q = correctly_rounded_quotient(127.0, amax);
        if (lid == 0) xs[t] = q;
        for (uint w = lid; w < p.xq_words; w += gl_WorkGroupSize.x)
            xq[t * p.xq_words + w] = quantize_word(base, w, q);
        barrier();
    }
}
#endif
