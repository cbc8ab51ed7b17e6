#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_EXT_spirv_intrinsics : enable
// Two of the four launches of one token's decode layer (VulkanRunner, issue 48):
//   norm_gemv_add (ADD):  y[n] += W[n] . int8(rmsnorm(x, nw))           the o and down rows
//   norm_gemv_act (ACT):  y[n] = act(W[n] . xq) * W[rows + n] . xq     gate | up -> f
// with xq = int8(rmsnorm(x, nw)) of the whole input row x (cols floats). Every workgroup
// normalises and quantises x itself into shared memory (norm_row.glsl, the sums of
// norm_quant.comp: the runner gives both the same workgroup size), so no launch waits on
// another's workgroups; then one subgroup a row (as matmul_i2s.comp's subgroup variant:
// exact int32 sums, the same epilogue), rows n = group * subgroups + subgroup, ... < rows.
// ACT: RELU2 squared ReLU, else SiLU (act.glsl, norm_quant.comp's MODE 1 / 2 values).
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint XL_WORDS = 64u;  // >= 4 * w_words
layout(constant_id = 2) const bool RELU2 = false;

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer Wt { float weight[]; };
layout(std430, binding = 2) readonly buffer W { uint w[]; };
layout(std430, binding = 3) readonly buffer S { float scales[]; };
layout(std430, binding = 4) buffer Y { float y[]; };
layout(push_constant) uniform P {
    uint cols; uint words; float eps; uint rows; uint w_words;
} p;

#include "quant.glsl"
#include "act.glsl"

shared uint xl[XL_WORDS];  // the row's int8 codes, four a word, zeros to 4 * w_words

vec4 word_values(uint t, uint wd) {
    vec4 v = vec4(0.0);
    [[unroll]] for (uint i = 0u; i < 4u; i++) {
        uint k = 4u * wd + i;
        if (k < p.cols) v[i] = x[k];
    }
    return v;
}
#define NR_COLS p.cols
#define NR_WORDS p.words
#define NR_EPS p.eps
#define NR_WEIGHT(k) weight[k]
#define NR_STORE(t, wd, word) xl[wd] = (word)
#include "norm_row.glsl"

#define XQ_AT(i) xl[i]
#include "i2s_dot.glsl"

int row_dot(uint n) {  // the int dot product of weight row n with xl (every lane: the sum)
    int acc = 0;
    for (uint k = gl_SubgroupInvocationID; k < p.w_words; k += gl_SubgroupSize)
        acc += dot16(w[n * p.w_words + k], 4u * k);
    return subgroupAdd(acc);
}

void main() {
    float xs = norm_quant_row(0u);
    for (uint wd = p.words + gl_LocalInvocationID.x; wd < 4u * p.w_words; wd += gl_WorkGroupSize.x)
        xl[wd] = 0u;
    barrier();
    for (uint n = gl_WorkGroupID.x * gl_NumSubgroups + gl_SubgroupID; n < p.rows;
         n += gl_NumWorkGroups.x * gl_NumSubgroups) {
#ifdef ACT
        int gate = row_dot(n), up = row_dot(p.rows + n);
        if (subgroupElect()) {
            float g = float(gate) * scales[n] / xs;
            float u = float(up) * scales[p.rows + n] / xs;
            y[n] = (RELU2 ? relu2(g) : silu(g)) * u;
        }
#else
        int total = row_dot(n);
        if (subgroupElect()) {
            float v = float(total) * scales[n] / xs;
            y[n] = y[n] + v;
        }
#endif
    }
}
