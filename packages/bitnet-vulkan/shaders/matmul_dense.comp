#version 450
// y[t, offset + n] = sum_k x[t, k] * table[n, k] (rows `stride` apart: a table too large for
// one buffer comes in parts of rows, each a dispatch); the table is float32 or (F16) float16,
// read as uint words either way. LX threads share a row, ROWS rows a workgroup; with
// USE_SUBGROUP one subgroup a row, reduced with subgroupAdd (1-D workgroup).
#ifdef USE_SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
layout(local_size_x_id = 0) in;
#else
layout(local_size_x_id = 0, local_size_y_id = 1) in;
#endif
layout(constant_id = 2) const bool F16 = false;

// Read as 16-byte vectors: where cols % 8 == 0 each step takes 8 columns in one or two
// loads (float16 / float32); otherwise element by element.
layout(std430, binding = 0) readonly buffer X { vec4 x4[]; };
layout(std430, binding = 1) readonly buffer T { uvec4 table4[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P { uint n_rows; uint tokens; uint cols; uint stride; uint offset; } p;

float xat(uint i) { return x4[i >> 2][i & 3u]; }

float load(uint i) {
    if (F16) {
        vec2 h = unpackHalf2x16(table4[i >> 3][(i >> 1) & 3u]);
        return (i & 1u) == 0u ? h.x : h.y;
    }
    return uintBitsToFloat(table4[i >> 2][i & 3u]);
}

// Partial dot product of row n with token t over the columns this invocation owns:
// chunks of 8 columns c = lane, lane + lanes, ... (or single columns when unaligned).
float row_dot(uint t, uint n, uint lane, uint lanes) {
    float acc = 0.0;
    uint xb = t * p.cols, rb = n * p.cols;
    if (p.cols % 8u == 0u) {
        for (uint c = lane; c < p.cols / 8u; c += lanes) {
            vec4 xa = x4[(xb >> 2) + 2u * c], xc = x4[(xb >> 2) + 2u * c + 1u];
            vec4 wa, wc;
            if (F16) {
                uvec4 v = table4[(rb >> 3) + c];
                wa = vec4(unpackHalf2x16(v.x), unpackHalf2x16(v.y));
                wc = vec4(unpackHalf2x16(v.z), unpackHalf2x16(v.w));
            } else {
                wa = uintBitsToFloat(table4[(rb >> 2) + 2u * c]);
                wc = uintBitsToFloat(table4[(rb >> 2) + 2u * c + 1u]);
            }
            acc += dot(xa, wa) + dot(xc, wc);
        }
    } else {
        for (uint k = lane; k < p.cols; k += lanes) acc += xat(xb + k) * load(rb + k);
    }
    return acc;
}

#ifdef USE_SUBGROUP
void main() {
    for (uint t = gl_WorkGroupID.y; t < p.tokens; t += gl_NumWorkGroups.y) {
        for (uint n = gl_WorkGroupID.x * gl_NumSubgroups + gl_SubgroupID; n < p.n_rows;
             n += gl_NumWorkGroups.x * gl_NumSubgroups) {
            float acc = subgroupAdd(row_dot(t, n, gl_SubgroupInvocationID, gl_SubgroupSize));
            if (subgroupElect()) y[t * p.stride + p.offset + n] = acc;
        }
    }
}
#else
shared float red[gl_WorkGroupSize.y][gl_WorkGroupSize.x];

void main() {
    uint lx = gl_LocalInvocationID.x, ly = gl_LocalInvocationID.y;
    for (uint t = gl_WorkGroupID.y; t < p.tokens; t += gl_NumWorkGroups.y) {
        for (uint n0 = gl_WorkGroupID.x * gl_WorkGroupSize.y; n0 < p.n_rows;
             n0 += gl_NumWorkGroups.x * gl_WorkGroupSize.y) {
            uint n = n0 + ly;
            red[ly][lx] = n < p.n_rows ? row_dot(t, n, lx, gl_WorkGroupSize.x) : 0.0;
            barrier();
            for (uint s = gl_WorkGroupSize.x / 2; s > 0; s >>= 1) {
                if (lx < s) red[ly][lx] += red[ly][lx + s];
                barrier();
            }
            if (lx == 0u && n < p.n_rows) y[t * p.stride + p.offset + n] = red[ly][0];
            barrier();
        }
    }
}
#endif
