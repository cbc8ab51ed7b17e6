#version 450
// y[t, n] = (sum_k xq[t, k] * codes[n, k]) * scales[n] / xs[t], exact int32 accumulation.
// Weights: canonical I2 packing as uint words, 16 columns a word (code = value + 1,
// column 16w + 4j + i in bits 8j + 2i), `w_words` words a row. Activations: int8,
// four a word, 4 * w_words words a row, zero padded. LX threads share a row,
// ROWS rows a workgroup; USE_INT_DOT selects SPV_KHR_integer_dot_product. USE_SUBGROUP:
// one subgroup a row (whatever its size), reduced with subgroupAdd: no shared memory, no
// barriers; the workgroup is 1-D (local_size_x only). ADD: y += the product (a residual).
#extension GL_EXT_spirv_intrinsics : enable
#extension GL_GOOGLE_include_directive : require
#ifdef USE_SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
layout(local_size_x_id = 0) in;
#else
layout(local_size_x_id = 0, local_size_y_id = 1) in;
#endif

layout(std430, binding = 0) readonly buffer XQ { uint xq[]; };
layout(std430, binding = 1) readonly buffer XS { float xs[]; };
layout(std430, binding = 2) readonly buffer W { uint w[]; };
layout(std430, binding = 3) readonly buffer S { float scales[]; };
layout(constant_id = 2) const bool ADD = false;
layout(std430, binding = 4) buffer Y { float y[]; };
layout(push_constant) uniform P { uint n_rows; uint tokens; uint w_words; } p;

#define XQ_AT(i) xq[i]
#include "i2s_dot.glsl"

#ifdef USE_SUBGROUP
// TOKENS_PER_PASS tokens share each weight word read (prefill reads the weights T/4 times, not T).
#define TOKENS_PER_PASS 4u
void main() {
    uint x_words = 4u * p.w_words;
    for (uint t0 = gl_WorkGroupID.y * TOKENS_PER_PASS; t0 < p.tokens;
         t0 += gl_NumWorkGroups.y * TOKENS_PER_PASS) {
        uint nt = min(TOKENS_PER_PASS, p.tokens - t0);
        for (uint n = gl_WorkGroupID.x * gl_NumSubgroups + gl_SubgroupID; n < p.n_rows;
             n += gl_NumWorkGroups.x * gl_NumSubgroups) {
            int acc[TOKENS_PER_PASS];
            for (uint j = 0u; j < TOKENS_PER_PASS; j++) acc[j] = 0;
            for (uint k = gl_SubgroupInvocationID; k < p.w_words; k += gl_SubgroupSize) {
                uint word = w[n * p.w_words + k];
                for (uint j = 0u; j < nt; j++) acc[j] += dot16(word, (t0 + j) * x_words + 4u * k);
            }
            for (uint j = 0u; j < nt; j++) {
                int total = subgroupAdd(acc[j]);
                if (subgroupElect()) {
                    uint o = (t0 + j) * p.n_rows + n;
                    float v = float(total) * scales[n] / xs[t0 + j];
                    y[o] = ADD ? y[o] + v : v;
                }
            }
        }
    }
}
#else
shared int red[gl_WorkGroupSize.y][gl_WorkGroupSize.x];

void main() {
    uint lx = gl_LocalInvocationID.x, ly = gl_LocalInvocationID.y;
    uint x_words = 4u * p.w_words;
    for (uint t = gl_WorkGroupID.y; t < p.tokens; t += gl_NumWorkGroups.y) {
        for (uint n0 = gl_WorkGroupID.x * gl_WorkGroupSize.y; n0 < p.n_rows;
             n0 += gl_NumWorkGroups.x * gl_WorkGroupSize.y) {
            uint n = n0 + ly;
            int acc = 0;
            if (n < p.n_rows) {
                for (uint k = lx; k < p.w_words; k += gl_WorkGroupSize.x)
                    acc += dot16(w[n * p.w_words + k], t * x_words + 4u * k);
            }
            red[ly][lx] = acc;
            barrier();
            for (uint s = gl_WorkGroupSize.x / 2; s > 0; s >>= 1) {
                if (lx < s) red[ly][lx] += red[ly][lx + s];
                barrier();
            }
            if (lx == 0u && n < p.n_rows) {
                float v = float(red[ly][0]) * scales[n] / xs[t];
                y[t * p.n_rows + n] = ADD ? y[t * p.n_rows + n] + v : v;
            }
            barrier();
        }
    }
}
#endif
