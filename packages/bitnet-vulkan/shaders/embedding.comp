#version 450
// out[t, :] = table[ids[t] - row0, :] for the ids in row0 .. row0 + rows - 1 (a table too
// large for one buffer comes in parts of rows; the others are left to their part's dispatch);
// table float32 or (F16) float16, read as uint words.
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const bool F16 = false;

layout(std430, binding = 0) readonly buffer T { uint table[]; };
layout(std430, binding = 1) readonly buffer I { int ids[]; };
layout(std430, binding = 2) writeonly buffer O { float o[]; };
layout(push_constant) uniform P { uint total; uint cols; uint row0; uint rows; } p;

void main() {
    for (uint e = gl_GlobalInvocationID.x; e < p.total; e += gl_NumWorkGroups.x * gl_WorkGroupSize.x) {
        uint t = e / p.cols, k = e % p.cols;
        uint row = uint(ids[t]) - p.row0;  // ids below row0 wrap to large values
        if (row >= p.rows) continue;
        uint i = row * p.cols + k;
        if (F16) {
            vec2 h = unpackHalf2x16(table[i >> 1]);
            o[e] = (i & 1u) == 0u ? h.x : h.y;
        } else {
            o[e] = uintBitsToFloat(table[i]);
        }
    }
}
