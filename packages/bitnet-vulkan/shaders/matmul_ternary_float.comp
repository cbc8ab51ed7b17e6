#version 450
// y[t, n] = (sum_k x[t, k] * codes[n, k]) * scales[n] with float activations,
// weights in the canonical I2 packing as uint words (see matmul_i2s.comp).
layout(local_size_x_id = 0, local_size_y_id = 1) in;

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer W { uint w[]; };
layout(std430, binding = 2) readonly buffer S { float scales[]; };
layout(std430, binding = 3) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P { uint n_rows; uint tokens; uint w_words; uint cols; } p;

shared float red[gl_WorkGroupSize.y][gl_WorkGroupSize.x];

void main() {
    uint lx = gl_LocalInvocationID.x, ly = gl_LocalInvocationID.y;
    for (uint t = gl_WorkGroupID.y; t < p.tokens; t += gl_NumWorkGroups.y) {
        for (uint n0 = gl_WorkGroupID.x * gl_WorkGroupSize.y; n0 < p.n_rows;
             n0 += gl_NumWorkGroups.x * gl_WorkGroupSize.y) {
            uint n = n0 + ly;
            float acc = 0.0;
            if (n < p.n_rows) {
                for (uint k = lx; k < p.w_words; k += gl_WorkGroupSize.x) {
                    uint word = w[n * p.w_words + k];
                    for (uint i = 0u; i < 16u; i++) {
                        uint col = 16u * k + i;
                        if (col < p.cols)
                            acc += x[t * p.cols + col] * float(int((word >> (2u * i)) & 3u) - 1);
                    }
                }
            }
            red[ly][lx] = acc;
            barrier();
            for (uint s = gl_WorkGroupSize.x / 2; s > 0; s >>= 1) {
                if (lx < s) red[ly][lx] += red[ly][lx + s];
                barrier();
            }
            if (lx == 0u && n < p.n_rows) y[t * p.n_rows + n] = red[ly][0] * scales[n];
            barrier();
        }
    }
}
