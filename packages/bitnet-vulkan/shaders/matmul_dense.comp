#version 450
// y[t, n] = sum_k x[t, k] * table[n, k]; the table is float32 or (F16) float16,
// read as uint words either way. LX threads share a row, ROWS rows a workgroup.
layout(local_size_x_id = 0, local_size_y_id = 1) in;
layout(constant_id = 2) const bool F16 = false;

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer T { uint table[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P { uint n_rows; uint tokens; uint cols; } p;

shared float red[gl_WorkGroupSize.y][gl_WorkGroupSize.x];

float load(uint i) {
    if (F16) {
        vec2 h = unpackHalf2x16(table[i >> 1]);
        return (i & 1u) == 0u ? h.x : h.y;
    }
    return uintBitsToFloat(table[i]);
}

void main() {
    uint lx = gl_LocalInvocationID.x, ly = gl_LocalInvocationID.y;
    for (uint t = gl_WorkGroupID.y; t < p.tokens; t += gl_NumWorkGroups.y) {
        for (uint n0 = gl_WorkGroupID.x * gl_WorkGroupSize.y; n0 < p.n_rows;
             n0 += gl_NumWorkGroups.x * gl_WorkGroupSize.y) {
            uint n = n0 + ly;
            float acc = 0.0;
            if (n < p.n_rows) {
                for (uint k = lx; k < p.cols; k += gl_WorkGroupSize.x)
                    acc += x[t * p.cols + k] * load(n * p.cols + k);
            }
            red[ly][lx] = acc;
            barrier();
            for (uint s = gl_WorkGroupSize.x / 2; s > 0; s >>= 1) {
                if (lx < s) red[ly][lx] += red[ly][lx + s];
                barrier();
            }
            if (lx == 0u && n < p.n_rows) y[t * p.n_rows + n] = red[ly][0];
            barrier();
        }
    }
}
